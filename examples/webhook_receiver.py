#!/usr/bin/env python3
"""A webhook receiver for punctual's deliveries, standard library only.

It verifies Punctual-Signature (HMAC-SHA256 of "<t>.<body>", compared in constant time)
against any of its secrets (comma-separated: during a key roll both the new and the old one),
refuses timestamps more than 5 minutes from now, and processes each delivery once even though
punctual delivers at least once: a retry after a timeout, or a repeat after a crash, carries
the same (tenant, key, version) in its signed body. It de-duplicates on that, never on the
unsigned Idempotency-Key header, which anyone who can reach it could forge.

    PUNCTUAL_WEBHOOK_SECRET=new-secret-…,old-secret-… python3 examples/webhook_receiver.py 127.0.0.1:9000

Answers 204 when processed (or already processed), 401 when the signature does not verify
(permanent for punctual: the timer becomes a dead letter), 400 for a body that is not a
delivery. A real receiver records processed keys in its database, in the same transaction as
the work the delivery triggers; the set here is only in memory.
"""

import hashlib
import hmac
import json
import os
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRETS = [s.encode() for s in os.environ.get("PUNCTUAL_WEBHOOK_SECRET", "").split(",") if s]
TOLERANCE_S = 300
REMEMBERED = 100_000

_seen = OrderedDict()
_lock = threading.Lock()


def verify(secrets: list, header: str, body: bytes, now: int) -> bool:
    """True when some v1 signature in `header` signs `body` with one of `secrets` and `t` is
    recent."""
    t, sigs = None, []
    for part in header.split(","):
        k, _, v = part.strip().partition("=")
        if k == "t" and v.isdigit():
            t = int(v)
        elif k == "v1":
            sigs.append(v)
    if t is None or not sigs or abs(now - t) > TOLERANCE_S:
        return False
    signed = f"{t}.".encode() + body
    expected = [hmac.new(secret, signed, hashlib.sha256).hexdigest() for secret in secrets]
    return any(hmac.compare_digest(e, s) for e in expected for s in sigs)


def first_time(key: str) -> bool:
    with _lock:
        if key in _seen:
            return False
        _seen[key] = True
        if len(_seen) > REMEMBERED:
            _seen.popitem(last=False)
        return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: punctual reuses its connections

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if SECRETS and not verify(SECRETS, self.headers.get("Punctual-Signature", ""), body, int(time.time())):
            return self.answer(401)
        try:
            delivery = json.loads(body)
            key = f"{delivery['tenant']}/{delivery['key']}/{delivery['version']}"
        except (ValueError, KeyError, TypeError):
            return self.answer(400)
        if first_time(key):
            print(f"timer {delivery['tenant']}/{delivery['key']} v{delivery['version']} "
                  f"attempt {delivery['attempt']}: {delivery['payload']}", flush=True)
        else:
            print(f"repeat of {key}: already processed", flush=True)
        self.answer(204)

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9000").rpartition(":")
    ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler).serve_forever()
