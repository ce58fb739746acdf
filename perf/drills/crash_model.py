"""The crash drill's model of what the clients were told, and the client that tells it."""

import http.client
import json
import threading
from collections import Counter

from common import Conn

CLIENT_TIMEOUT_S = 10


class Uncertain(Exception):
    """No usable answer: the operation may or may not have taken effect."""


class Client(Conn):
    def __init__(self, port):
        super().__init__(port, CLIENT_TIMEOUT_S)

    def call(self, method, path, body=None):
        """(status, parsed JSON or None); raises Uncertain on a transport failure."""
        try:
            status, _, raw = self.exchange(method, path, None if body is None else json.dumps(body))
        except (OSError, http.client.HTTPException) as e:
            raise Uncertain(type(e).__name__)
        try:
            return status, (json.loads(raw) if raw else None)
        except ValueError:
            return status, None



# ---------------------------------------------------------------------------------------------
# The model: what each key's connection was told
# ---------------------------------------------------------------------------------------------

class Key:
    """One (tenant, key), driven by one connection only."""

    __slots__ = ("tenant", "key", "versions", "uncertain", "pending", "dead", "why")

    def __init__(self, tenant, key):
        self.tenant, self.key = tenant, key
        # version -> {"fire_at": us, "acked": us, "ended": us or None, "end": str or None}
        self.versions = {}
        self.uncertain = False
        self.pending = None      # the version the model holds pending now (None: nothing)
        self.dead = None         # reject keys: the dead letter's version the model expects
        self.why = []            # the key's history, for a failure's message

    def scheduled(self, status, version, fire_at, acked):
        prev = self.pending
        if status == 200 and prev is not None:
            self.end(prev, "replaced", acked)
        # 201: nothing was pending, so an earlier version fired (or was cancelled before).
        self.versions[version] = {"fire_at": fire_at, "acked": acked, "ended": None, "end": None}
        self.pending = version
        self.why.append(f"{status} v{version}")

    def cancelled(self, acked):
        if self.pending is not None:
            self.end(self.pending, "cancelled", acked)
        self.pending = None
        self.why.append("cancel 204")

    def end(self, version, how, at):
        v = self.versions.get(version)
        if v is not None and v["ended"] is None:
            v["ended"], v["end"] = at, how

    def unsure(self, what):
        self.uncertain = True
        self.why.append(f"uncertain: {what}")


class Model:
    def __init__(self):
        self.keys = {}
        self.lock = threading.Lock()
        self.acked_versions = []     # (tenant, key, version) in ack order per key, for the check
        self.refusals = Counter()

    def key(self, tenant, key):
        with self.lock:
            k = self.keys.get((tenant, key))
            if k is None:
                k = self.keys[(tenant, key)] = Key(tenant, key)
            return k
