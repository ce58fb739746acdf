#!/usr/bin/env python3
"""Crash drill: SIGKILL in the middle of deliveries, restart on the same port, and hold what
came out against what the clients were told. Python standard library only.

Usage:  perf/drills/crash.py --bin target/release/punctual [--store journal|redis] [SECONDS]
        (perf/drills/crash.sh builds the binary and calls this; read that first.)

What it does, in order:

 1. Starts a webhook receiver on a free loopback port, and, with --store redis, its own
    redis-server on another. Then the real `punctual serve` on a free port with 2 shards, no
    pinning, spinning off, and four tenants:
        shop    callbacks to /ok/ (always 200), signed with a webhook secret
        flaky   callbacks to /flaky/ (503 for half the attempts, by a hash of the attempt),
                up to 30 attempts, backoff 20-200 ms
        reject  callbacks to /reject/ (always 400): every fire becomes a dead letter
        plain   (redis only) no callback: fires go to the stream punctual:fired:{plain}
 2. For SECONDS (default 40), 16 keep-alive connections send a mix of PUT (new and
    replacing), DELETE and batch POST for shop, flaky and plain (due in 0.3-4 s); each key
    belongs to one connection, so the order of its answers is the order of its operations.
    Four more connections walk reject keys through dead-letter scenarios: fire, become dead,
    then nothing / a new far timer under the same key / a new timer and the dead letter
    discarded / the dead letter discarded / re-driven / re-drive refused while a timer is
    pending (409).
 3. Meanwhile, every 2-5 s, the server gets SIGKILL and is started again on the same port and
    data directory (or Redis), whatever it is doing: committing, firing, delivering.
 4. When the load stops, it waits (bounded) until every timer that must be delivered was, reads
    /metrics, kills and restarts once more, and reads every reject key's pending timer and dead
    letter. Then SIGTERM, which must exit 0.

The model: an answer 2xx is an acknowledgement. A request that got no answer (the kill cut
the connection), a 503 or any other surprise makes its key *uncertain*: the checks that need
to know its exact history skip it (they are listed below with the keys they cover).

Checks (each failure is listed at the end; exit 1 if any):
  - never early: every attempt's fired_at_us >= its fire_at_us, and the receiver got it at or
    after fire_at_us on the same host clock; fire_at_us in the body is the acknowledged one
    (all keys);
  - nothing acknowledged is lost: every version of a certain shop/flaky key that no
    acknowledged operation replaced or cancelled was delivered (a 2xx from the receiver); for
    plain, it is in the stream (certain keys);
  - nothing cancelled or replaced comes back: no attempt of a version starts (fired_at_us)
    after the acknowledgement of the operation that replaced or cancelled it (all keys);
  - nothing invented: every delivered version of a certain key is one that was acknowledged;
  - versions only grow: each key's acknowledged versions increase strictly, across restarts;
  - dead letters and pending timers under one key are both kept, across restarts, exactly as
    acknowledged (certain reject keys);
  - signatures verify (shop);
  - /metrics is readable after the last restart; SIGTERM exits 0.

Reported, not checked: restarts and their time to healthy, delivery counts, repeats (at least
once allows them), lateness of first attempts for timers not due during an outage.

Environment (defaults in brackets): CRASH_CONNS [16], CRASH_REJECT_CONNS [4], CRASH_PAUSE_MS
[40, the most a connection waits between requests], CRASH_KILL_MIN_S
[2], CRASH_KILL_MAX_S [5], CRASH_SETTLE_S [90], CRASH_SEED [1], CRASH_KEEP=1 keeps the work
directory (server logs, the receiver's record) even when everything passed.
"""

import argparse
import hashlib
import hmac
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def env_int(name, default):
    return int(os.environ.get(name, default))


SHARDS = 2
CONNS = env_int("CRASH_CONNS", 16)
REJECT_CONNS = env_int("CRASH_REJECT_CONNS", 4)
KILL_MIN_S = float(os.environ.get("CRASH_KILL_MIN_S", "2"))
KILL_MAX_S = float(os.environ.get("CRASH_KILL_MAX_S", "5"))
SETTLE_S = env_int("CRASH_SETTLE_S", 90)
PAUSE_S = float(os.environ.get("CRASH_PAUSE_MS", "40")) / 1000  # up to this between a connection's requests
SEED = env_int("CRASH_SEED", 1)
SECRET = "crash-drill-secret-0123456789abcdef0123456789"   # 45 bytes
DELAY_MS = (300, 4000)
FAR_DELAY_MS = 3_600_000
CLIENT_TIMEOUT_S = 10
CHILDREN = []


def now_us():
    return time.time_ns() // 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class Uncertain(Exception):
    """No usable answer: the operation may or may not have taken effect."""


class Client:
    def __init__(self, port):
        self.port, self.conn = port, None

    def call(self, method, path, body=None):
        """(status, parsed JSON or None); raises Uncertain on a transport failure."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=CLIENT_TIMEOUT_S)
        try:
            data = None if body is None else json.dumps(body)
            headers = {"Content-Type": "application/json"} if data is not None else {}
            self.conn.request(method, path, body=data, headers=headers)
            r = self.conn.getresponse()
            raw = r.read()
            if r.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise Uncertain(type(e).__name__)
        try:
            return r.status, (json.loads(raw) if raw else None)
        except ValueError:
            return r.status, None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


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


# ---------------------------------------------------------------------------------------------
# The webhook receiver
# ---------------------------------------------------------------------------------------------

class Receiver:
    def __init__(self):
        self.lock = threading.Lock()
        self.attempts = []           # dicts: tenant key version attempt fire_at fired_at recv status
        self.bad = []
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                recv = now_us()
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                try:
                    j = json.loads(body)
                except ValueError:
                    j = None
                kind = self.path.strip("/").split("/")[0]
                status = 200
                if kind == "flaky":
                    h = hashlib.sha256(f"{self.headers.get('Idempotency-Key')}/{self.headers.get('Punctual-Attempt')}".encode()).digest()
                    status = 503 if h[0] & 1 else 200
                elif kind == "reject":
                    status = 400
                rec.record(kind, j, self.headers, body, recv, status)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Quiet(ThreadingHTTPServer):
            # Python's default accept backlog is 5: a burst of connects from the server's
            # per-host slots (64 a shard) overflowed it, and each dropped SYN cost a 1 s (then
            # 3 s) retransmission, so the drill measured its own receiver. A real receiver
            # listens with the kernel's somaxconn.
            request_queue_size = 1024

            def handle_error(self, request, client_address):
                # A SIGKILLed punctual resets its keep-alive connections: expected here.
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Quiet(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def record(self, kind, j, headers, body, recv, status):
        with self.lock:
            if not isinstance(j, dict):
                self.bad.append(f"{kind}: body is not a JSON object: {body[:100]!r}")
                return
            idem = headers.get("Idempotency-Key", "")
            want = f"{j.get('tenant')}/{j.get('key')}/{j.get('version')}"
            if idem != want:
                self.bad.append(f"Idempotency-Key {idem!r} but the body names {want}")
            if kind == "ok":
                sig = headers.get("Punctual-Signature", "")
                parts = dict(p.split("=", 1) for p in sig.split(",") if "=" in p)
                mac = hmac.new(SECRET.encode(), f"{parts.get('t', '')}.".encode() + body, hashlib.sha256).hexdigest()
                if not hmac.compare_digest(mac, parts.get("v1", "")):
                    self.bad.append(f"shop/{j.get('key')}: signature {sig!r} does not verify")
            self.attempts.append({
                "tenant": j.get("tenant"), "key": j.get("key"), "version": j.get("version"),
                "attempt": j.get("attempt"), "fire_at": j.get("fire_at_us"),
                "fired_at": j.get("fired_at_us"), "recv": recv, "status": status,
            })


# ---------------------------------------------------------------------------------------------
# Redis (for --store redis): a server of our own, and a tiny RESP client for the streams
# ---------------------------------------------------------------------------------------------

class Redis:
    def __init__(self, workdir):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", workdir],
            stdout=open(os.path.join(workdir, "redis.log"), "w"), stderr=subprocess.STDOUT)
        CHILDREN.append(self.proc)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            try:
                if self.cmd("PING") == "PONG":
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING within 20 s")

    def cmd(self, *args):
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            out = b"*%d\r\n" % len(args)
            for a in args:
                a = str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
            s.sendall(out)
            return self._read(s.makefile("rb"))

    def _read(self, f):
        line = f.readline()
        if not line:
            raise OSError("redis closed the connection")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise OSError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = f.read(n + 2)[:-2]
            return data.decode()
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._read(f) for _ in range(n)]
        raise OSError(f"unexpected RESP reply {line!r}")

    def stream(self, tenant):
        """Every entry of punctual:fired:{tenant} as dicts."""
        out, start = [], "-"
        while True:
            page = self.cmd("XRANGE", f"punctual:fired:{{{tenant}}}", start, "+", "COUNT", "10000") or []
            for eid, fields in page:
                out.append(dict(zip(fields[0::2], fields[1::2])))
            if len(page) < 10000:
                return out
            last = page[-1][0]
            ms, seq = last.split("-")
            start = f"{ms}-{int(seq) + 1}"


# ---------------------------------------------------------------------------------------------
# The server, killed and restarted
# ---------------------------------------------------------------------------------------------

class Server:
    def __init__(self, binary, workdir, port, config, store_args):
        self.binary, self.workdir, self.port = binary, workdir, port
        self.cmd = [binary, "serve", "--config", config, "--listen", f"127.0.0.1:{port}",
                    "--shards", str(SHARDS), "--pinning", "none", "--spin-us", "0"] + store_args
        self.proc, self.starts = None, 0
        self.outages = []            # (killed_us, healthy_us)
        self.start_s = []

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.workdir, f"server-{self.starts}.log"), "w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info")))
        CHILDREN.append(self.proc)
        while time.monotonic() - t0 < 120:
            if self.proc.poll() is not None:
                raise RuntimeError(f"punctual exited with {self.proc.returncode} at start #{self.starts}; see {log.name}")
            try:
                st, _ = Client(self.port).call("GET", "/healthz")
                if st == 200:
                    self.start_s.append(time.monotonic() - t0)
                    return
            except Uncertain:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"punctual not healthy 120 s after start #{self.starts}; see {log.name}")

    def kill_and_restart(self):
        killed = now_us()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.start()
        self.outages.append((killed, now_us()))


# ---------------------------------------------------------------------------------------------
# The load
# ---------------------------------------------------------------------------------------------

def body_for(rng, delay_ms):
    return {"delay_ms": delay_ms, "payload": {"n": rng.randrange(1 << 30)}}


def mixed_worker(idx, port, model, tenants, stop, rng):
    """PUT / re-PUT / DELETE / batch over this connection's own keys."""
    cl = Client(port)
    own = defaultdict(list)          # tenant -> key names owned by this worker
    seq = 0
    while not stop.is_set():
        tenant = rng.choice(tenants)
        r = rng.random()
        if r < 0.40 or not own[tenant]:                     # a new key
            seq += 1
            names = [f"w{idx}-{seq}"]
            own[tenant].append(names[0])
            op = "put"
        elif r < 0.60:                                      # replace (or re-create) one
            names, op = [rng.choice(own[tenant])], "put"
        elif r < 0.85:
            names, op = [rng.choice(own[tenant])], "delete"
        else:                                               # a batch of new and old keys
            names = []
            for _ in range(rng.randrange(5, 30)):
                if rng.random() < 0.5 or not own[tenant]:
                    seq += 1
                    own[tenant].append(f"w{idx}-{seq}")
                    names.append(own[tenant][-1])
                else:
                    names.append(rng.choice(own[tenant]))
            names = list(dict.fromkeys(names))               # one item per key
            op = "batch"
        keys = [model.key(tenant, n) for n in names]
        try:
            if op == "put":
                k = keys[0]
                st, j = cl.call("PUT", f"/v1/timers/{tenant}/{k.key}", body_for(rng, rng.randrange(*DELAY_MS)))
                if st in (200, 201):
                    k.scheduled(st, j["version"], j["fire_at_us"], now_us())
                else:
                    model.refusals[(tenant, "put", st)] += 1
                    k.unsure(f"PUT {st}")
            elif op == "delete":
                k = keys[0]
                st, _ = cl.call("DELETE", f"/v1/timers/{tenant}/{k.key}")
                if st == 204:
                    k.cancelled(now_us())
                elif st == 404:
                    if k.pending is not None:              # it fired: no longer pending
                        k.pending = None
                    k.why.append("cancel 404")
                else:
                    model.refusals[(tenant, "delete", st)] += 1
                    k.unsure(f"DELETE {st}")
            else:
                items = [dict(key=k.key, **body_for(rng, rng.randrange(*DELAY_MS))) for k in keys]
                st, j = cl.call("POST", f"/v1/timers/{tenant}", {"timers": items})
                acked = now_us()
                if st != 200:
                    model.refusals[(tenant, "batch", st)] += 1
                    for k in keys:
                        k.unsure(f"batch {st}")
                else:
                    for k, res in zip(keys, j["results"]):
                        if res["status"] in (200, 201):
                            k.scheduled(res["status"], res["version"], res["fire_at_us"], acked)
                        else:
                            model.refusals[(tenant, "batch item", res["status"])] += 1
                            k.unsure(f"batch item {res['status']}")
        except Uncertain as e:
            for k in keys:
                k.unsure(f"{op}: {e}")
            time.sleep(0.05)
        time.sleep(rng.random() * PAUSE_S)
    cl.close()


def reject_worker(idx, port, model, receiver, stop, rng):
    """Walks reject keys, one at a time, through a dead-letter scenario each."""
    cl = Client(port)
    seq = 0
    while not stop.is_set():
        seq += 1
        k = model.key("reject", f"r{idx}-{seq}")
        try:
            st, j = cl.call("PUT", f"/v1/timers/reject/{k.key}", body_for(rng, rng.randrange(200, 800)))
            if st not in (200, 201):
                k.unsure(f"PUT {st}")
                continue
            v1 = j["version"]
            k.scheduled(st, v1, j["fire_at_us"], now_us())
            # It fires, the receiver answers 400, it becomes a dead letter; the timer goes.
            t0 = time.monotonic()
            while time.monotonic() - t0 < 30:
                st, _ = cl.call("GET", f"/v1/timers/reject/{k.key}")
                if st == 404:
                    break
                time.sleep(0.1)
            else:
                k.unsure("still pending 30 s after its deadline")
                continue
            k.pending, k.dead = None, v1
            k.why.append(f"dead v{v1}")
            scenario = rng.choice(["none", "put", "put+discard", "discard", "redrive", "put+redrive"])
            k.why.append(f"scenario {scenario}")
            if scenario.startswith("put"):
                st, j = cl.call("PUT", f"/v1/timers/reject/{k.key}", body_for(rng, FAR_DELAY_MS))
                if st != 201:
                    k.unsure(f"PUT beside a dead letter answered {st}")
                    continue
                k.scheduled(st, j["version"], j["fire_at_us"], now_us())
            if scenario.endswith("discard"):
                st, _ = cl.call("DELETE", f"/v1/dead/reject/{k.key}")
                if st != 204:
                    k.unsure(f"DELETE dead answered {st}")
                    continue
                k.dead = None
            if scenario == "redrive":
                st, j = cl.call("POST", f"/v1/dead/reject/{k.key}/retry")
                if st != 202 or j.get("version") != v1:
                    k.unsure(f"re-drive answered {st} {j}")
                    continue
                # pending again with v1; it fires and dies again with the same version.
            if scenario == "put+redrive":
                st, _ = cl.call("POST", f"/v1/dead/reject/{k.key}/retry")
                if st != 409:
                    k.unsure(f"re-drive beside a pending timer answered {st}, not 409")
                    continue
        except Uncertain as e:
            k.unsure(str(e))
            time.sleep(0.05)
    cl.close()


def killer(server, stop, rng, errors):
    while not stop.wait(rng.uniform(KILL_MIN_S, KILL_MAX_S)):
        try:
            server.kill_and_restart()
        except RuntimeError as e:
            errors.append(str(e))
            stop.set()


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

def delivered_versions(receiver):
    """(tenant, key, version) -> first 2xx attempt; and every attempt by (tenant, key)."""
    ok, by_key = {}, defaultdict(list)
    for a in receiver.attempts:
        by_key[(a["tenant"], a["key"])].append(a)
        if a["status"] == 200:
            ok.setdefault((a["tenant"], a["key"], a["version"]), a)
    return ok, by_key


def must_deliver(model, tenants):
    """Every version of a certain key that no acknowledged operation ended."""
    out = []
    for (t, _), k in model.keys.items():
        if t in tenants and not k.uncertain:
            out += [(t, k.key, v) for v, s in k.versions.items() if s["ended"] is None]
    return out


def wait_delivered(receiver, redis, model, deadline):
    while time.monotonic() < deadline:
        ok, _ = delivered_versions(receiver)
        missing = [m for m in must_deliver(model, ("shop", "flaky")) if m not in ok]
        if redis is not None:
            got = {(e["key"], int(e["version"])) for e in redis.stream("plain")}
            missing += [m for m in must_deliver(model, ("plain",)) if (m[1], m[2]) not in got]
        if not missing:
            return []
        time.sleep(0.5)
    return missing


def check(model, receiver, redis, fails):
    ok, by_key = delivered_versions(receiver)
    fails += receiver.bad[:20]
    early = []
    for a in receiver.attempts:
        if a["fired_at"] is None or a["fire_at"] is None:
            fails.append(f"attempt without fire_at_us/fired_at_us: {a}")
            continue
        if a["fired_at"] < a["fire_at"] or a["recv"] < a["fire_at"]:
            early.append(a)
    for a in early[:10]:
        fails.append(f"early: {a['tenant']}/{a['key']} v{a['version']} fire_at {a['fire_at']} fired_at {a['fired_at']} received {a['recv']}")
    if early:
        fails.append(f"{len(early)} attempts early in all")

    entries = defaultdict(list)
    if redis is not None:
        for e in redis.stream("plain"):
            entries[("plain", e["key"])].append({"version": int(e["version"]), "fire_at": int(e["fire_at_us"]),
                                                 "fired_at": int(e["fired_at_us"]), "recv": None})
            if int(e["fired_at_us"]) < int(e["fire_at_us"]):
                fails.append(f"early in the stream: plain/{e['key']} v{e['version']}")

    stats = Counter()
    for (t, name), k in model.keys.items():
        vs = list(k.versions)
        if any(b <= a for a, b in zip(vs, vs[1:])):
            fails.append(f"{t}/{name}: acknowledged versions do not grow: {vs} ({k.why[-8:]})")
        seen = by_key.get((t, name), []) + entries.get((t, name), [])
        for a in seen:
            s = k.versions.get(a["version"])
            if s is None:
                if not k.uncertain:
                    fails.append(f"{t}/{name}: version {a['version']} was never acknowledged ({k.why[-8:]})")
                continue
            if a["fire_at"] != s["fire_at"]:
                fails.append(f"{t}/{name} v{a['version']}: fire_at_us {a['fire_at']}, acknowledged {s['fire_at']}")
            if s["ended"] is not None and a["fired_at"] > s["ended"] and t != "reject":
                fails.append(f"{t}/{name} v{a['version']}: an attempt began at {a['fired_at']}, after it was "
                             f"{s['end']} (acknowledged at {s['ended']})")
                stats["resurrected"] += 1
    missing = []
    for t, name, v in must_deliver(model, ("shop", "flaky")):
        if (t, name, v) not in ok:
            missing.append(f"{t}/{name} v{v}")
    if redis is not None:
        got = defaultdict(Counter)
        for (t, name), es in entries.items():
            for e in es:
                got[name][e["version"]] += 1
        for t, name, v in must_deliver(model, ("plain",)):
            if got[name][v] == 0:
                missing.append(f"{t}/{name} v{v}")
        stats["stream repeats"] = sum(c - 1 for g in got.values() for c in g.values() if c > 1)
    for m in missing[:10]:
        fails.append(f"lost: {m} was acknowledged and never delivered")
    if missing:
        fails.append(f"{len(missing)} acknowledged timers never delivered in all")
    stats["lost"] = len(missing)
    return stats


def check_reject(port, model, fails):
    cl = Client(port)
    dead = {}
    after = None
    while True:
        path = "/v1/dead/reject?limit=1000" + (f"&after={after}" if after else "")
        st, j = cl.call("GET", path)
        if st != 200:
            fails.append(f"GET {path} answered {st}")
            return Counter()
        for d in j["dead"]:
            dead[d["key"]] = d["version"]
        if len(j["dead"]) < 1000:
            break
        after = j["dead"][-1]["key"]
    c = Counter()
    for (t, name), k in model.keys.items():
        if t != "reject" or k.uncertain:
            continue
        c["certain reject keys"] += 1
        st, j = cl.call("GET", f"/v1/timers/reject/{name}")
        got_pending = j["version"] if st == 200 else None
        if st not in (200, 404):
            fails.append(f"GET reject/{name} answered {st}")
        if got_pending != k.pending:
            fails.append(f"reject/{name}: pending {got_pending}, acknowledged {k.pending} ({k.why})")
            c["pending wrong"] += 1
        if dead.get(name) != k.dead:
            fails.append(f"reject/{name}: dead letter {dead.get(name)}, acknowledged {k.dead} ({k.why})")
            c["dead wrong"] += 1
        if k.pending is not None and k.dead is not None:
            c["dead letter beside a pending timer"] += 1
    cl.close()
    return c


def metrics(port):
    st, _ = Client(port).call("GET", "/healthz")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    sums = Counter()
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{")[0].split(" ")[0]
        try:
            sums[name] += float(line.rsplit(" ", 1)[1])
        except ValueError:
            pass
    return r.status, sums


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--store", choices=["journal", "redis"], default="journal")
    ap.add_argument("--page-horizon-s", type=int, default=0,
                    help="journal only: page timers due further ahead than this (1 pages most of the drill's)")
    ap.add_argument("seconds", nargs="?", type=float, default=40)
    args = ap.parse_args()
    rng = random.Random(SEED)
    workdir = tempfile.mkdtemp(prefix="punctual-crash-")
    fails, errors = [], []
    redis = None
    try:
        receiver = Receiver()
        base = f"http://127.0.0.1:{receiver.port}/"
        cfg = os.path.join(workdir, "punctual.toml")
        with open(cfg, "w") as f:
            f.write(f'callback_allow = ["{base}"]\nwebhook_timeout_ms = 2000\n'
                    f'[tenants.shop]\ncallback_url = "{base}ok/shop"\nwebhook_secret = "{SECRET}"\n'
                    f'[tenants.flaky]\ncallback_url = "{base}flaky/x"\nretry_max_attempts = 30\n'
                    f'retry_base_delay_ms = 20\nretry_max_delay_ms = 200\n'
                    f'[tenants.reject]\ncallback_url = "{base}reject/x"\nretry_max_attempts = 1\n'
                    f'[tenants.plain]\n')
        if args.store == "redis":
            redis = Redis(workdir)
            store_args = ["--redis", f"redis://127.0.0.1:{redis.port}/"]
            tenants = ["shop", "flaky", "plain"]
        else:
            store_args = ["--data-dir", os.path.join(workdir, "data")]
            if args.page_horizon_s > 0:
                store_args += ["--page-horizon-s", str(args.page_horizon_s)]
            tenants = ["shop", "flaky"]
        port = free_port()
        server = Server(args.bin, workdir, port, cfg, store_args)
        server.start()
        model = Model()
        stop, stop_kills = threading.Event(), threading.Event()
        threads = [threading.Thread(target=mixed_worker, args=(i, port, model, tenants, stop, random.Random(SEED * 1000 + i)))
                   for i in range(CONNS)]
        threads += [threading.Thread(target=reject_worker, args=(i, port, model, receiver, stop, random.Random(SEED * 2000 + i)))
                    for i in range(REJECT_CONNS)]
        kt = threading.Thread(target=killer, args=(server, stop_kills, rng, errors))
        t0 = time.monotonic()
        for t in threads:
            t.start()
        kt.start()
        stop_kills.wait(args.seconds)
        stop_kills.set()
        kt.join()
        stop.set()
        for t in threads:
            t.join(60)
        load_s = time.monotonic() - t0
        if errors:
            raise RuntimeError("; ".join(errors))

        missing = wait_delivered(receiver, redis, model, time.monotonic() + SETTLE_S)
        settle_note = f"{len(missing)} still undelivered after {SETTLE_S} s" if missing else "all delivered"
        mstatus, msums = metrics(port)
        if mstatus != 200:
            fails.append(f"/metrics answered {mstatus}")
        stats = check(model, receiver, redis, fails)
        # Once more: the final state (far timers, dead letters) must survive a SIGKILL too.
        server.kill_and_restart()
        rstats = check_reject(port, model, fails)
        server.proc.send_signal(signal.SIGTERM)
        try:
            rc = server.proc.wait(60)
        except subprocess.TimeoutExpired:
            rc = "no exit within 60 s"
            server.proc.kill()
        if rc != 0:
            fails.append(f"SIGTERM: exit status {rc}")

        with open(os.path.join(workdir, "record.json"), "w") as f:
            json.dump({"outages": server.outages, "attempts": receiver.attempts}, f)
        keys = list(model.keys.values())
        acked = sum(len(k.versions) for k in keys)
        ok, _ = delivered_versions(receiver)
        firsts = defaultdict(lambda: None)
        for a in receiver.attempts:
            kv = (a["tenant"], a["key"], a["version"])
            if a["attempt"] == 1 and firsts[kv] is None:
                firsts[kv] = a
        def in_outage(us):
            # due within 0.1 s before a kill, during the outage, or in the 2 s after it, when
            # the outage's overdue deliveries compete with those falling due
            return any(k0 - 100_000 <= us <= h + 2_000_000 for k0, h in server.outages)
        shop = [a for a in firsts.values() if a is not None and a["tenant"] == "shop"]
        late = [(a["fired_at"] - a["fire_at"]) / 1000 for a in shop if not in_outage(a["fire_at"])]
        late_out = [(a["fired_at"] - a["fire_at"]) / 1000 for a in shop if in_outage(a["fire_at"])]
        print(f"punctual crash drill: store {args.store}, {SHARDS} shards, {CONNS}+{REJECT_CONNS} connections, "
              f"{load_s:.0f} s of load, seed {SEED}")
        print(f"  restarts after SIGKILL: {len(server.outages)}; time to healthy p50 {pct(server.start_s, 50):.2f} s, "
              f"max {max(server.start_s):.2f} s")
        print(f"  keys {len(keys)} ({sum(k.uncertain for k in keys)} uncertain); acknowledged versions {acked}")
        print(f"  webhook attempts {len(receiver.attempts)}; versions delivered {len(ok)}; settle: {settle_note}")
        print(f"  refusals: {dict(model.refusals) or 'none'}")
        for what, xs in (("away from outages", late), ("due around an outage", late_out)):
            print(f"  first-attempt lateness of shop timers {what} ({len(xs)}): p50 {pct(xs, 50):.2f} ms, "
                  f"p99 {pct(xs, 99):.2f} ms, max {max(xs, default=float('nan')):.2f} ms")
        print(f"  checks: {dict(stats)}; reject keys: {dict(rstats)}")
        print(f"  /metrics after the load: fired {msums['punctual_timers_fired_total']:.0f}, "
              f"webhook attempts {msums['punctual_webhook_attempts_total']:.0f}, "
              f"successes {msums['punctual_webhook_successes_total']:.0f}, "
              f"dead letters held {msums['punctual_webhook_dead_letters']:.0f}, "
              f"pending {msums['punctual_timers_pending']:.0f}")
        if fails:
            print(f"FAILED ({len(fails)}):")
            for f in fails[:60]:
                print("  - " + f)
            print(f"  work directory kept: {workdir}")
            return 1
        print("PASSED")
        return 0
    except RuntimeError as e:
        print(f"could not run: {e}")
        print(f"  work directory kept: {workdir}")
        return 2
    finally:
        for p in CHILDREN:
            if p.poll() is None:
                p.kill()
        if not fails and not errors and os.environ.get("CRASH_KEEP") != "1":
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
