#!/usr/bin/env python3
"""Flood drill: a tenant floods past its quota and the other tenants fill the shards, while
a well-behaved tenant must keep being served. Python standard library only.

Usage:  perf/drills/flood.py --bin target/release/punctual [SECONDS]
        (perf/drills/flood.sh builds the binary and calls this; read that first.)

What it does, in order:

 1. Starts the real `punctual serve` with the default store (the journal, fsync always) in a
    fresh temporary --data-dir, 2 shards, no pinning, spinning off (a shared host), on a free
    loopback port, with --shard-capacity 200,000 and this configuration:
        [tenants.flood]  max_pending = 50,000
        [tenants.calm]   max_pending = 20,000, callbacks allowed to this script's receiver
    Tenants bulk0..bulk3 have no quota.
 2. For SECONDS (default 60), from 32 keep-alive connections in 2 worker processes, it sends
    PUTs and batch POSTs of new timers due in one hour for "flood" (to pass its quota) and for
    bulk0..3 (to pass the shards' capacity), plus PUTs that replace flood's own pending timers
    (a replacement never counts against a quota, so these must not be refused for it).
    For the first 20% of the run only flood sends, so that it meets its quota before the
    bulk tenants fill the shards; then both go on. Nobody honours Retry-After: this is the
    abusive client.
 3. Meanwhile 4 other connections (in this process) PUT timers for "calm" at 40/s in all, due
    in 3 s, each with a callback to a webhook receiver run by this script. A calm timer counts
    as delivered when the receiver gets its POST with Idempotency-Key calm/<key>/<version> for
    the acknowledged version: proof that the very timer that was acknowledged fired (a GET
    answering 404 could not tell "fired" from "lost").
 4. Every second it reads VmRSS of the server from /proc/PID/status (every 50 ms while the
    server starts, so that a recovery's peak is seen).
 5. When the load stops: waits for every acknowledged calm timer to be delivered, reads
    /metrics, SIGKILLs the server, restarts it on the same port and data directory, and GETs
    every timer that got a 2xx (all of them, not a sample): each must still be pending with
    the version and deadline of its last acknowledgement.
 6. Prints a summary and exits 1 if any check failed (0 if all passed, 2 on a setup error).

Checks:
  - every refusal is 429 or 503 with a documented JSON error code and a Retry-After header
    (whole requests); batch items refused inside a 200 carry a 429/503 status and code (a
    batch answer has one header set, so items have no Retry-After of their own);
  - no other status, no connection errors or time-outs;
  - the drill really reached the limits (429 quota_exceeded and 503 capacity_exceeded seen);
  - flood never held more than max_pending, no shard more than its capacity (/metrics);
  - calm: every request made while calm was under its quota got a 2xx; success ratio and
    latency p50/p99 printed; every acknowledged calm timer delivered, none early;
  - RSS stayed under the memory plan's bound for the configured capacity (see
    `plan_bound`: the figure is read from docs/OPERATING.md, and printed with the measured one);
  - the server did not exit during the load;
  - after SIGKILL and restart, no acknowledged timer is lost or changed; SIGTERM then exits 0.

Reading a failure:
  - calm refused with 503 capacity_exceeded: the shards are full of other tenants' timers. A
    quota caps a tenant; it does not reserve room in the shards for it, so tenants without a
    quota can take every slot, and the slots calm's fired timers free are taken again at once.
  - RSS over the bound under load: compare "B per pending timer" with the rule's figure. The
    bound adds the server's RSS at start to the rule, which covers the timers only. RSS over
    the bound only after the restart: the start reads the journal files whole (see the
    recovery peak line).
  - a refusal without Retry-After, a status other than 429/503, a lost or changed timer, or a
    crash: a server bug; the server logs are in the kept work directory.

Settings can be changed with environment variables (defaults in brackets): FLOOD_SHARD_CAPACITY
[200000], FLOOD_MAX_PENDING [50000], CALM_MAX_PENDING [20000], FLOOD_CONNS [32], FLOOD_PROCS
[2], CALM_CONNS [4], CALM_RATE [40 per second, all calm connections], CALM_DELAY_MS [3000],
BULK_BATCH [1000], FLOOD_BATCH [200], VERIFY_PROCS [2], VERIFY_CONNS [16], FLOOD_KEEP=1 keeps
the temporary directory (journal, server logs) even when everything passed.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def env_int(name, default):
    return int(os.environ.get(name, default))


SHARDS = 2
SHARD_CAPACITY = env_int("FLOOD_SHARD_CAPACITY", 200_000)
FLOOD_MAX_PENDING = env_int("FLOOD_MAX_PENDING", 50_000)
CALM_MAX_PENDING = env_int("CALM_MAX_PENDING", 20_000)
FLOOD_CONNS = env_int("FLOOD_CONNS", 32)
FLOOD_PROCS = env_int("FLOOD_PROCS", 2)
CALM_CONNS = env_int("CALM_CONNS", 4)
CALM_RATE = float(os.environ.get("CALM_RATE", "40"))
CALM_DELAY_MS = env_int("CALM_DELAY_MS", 3000)
BULK_BATCH = env_int("BULK_BATCH", 1000)
FLOOD_BATCH = env_int("FLOOD_BATCH", 200)
VERIFY_PROCS = env_int("VERIFY_PROCS", 2)
VERIFY_CONNS = env_int("VERIFY_CONNS", 16)
FLOOD_ALONE = 0.2                 # the first 20% of the run: flood alone, so it meets its quota
                                  # before the bulk tenants fill the shards (then both go on)
FAR_DELAY_MS = 3_600_000          # flood and bulk timers: due in an hour, so they stay pending
BULK_TENANTS = ["bulk0", "bulk1", "bulk2", "bulk3"]
KEY_LEN = 24                      # every key is exactly this long (it enters the memory bound)
PAYLOAD = '"' + "x" * 62 + '"'    # every payload: 64 bytes of JSON text
CLIENT_TIMEOUT_S = 30             # a request slower than this counts as a failure

# The refusals the API documents (docs/API.md, "Errors"): status -> codes. Anything else is a
# failure of the drill. `shutting_down` is documented too, but nothing stops the server while
# the load runs, so seeing it would be a failure.
REFUSALS = {
    429: {"quota_exceeded"},
    503: {"overloaded", "capacity_exceeded", "store_unavailable", "too_many_connections"},
}


CHILDREN = []                     # processes this drill started: killed when it exits


def now_us():
    return time.time_ns() // 1000


def key_of(prefix, seq):
    k = f"{prefix}-{seq:0{KEY_LEN - len(prefix) - 1}d}"
    assert len(k) == KEY_LEN
    return k


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class Client:
    """One keep-alive connection. `call` answers (status, headers, body bytes), or raises
    OSError / http.client.HTTPException on a transport failure (then reconnects next time)."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def call(self, method, path, body=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=CLIENT_TIMEOUT_S)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            self.conn.request(method, path, body=body, headers=headers)
            r = self.conn.getresponse()
            data = r.read()
            if r.will_close:
                self.close()
            return r.status, r.headers, data
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Tally:
    """Counts outcomes as (who, what, level, status, code, retry_after_ok) -> n.
    level is "req" for a whole request's answer, "item" for one item of a batch."""

    def __init__(self):
        self.c = Counter()
        self.lock = threading.Lock()

    def add(self, who, what, level, status, code, ra_ok, n=1):
        with self.lock:
            self.c[(who, what, level, status, code, ra_ok)] += n

    def answer(self, who, what, status, headers, body):
        """Counts a whole answer; the parsed JSON body of a 2xx, else None."""
        if 200 <= status < 300:
            self.add(who, what, "req", status, "", None)
            try:
                return json.loads(body) if body else {}
            except ValueError:
                self.add(who, what, "req", status, "<2xx body not JSON>", None)
                return None
        code = "<no JSON error code>"
        try:
            code = json.loads(body)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            pass
        ra = headers.get("Retry-After") if headers is not None else None
        ra_ok = ra is not None and ra.strip().isdigit() and int(ra) >= 1
        self.add(who, what, "req", status, code, ra_ok)
        return None


# ---------------------------------------------------------------------------------------------
# Flood worker processes (run as `flood.py --worker ...`)
# ---------------------------------------------------------------------------------------------

def put_body(delay_ms, extra=""):
    return f'{{"delay_ms":{delay_ms},"payload":{PAYLOAD}{extra}}}'


def batch_body(keys, delay_ms):
    items = ",".join(f'{{"key":"{k}","delay_ms":{delay_ms},"payload":{PAYLOAD}}}' for k in keys)
    return '{"timers":[' + items + "]}"


def flood_thread(port, prefix, bulk_at, end_at, tally, acked, failures):
    """One connection of the flood. acked: (tenant, key) -> [version, fire_at_us, ambiguous];
    `ambiguous` marks a replacement whose outcome is unknown (a 503 store_unavailable or a
    transport error: it may or may not have been applied, so any later version is fine)."""
    cl = Client(port)
    rnd = random.Random(prefix)
    seq = 0
    mine_flood = []          # flood keys this thread got acknowledged, for replacements
    bulk = BULK_TENANTS[int(prefix[-2:]) % len(BULK_TENANTS)]

    def new_keys(n):
        nonlocal seq
        ks = [key_of(prefix, seq + i) for i in range(n)]
        seq += n
        return ks

    while time.monotonic() < end_at:
        r = rnd.random()
        who, what = "flood", "?"
        if time.monotonic() < bulk_at and 0.35 <= r < 0.45:
            r -= 0.1            # flood alone first: its single PUT instead of a bulk one
        elif time.monotonic() < bulk_at and r >= 0.55:
            r = 0.5             # and its batch instead of a bulk batch
        try:
            if r < 0.10 and mine_flood:
                # Replace one of flood's own pending timers: must never be refused for quota
                # or capacity, even when flood is at its quota and the shard is full.
                what = "PUT-replace"
                k = rnd.choice(mine_flood)
                try:
                    st, h, b = cl.call("PUT", f"/v1/timers/flood/{k}", put_body(FAR_DELAY_MS))
                except (OSError, http.client.HTTPException):
                    acked[("flood", k)][2] = True     # may or may not have been applied
                    raise
                j = tally.answer(who, what, st, h, b)
                if j is not None:
                    acked[("flood", k)] = [j["version"], j["fire_at_us"], False]
                elif st == 503:
                    acked[("flood", k)][2] = True
            elif r < 0.45:
                # One new timer: flood's (to pass its quota) or a bulk tenant's (to fill shards).
                tenant = "flood" if r < 0.35 else bulk
                who, what = ("flood" if tenant == "flood" else "bulk"), "PUT"
                (k,) = new_keys(1)
                st, h, b = cl.call("PUT", f"/v1/timers/{tenant}/{k}", put_body(FAR_DELAY_MS))
                j = tally.answer(who, what, st, h, b)
                if j is not None:
                    acked[(tenant, k)] = [j["version"], j["fire_at_us"], False]
                    if tenant == "flood":
                        mine_flood.append(k)
            else:
                # A batch of new timers: FLOOD_BATCH for flood, BULK_BATCH for a bulk tenant.
                tenant, n = ("flood", FLOOD_BATCH) if r < 0.55 else (bulk, BULK_BATCH)
                who, what = ("flood" if tenant == "flood" else "bulk"), "POST"
                ks = new_keys(n)
                st, h, b = cl.call("POST", f"/v1/timers/{tenant}", batch_body(ks, FAR_DELAY_MS))
                j = tally.answer(who, what, st, h, b)
                if j is not None:
                    res = j.get("results", [])
                    if len(res) != len(ks):
                        tally.add(who, what, "item", -1, "<result count != item count>", None)
                    items = Counter()
                    for k, it in zip(ks, res):
                        s = it.get("status")
                        if s in (200, 201) and it.get("key") == k:
                            acked[(tenant, k)] = [it["version"], it["fire_at_us"], False]
                            if tenant == "flood":
                                mine_flood.append(k)
                            items[(s, "")] += 1
                        else:
                            code = (it.get("error") or {}).get("code", "<no code>")
                            items[(s, code)] += 1
                    for (s, code), n_ in items.items():
                        tally.add(who, what, "item", s, code, None, n_)
        except (OSError, http.client.HTTPException) as e:
            failures.append(f"{prefix} {who} {what}: {type(e).__name__}: {e}")
            tally.add(who, what, "req", 0, "<" + type(e).__name__ + ">", None)
        except (ValueError, KeyError, TypeError) as e:
            # A 2xx whose body is not what docs/API.md describes.
            failures.append(f"{prefix} {who} {what}: unexpected answer: {type(e).__name__}: {e}")
            tally.add(who, what, "req", 0, "<unexpected 2xx body>", None)
    cl.close()


def worker_main(args):
    tally = Tally()
    acked = {}
    failures = []
    # Every process starts at the same wall-clock instant.
    time.sleep(max(0.0, args.start_at - time.time()))
    t0 = time.monotonic()
    end_at = t0 + args.seconds
    bulk_at = t0 + args.seconds * FLOOD_ALONE
    threads = [threading.Thread(target=flood_thread,
                                args=(args.port, f"w{args.index}{t:02d}", bulk_at, end_at, tally, acked, failures))
               for t in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(args.out, "w") as f:
        json.dump({"tally": [list(k) + [n] for k, n in tally.c.items()],
                   "acked": [[t, k, v[0], v[1], v[2]] for (t, k), v in acked.items()],
                   "failures": failures[:50], "n_failures": len(failures)}, f)


def verify_main(args):
    """GETs every key in args.keys (a JSON list of [tenant, key, version, fire_at_us,
    ambiguous]) and writes what does not match."""
    with open(args.keys) as f:
        todo = json.load(f)
    bad, errors = [], Counter()
    lock = threading.Lock()
    ok = [0]

    def run(part):
        cl = Client(args.port)
        for tenant, key, version, fire_at, amb in part:
            for attempt in range(5):
                try:
                    st, _, b = cl.call("GET", f"/v1/timers/{tenant}/{key}")
                except (OSError, http.client.HTTPException) as e:
                    with lock:
                        errors[type(e).__name__] += 1
                    time.sleep(0.2)
                    continue
                if st == 503:           # overloaded or still recovering: not an answer yet
                    with lock:
                        errors["503"] += 1
                    time.sleep(0.2)
                    continue
                break
            else:
                with lock:
                    bad.append([tenant, key, "no answer after 5 tries"])
                continue
            if st == 200:
                j = json.loads(b)
                good = (j["version"] >= version) if amb else (j["version"] == version and j["fire_at_us"] == fire_at)
                if good:
                    with lock:
                        ok[0] += 1
                    continue
                why = f"pending with version {j['version']} fire_at_us {j['fire_at_us']}, acknowledged {version} {fire_at}"
            else:
                why = f"GET answered {st}: {b[:120]!r}"
            with lock:
                bad.append([tenant, key, why])
        cl.close()

    n = args.threads
    threads = [threading.Thread(target=run, args=(todo[i::n],)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(args.out, "w") as f:
        json.dump({"ok": ok[0], "bad": bad, "errors": dict(errors)}, f)


# ---------------------------------------------------------------------------------------------
# The server, the webhook receiver, the calm tenant, RSS
# ---------------------------------------------------------------------------------------------

class Server:
    def __init__(self, binary, workdir, port, config):
        self.binary, self.workdir, self.port, self.config = binary, workdir, port, config
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.workdir, f"server-{self.starts}.log"), "w")
        cmd = [self.binary, "serve", "--config", self.config,
               "--listen", f"127.0.0.1:{self.port}", "--data-dir", os.path.join(self.workdir, "data"),
               "--shards", str(SHARDS), "--pinning", "none", "--spin-us", "0",
               "--shard-capacity", str(SHARD_CAPACITY)]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info")))
        CHILDREN.append(self.proc)
        self.sampler = RssSampler(self.proc.pid)
        self.sampler.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            if self.proc.poll() is not None:
                raise RuntimeError(f"punctual exited with {self.proc.returncode} at start; see {log.name}")
            try:
                st, _, b = Client(self.port).call("GET", "/healthz")
                if st == 200:
                    self.sampler.healthy_at = time.monotonic()
                    self.sampler.interval = 1.0
                    return time.monotonic() - t0
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"punctual not healthy after 120 s; see {log.name}")

    def log_tail(self, n=30):
        path = os.path.join(self.workdir, f"server-{self.starts}.log")
        try:
            with open(path) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    """VmRSS of `pid`: every 50 ms while the server starts (a recovery is short, and its peak
    would fall between 1 s samples), then every second."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stop = pid, [], threading.Event()
        self.interval = 0.05
        self.healthy_at = None

    def run(self):
        while not self.stop.is_set():
            v = rss_bytes(self.pid)
            if v is not None:
                self.samples.append((time.monotonic(), v))
            self.stop.wait(self.interval)

    def max(self, before_healthy=False):
        return max((r for t, r in self.samples
                    if not before_healthy or self.healthy_at is None or t <= self.healthy_at), default=0)


class Hooks:
    """The calm tenant's webhook receiver: first receipt per Idempotency-Key."""

    def __init__(self):
        self.lock = threading.Lock()
        self.got = {}           # "calm/<key>/<version>" -> (received_us, fire_at_us, fired_at_us)
        self.repeats = 0
        self.bad = []
        hooks = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                t = now_us()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                idem = self.headers.get("Idempotency-Key", "")
                try:
                    j = json.loads(body)
                    rec = (t, j["fire_at_us"], j["fired_at_us"])
                    if idem != f"{j['tenant']}/{j['key']}/{j['version']}":
                        raise ValueError(f"Idempotency-Key {idem!r} does not match the body")
                except (ValueError, KeyError) as e:
                    with hooks.lock:
                        hooks.bad.append(f"{idem}: {e}")
                    rec = None
                if rec is not None:
                    with hooks.lock:
                        if idem in hooks.got:
                            hooks.repeats += 1
                        else:
                            hooks.got[idem] = rec
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def delivered(self, idem):
        with self.lock:
            return self.got.get(idem)


def calm_thread(i, port, hook_port, t0, end_at, tally, calm, hooks):
    """PUTs calm timers at CALM_RATE / CALM_CONNS per second. calm: shared dict with
    "acked" (idem -> (key, version, fire_at_us)), "lat" (seconds, every answer), "log"
    ((seconds since t0, latency, status, code) per request), "over" (requests made while calm
    was at its quota), "refused_within" (what was refused while it was not)."""
    cl = Client(port)
    cb = f',"callback":{{"url":"http://127.0.0.1:{hook_port}/hook"}}'
    period = CALM_CONNS / CALM_RATE
    nxt = time.monotonic()
    seq = 0
    while True:
        nxt += period
        d = nxt - time.monotonic()
        if d > 0:
            time.sleep(d)
        else:
            nxt = time.monotonic()  # behind: do not burst to catch up
        if time.monotonic() >= end_at:
            break
        k = key_of(f"c{i:02d}", seq)
        seq += 1
        # Calm's pending count as the client sees it: acknowledged and not yet delivered.
        with calm["lock"]:
            pending = sum(1 for idem in calm["acked"] if hooks.delivered(idem) is None)
        within = pending < CALM_MAX_PENDING
        sent = time.perf_counter()
        try:
            st, h, b = cl.call("PUT", f"/v1/timers/calm/{k}", put_body(CALM_DELAY_MS, cb))
        except (OSError, http.client.HTTPException) as e:
            tally.add("calm", "PUT", "req", 0, "<" + type(e).__name__ + ">", None)
            with calm["lock"]:
                calm["log"].append((time.monotonic() - t0, None, 0, type(e).__name__))
                calm["refused_within"].append(f"{k}: {type(e).__name__}: {e}")
            continue
        dt = time.perf_counter() - sent
        j = tally.answer("calm", "PUT", st, h, b)
        code = ""
        if j is None:
            try:
                code = json.loads(b)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = "?"
        with calm["lock"]:
            calm["lat"].append(dt)
            calm["log"].append((time.monotonic() - t0, dt, st, code))
            if j is not None:
                calm["acked"][f"calm/{k}/{j['version']}"] = (k, j["version"], j["fire_at_us"])
            elif within:
                calm["refused_within"].append(f"{k} at {time.monotonic() - t0:.1f} s: {st} {code}")
            else:
                calm["over"] += 1
    cl.close()


def metrics(port):
    st, _, b = Client(port).call("GET", "/metrics")
    out = {}
    for line in b.decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, val = line.rpartition(" ")
        try:
            out[name] = float(val)
        except ValueError:
            pass
    return out


def plan_bound():
    """The memory planning rule, as (per-timer overhead, factor, the sentence).
    docs/OPERATING.md, "Memory to plan": "Plan `pending × (100 + key + payload) × 1.25` bytes"."""
    with open(os.path.join(ROOT, "docs", "OPERATING.md")) as f:
        text = f.read()
    m = re.search(r"pending\s*×\s*\((\d+)\s*\+\s*key\s*\+\s*payload\)\s*×\s*([\d.]+)", text)
    measured = re.search(r"([\d,]+) bytes of resident memory per pending timer", text)
    if not m:
        return None
    return int(m.group(1)), float(m.group(2)), m.group(0), measured.group(0) if measured else None


# ---------------------------------------------------------------------------------------------
# The drill
# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seconds", nargs="?", type=float, default=60)
    ap.add_argument("--bin", default=os.environ.get("PUNCTUAL_BIN", os.path.join(ROOT, "target/release/punctual")))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--verify", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--keys", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args)
    if args.verify:
        return verify_main(args)
    try:
        return drill(args)
    finally:
        # Whatever happened (a failed check, an exception, Ctrl-C): leave no process behind.
        for p in CHILDREN:
            if p.poll() is None:
                p.kill()
                p.wait()


def drill(args):
    failed = []

    def check(ok, what):
        print(f"  [{'PASS' if ok else 'FAIL'}] {what}")
        if not ok:
            failed.append(what)

    binary = os.path.abspath(args.bin)
    if not os.access(binary, os.X_OK):
        print(f"no executable at {binary} (PUNCTUAL_BIN or --bin)", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="punctual-flood-")
    hooks = Hooks()
    port = free_port()
    config = os.path.join(work, "punctual.toml")
    with open(config, "w") as f:
        f.write(f"""# written by perf/drills/flood.py
open_tenants = true   # the bulk tenants have no table

[tenants.flood]
max_pending = {FLOOD_MAX_PENDING}

[tenants.calm]
max_pending = {CALM_MAX_PENDING}
callback_allow = ["http://127.0.0.1:{hooks.port}/"]
""")
    server = Server(binary, work, port, config)
    print(f"== flood drill: {args.seconds:g} s, binary {binary}")
    print(f"   host: {os.cpu_count()} CPUs, load average {open('/proc/loadavg').read().split()[:3]}")
    print(f"   work dir {work} (journal in data/, server logs server-*.log)")
    try:
        server.start()
    except RuntimeError as e:
        print(f"setup: {e}\n{server.log_tail()}", file=sys.stderr)
        return 2
    pid = server.proc.pid
    print(f"   server pid {pid}: {' '.join(server.cmd)}")
    print(f"   tenants: flood max_pending {FLOOD_MAX_PENDING:,}; calm max_pending {CALM_MAX_PENDING:,}; "
          f"{', '.join(BULK_TENANTS)} unlimited; shard_capacity {SHARD_CAPACITY:,} x {SHARDS} shards")
    time.sleep(1.0)
    baseline = rss_bytes(pid)
    sampler = server.sampler

    # -- load ------------------------------------------------------------------------------
    tally = Tally()
    start_at = time.time() + 1.5
    outs, procs = [], []
    per = [FLOOD_CONNS // FLOOD_PROCS + (1 if i < FLOOD_CONNS % FLOOD_PROCS else 0) for i in range(FLOOD_PROCS)]
    for i, n in enumerate(per):
        out = os.path.join(work, f"worker-{i}.json")
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                       "--port", str(port), "--index", str(i), "--threads", str(n),
                                       "--start-at", str(start_at), "--out", out,
                                       str(args.seconds)]))
        CHILDREN.append(procs[-1])
    print(f"== load: {FLOOD_CONNS} flood connections in {FLOOD_PROCS} processes, "
          f"{CALM_CONNS} calm connections at {CALM_RATE:g}/s (timers due in {CALM_DELAY_MS} ms)")
    time.sleep(max(0.0, start_at - time.time()))
    load_t0 = time.monotonic()
    end_at = load_t0 + args.seconds
    calm = {"lock": threading.Lock(), "acked": {}, "lat": [], "log": [], "over": 0, "refused_within": []}
    calm_threads = [threading.Thread(target=calm_thread,
                                     args=(i, port, hooks.port, load_t0, end_at, tally, calm, hooks))
                    for i in range(CALM_CONNS)]
    for t in calm_threads:
        t.start()
    next_progress = load_t0 + 10
    while any(p.poll() is None for p in procs) or any(t.is_alive() for t in calm_threads):
        time.sleep(0.5)
        el = time.monotonic() - load_t0
        if time.monotonic() >= next_progress and el < args.seconds + 1:
            next_progress += 10
            try:
                m = metrics(port)
                pend = [int(m.get(f'punctual_timers_pending{{shard="{s}"}}', -1)) for s in range(SHARDS)]
                fp = int(m.get('punctual_tenant_pending{tenant="flood"}', -1))
            except (OSError, http.client.HTTPException):
                pend, fp = "?", "?"
            r = sampler.samples[-1][1] if sampler.samples else 0
            with calm["lock"]:
                ca, cn = len(calm["acked"]), len(calm["log"])
            print(f"   t={el:4.0f}s pending per shard {pend}, flood {fp}; RSS {r / 2**20:6.1f} MiB; "
                  f"calm {ca}/{cn} acknowledged")
    for t in calm_threads:
        t.join()
    load_s = time.monotonic() - load_t0
    acked, worker_failures, n_worker_failures = {}, [], 0
    for p, out in zip(procs, outs):
        if p.returncode != 0 or not os.path.exists(out):
            failed.append(f"a load worker exited with {p.returncode}")
            continue
        with open(out) as f:
            w = json.load(f)
        for row in w["tally"]:
            tally.add(*row[:6], n=row[6])
        for t, k, v, fa, amb in w["acked"]:
            acked[(t, k)] = (v, fa, amb)
        worker_failures += w["failures"]
        n_worker_failures += w["n_failures"]

    # -- calm deliveries -------------------------------------------------------------------
    print("== waiting for calm's acknowledged timers to be delivered")
    wait_until = time.monotonic() + CALM_DELAY_MS / 1000 + 30
    while time.monotonic() < wait_until:
        if all(hooks.delivered(i) for i in calm["acked"]):
            break
        time.sleep(0.5)
    try:
        m_end = metrics(port)
    except (OSError, http.client.HTTPException) as e:
        m_end = {}
        print(f"   /metrics unreachable after the load: {e}")
    crashed = server.proc.poll()
    if crashed is not None:
        failed.append(f"the server exited during the load with status {crashed}")
        print(f"   THE SERVER EXITED during the load with status {crashed}; its log ends with:\n{server.log_tail()}")
    sampler.stop.set()
    sampler.join()

    # -- crash and restart -------------------------------------------------------------------
    print(f"== SIGKILL pid {pid}, restart on the same port and data dir")
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    try:
        recovery_s = server.start()
    except RuntimeError as e:
        print(f"restart failed: {e}\n{server.log_tail()}")
        failed.append("restart after SIGKILL")
        recovery_s = None
    verify = {"ok": 0, "bad": [], "errors": {}}
    rss_after = rss_recovery = None
    if recovery_s is not None:
        pid2 = server.proc.pid
        sampler2 = server.sampler
        m_rec = metrics(port)
        print(f"   healthy again after {recovery_s:.1f} s (pid {pid2}); GET each of {len(acked):,} acknowledged timers")
        rows = [[t, k, v, fa, amb] for (t, k), (v, fa, amb) in acked.items()]
        vprocs, vouts = [], []
        t_v = time.monotonic()
        for i in range(VERIFY_PROCS):
            kf, of = os.path.join(work, f"verify-keys-{i}.json"), os.path.join(work, f"verify-{i}.json")
            with open(kf, "w") as f:
                json.dump(rows[i::VERIFY_PROCS], f)
            vouts.append(of)
            vprocs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--verify",
                                            "--port", str(port), "--threads", str(VERIFY_CONNS // VERIFY_PROCS),
                                            "--keys", kf, "--out", of]))
            CHILDREN.append(vprocs[-1])
        for p, of in zip(vprocs, vouts):
            p.wait()
            if p.returncode != 0 or not os.path.exists(of):
                failed.append(f"a verifier exited with {p.returncode}")
                continue
            with open(of) as f:
                v = json.load(f)
            verify["ok"] += v["ok"]
            verify["bad"] += v["bad"]
            for k, n in v["errors"].items():
                verify["errors"][k] = verify["errors"].get(k, 0) + n
        verify_s = time.monotonic() - t_v
        sampler2.stop.set()
        sampler2.join()
        rss_after = sampler2.max()
        rss_recovery = sampler2.max(before_healthy=True)
        # A clean stop, too: SIGTERM must exit 0.
        server.proc.send_signal(signal.SIGTERM)
        try:
            term_rc = server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            term_rc = "timeout"

    # -- summary ---------------------------------------------------------------------------
    print(f"\n== summary ({load_s:.1f} s of load)")
    print("   answers, by tenant / request / level (req = whole answer, item = batch item), status, code:")
    rows = sorted(tally.c.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3], str(kv[0][4])))
    for (who, what, level, st, code, ra), n in rows:
        ra_s = "" if ra is None else ("  Retry-After: yes" if ra else "  Retry-After: MISSING")
        print(f"     {who:6} {what:12} {level:4} {st:4} {code or '-':24} {n:>10,}{ra_s}")
    bad_req, bad_item, refusals_req, refusals_ra = Counter(), Counter(), 0, 0
    for (who, what, level, st, code, ra), n in tally.c.items():
        if 200 <= st < 300 and not str(code).startswith("<"):
            continue
        ok_code = st in REFUSALS and code in REFUSALS[st]
        if level == "req":
            refusals_req += n
            refusals_ra += n if ra else 0
            if not (ok_code and ra):
                bad_req[(who, what, st, code, ra)] += n
        elif not ok_code:
            bad_item[(who, what, st, code)] += n
    print("\n== checks")
    check(not bad_req, f"every refused request is 429/503 with a documented code and Retry-After "
          f"(Retry-After on {refusals_ra:,} of {refusals_req:,} refusals, "
          f"{100 * refusals_ra / max(1, refusals_req):.1f}%)"
          + ("" if not bad_req else f"; others: {dict(bad_req)}"))
    check(not bad_item, "every refused batch item is 429/503 with a documented code"
          + ("" if not bad_item else f"; others: {dict(bad_item)}"))
    check(n_worker_failures == 0, f"no connection errors or time-outs on flood connections ({n_worker_failures})"
          + ("" if not worker_failures else f"; first: {worker_failures[:3]}"))
    seen = Counter()
    for (who, what, level, st, code, ra), n in tally.c.items():
        seen[(who, code)] += n
        seen[code] += n
    check(seen[("flood", "quota_exceeded")] > 0,
          f"flood was driven past its quota: {seen[('flood', 'quota_exceeded')]:,} answers/items 429 quota_exceeded")
    check(seen["capacity_exceeded"] > 0,
          f"the shards were driven past their capacity: {seen['capacity_exceeded']:,} answers/items 503 capacity_exceeded")
    repl_refused = {k: n for k, n in tally.c.items()
                    if k[1] == "PUT-replace" and k[4] in ("quota_exceeded", "capacity_exceeded")}
    check(not repl_refused, "replacing flood's pending timers was never refused for quota or capacity"
          + ("" if not repl_refused else f": {repl_refused}"))
    flood_pending = m_end.get('punctual_tenant_pending{tenant="flood"}')
    flood_acked_keys = sum(1 for (t, _) in acked if t == "flood")
    check(flood_pending is not None and flood_pending <= FLOOD_MAX_PENDING and flood_acked_keys <= FLOOD_MAX_PENDING,
          f"flood never held more than max_pending {FLOOD_MAX_PENDING:,}: /metrics tenant_pending {flood_pending}, "
          f"acknowledged new keys {flood_acked_keys:,}")
    shard_pend = [m_end.get(f'punctual_timers_pending{{shard="{s}"}}') for s in range(SHARDS)]
    check(all(p is not None and p <= SHARD_CAPACITY for p in shard_pend),
          f"no shard held more than its capacity {SHARD_CAPACITY:,}: pending {shard_pend}")

    # calm
    calm_ok = sum(n for (who, what, lvl, st, code, ra), n in tally.c.items() if who == "calm" and 200 <= st < 300)
    calm_all = sum(n for (who, *_), n in tally.c.items() if who == "calm")
    lat = calm["lat"]
    print(f"   calm: {calm_ok:,} of {calm_all:,} requests 2xx ({100 * calm_ok / max(1, calm_all):.2f}%), "
          f"latency p50 {pct(lat, 50) * 1e3:.1f} ms p99 {pct(lat, 99) * 1e3:.1f} ms max {max(lat, default=0) * 1e3:.1f} ms; "
          f"requests past calm's quota: {calm['over']}")
    print("   calm, per 10 s of load: requests, 2xx, refusals by code, latency p50/p99 (ms)")
    for w0 in range(0, int(load_s) + 1, 10):
        win = [x for x in calm["log"] if w0 <= x[0] < w0 + 10]
        if not win:
            continue
        ok_ = sum(1 for x in win if 200 <= x[2] < 300)
        codes = Counter(x[3] for x in win if not 200 <= x[2] < 300)
        ls = [x[1] for x in win if x[1] is not None]
        print(f"     {w0:3d}-{w0 + 10:<3d}s {len(win):5d} {ok_:5d}  {dict(codes) or '-'}  "
              f"{pct(ls, 50) * 1e3:.1f}/{pct(ls, 99) * 1e3:.1f}")
    rw = calm["refused_within"]
    # Room is what quotas and capacity isolate: calm, within its quota, must never be refused
    # for room while others flood. The shard's store is shared by every tenant, so a flood
    # that saturates it can make a calm write wait past the 2 s acknowledgement timeout
    # (503 store_unavailable, with Retry-After, applied later); that is counted and bounded.
    slow = [r for r in rw if "store_unavailable" in r]
    room = [r for r in rw if r not in slow]
    check(calm_all > 0 and not room,
          f"calm was never refused for room (quota or capacity) while within its quota ({len(room)} refused"
          + ("" if not room else f"; first: {room[0]}; last: {room[-1]}") + ")")
    check(len(slow) <= 0.05 * calm_all,
          f"calm's writes timed out in a saturated store (503 store_unavailable) at most 5% of the time "
          f"({len(slow)} of {calm_all}" + ("" if not slow else f"; first: {slow[0]}") + ")")
    late, early, missing = [], [], []
    for idem, (k, v, fa) in calm["acked"].items():
        d = hooks.delivered(idem)
        if d is None:
            missing.append(idem)
            continue
        rcv, fa_body, fired_at = d
        late.append((rcv - fa) / 1e3)
        if rcv < fa or fired_at < fa or fa_body != fa:
            early.append((idem, rcv, fired_at, fa))
    print(f"   calm deliveries: {len(late):,} of {len(calm['acked']):,} acknowledged timers received by the webhook, "
          f"{hooks.repeats} repeats; received after the deadline by p50 {pct(late, 50):.1f} ms "
          f"p99 {pct(late, 99):.1f} ms max {max(late, default=0):.1f} ms")
    check(calm["acked"] and not missing and not hooks.bad,
          f"every acknowledged calm timer was delivered with its version ({len(missing)} missing"
          + (f", first {missing[:3]}" if missing else "") + (f", bad deliveries {hooks.bad[:3]}" if hooks.bad else "") + ")")
    check(not early, f"no calm timer delivered before its deadline ({len(early)} early"
          + (f", first {early[:3]}" if early else "") + ")")

    # memory
    rss_max = sampler.max()
    rb = plan_bound()
    if rb is None:
        check(False, "docs/OPERATING.md states a usable memory bound (no `pending × (N + key + payload) × F` rule found "
                     "under \"Memory to plan\")")
    else:
        over, factor, rule, measured = rb
        per_timer = (over + KEY_LEN + len(PAYLOAD)) * factor
        cap = SHARDS * SHARD_CAPACITY
        bound = cap * per_timer
        print(f"   plan: \"{rule}\"" + (f"; measured there: \"{measured}\"" if measured else ""))
        print(f"   bound: {cap:,} timers (capacity, {SHARDS} shards) x ({over} + {KEY_LEN} key + {len(PAYLOAD)} payload) "
              f"x {factor} = {per_timer:.0f} B/timer -> {bound / 2**20:.1f} MiB, plus the server's RSS at start "
              f"{baseline / 2**20:.1f} MiB (the rule covers timers, not the fixed cost) = {(bound + baseline) / 2**20:.1f} MiB")
        pend_end = sum(p or 0 for p in shard_pend)
        limit = bound + baseline
        per_pending = (f"{(rss_max - baseline) / pend_end:.0f} B per pending timer over the start "
                       f"(the rule plans {per_timer:.0f})" if pend_end else "pending count unknown")
        print(f"   RSS under load: max {rss_max / 2**20:.1f} MiB ({len(sampler.samples)} samples), "
              f"{pend_end:,.0f} pending at the end: {per_pending}")
        check(rss_max <= limit, f"RSS under load: max {rss_max / 2**20:.1f} MiB <= bound {limit / 2**20:.1f} MiB")
        if rss_after is not None:
            print(f"   RSS after the restart: recovery peak {rss_recovery / 2**20:.1f} MiB (sampled every 50 ms "
                  f"until healthy), then max {rss_after / 2**20:.1f} MiB while the GETs ran, "
                  f"{(sampler2.samples[-1][1] if sampler2.samples else 0) / 2**20:.1f} MiB at the end")
            check(rss_after <= limit,
                  f"RSS after the restart (recovery included): max {rss_after / 2**20:.1f} MiB <= bound {limit / 2**20:.1f} MiB")

    # durability
    if recovery_s is not None:
        rec = sum(v for k, v in m_rec.items() if k.startswith("punctual_store_recovered_timers"))
        print(f"   restart: recovered {rec:,.0f} timers in {recovery_s:.1f} s; verified {verify['ok'] + len(verify['bad']):,} "
              f"GETs in {verify_s:.1f} s; retried GETs {verify['errors'] or 0}; SIGTERM exit {term_rc}")
        print(f"   acknowledged (flood + bulk, all GET after restart): {len(acked):,}; lost or changed: {len(verify['bad'])}")
        check(not verify["bad"] and verify["ok"] == len(acked),
              f"nothing acknowledged was lost: {verify['ok']:,} of {len(acked):,} pending with their acknowledged version"
              + ("" if not verify["bad"] else f"; first: {verify['bad'][:5]}"))
        check(term_rc == 0, f"SIGTERM after the drill exits 0 (got {term_rc})")
    print(f"   calm acknowledged {len(calm['acked']):,}; delivered {len(late):,}")

    keep = failed or os.environ.get("FLOOD_KEEP") == "1"
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"   kept {work}")
    if failed:
        print(f"\nFAILED: {len(failed)} check(s):")
        for f_ in failed:
            print(f"  - {f_}")
        return 1
    print("\nPASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
