"""What the flood drill runs beside its load: the server under test with its resident memory
sampled, the calm tenant and its webhook receiver, /metrics, and the memory plan of
docs/OPERATING.md."""

import http.client
import json
import os
import re
import subprocess
import threading
import time

from common import env_int, serve_webhooks
from flood_load import Client, key_of, put_body

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARDS = 2
SHARD_CAPACITY = env_int("FLOOD_SHARD_CAPACITY", 200_000)
CALM_MAX_PENDING = env_int("CALM_MAX_PENDING", 20_000)
CALM_CONNS = env_int("CALM_CONNS", 4)
CALM_RATE = float(os.environ.get("CALM_RATE", "40"))
CALM_DELAY_MS = env_int("CALM_DELAY_MS", 3000)
CHILDREN = []                     # processes this drill started: killed when it exits


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
        self.httpd = serve_webhooks(self.on_post)
        self.port = self.httpd.server_address[1]

    def on_post(self, path, headers, body, received_ns):
        idem = headers.get("Idempotency-Key", "")
        try:
            j = json.loads(body)
            rec = (received_ns // 1000, j["fire_at_us"], j["fired_at_us"])
            if idem != f"{j['tenant']}/{j['key']}/{j['version']}":
                raise ValueError(f"Idempotency-Key {idem!r} does not match the body")
        except (ValueError, KeyError) as e:
            with self.lock:
                self.bad.append(f"{idem}: {e}")
            return 200
        with self.lock:
            if idem in self.got:
                self.repeats += 1
            else:
                self.got[idem] = rec
        return 200

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
