"""The clock-step drill's instruments: the faketime offset, the webhook receiver, the
server's API and /metrics, seen from this process (real clock, no libfaketime)."""

import http.client
import json
import os
import re
import threading
import time

from common import serve_webhooks


NS = 1_000_000_000
MS = 1_000_000


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class DrillError(Exception):
    """The drill could not run (not a failed assertion)."""


# ---------------------------------------------------------------------------------------
# The faketime offset: what the server's CLOCK_REALTIME reads, relative to the real one.
# ---------------------------------------------------------------------------------------


class FakeClock:
    """Writes the offset file and remembers every change with the real time around it."""

    def __init__(self, path):
        self.path = path
        self.offset_ns = 0
        # (real ns just before the rename, real ns just after it, offset before, offset after)
        self.changes = []
        self.lock = threading.Lock()
        self._write(0)

    def _write(self, offset_ns):
        sign = "-" if offset_ns < 0 else "+"
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            # libfaketime reads a relative offset in seconds, fractions allowed ("-2.000000000").
            f.write(f"{sign}{abs(offset_ns) / NS:.9f}\n")
            f.flush()
            os.fsync(f.fileno())
        before = time.time_ns()
        os.rename(tmp, self.path)
        after = time.time_ns()
        return before, after

    def step(self, delta_ns):
        with self.lock:
            old = self.offset_ns
            new = old + delta_ns
            before, after = self._write(new)
            self.offset_ns = new
            self.changes.append((before, after, old, new))
            return before

    def offsets_between(self, lo_ns, hi_ns):
        """Every offset that was in force at some moment of [lo_ns, hi_ns] (real ns)."""
        with self.lock:
            changes = list(self.changes)
        current = changes[0][2] if changes else self.offset_ns
        seen = set()
        for before, after, old, new in changes:
            if after < lo_ns:
                current = new
                continue
            if before > hi_ns:
                break
            seen.add(old)
            seen.add(new)
            current = new
        seen.add(current)
        return seen

    def offset_at(self, t_ns):
        """The offset in force at real time t_ns; the larger one while a change is under way."""
        return max(self.offsets_between(t_ns, t_ns))


# ---------------------------------------------------------------------------------------
# The webhook receiver.
# ---------------------------------------------------------------------------------------


class Receiver:
    def __init__(self):
        self.lock = threading.Lock()
        # Every delivery, in arrival order: (arrival real ns, idempotency key, attempt, body).
        self.deliveries = []
        self.keys = set()
        self.bad_requests = 0
        self.httpd = serve_webhooks(self.on_post)
        self.port = self.httpd.server_address[1]

    def on_post(self, path, headers, body, arrival):
        key = headers.get("Idempotency-Key")
        attempt = headers.get("Punctual-Attempt")
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        with self.lock:
            if key is None or doc is None:
                self.bad_requests += 1
            else:
                self.deliveries.append((arrival, key, attempt, doc))
                self.keys.add(key)
        # Answer at once: a slow answer would be retried and repeat legitimately.
        return 200

    def delivered_keys(self):
        with self.lock:
            return set(self.keys)

    def snapshot(self):
        with self.lock:
            return list(self.deliveries), self.bad_requests

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# ---------------------------------------------------------------------------------------
# Talking to the server (from this process: real clock, no libfaketime).
# ---------------------------------------------------------------------------------------


class Api:
    def __init__(self, port):
        self.port = port
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.local.conn = c
        return c

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        for attempt in range(3):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                raw = r.read()
                return r.status, raw
            except (OSError, http.client.HTTPException):
                c.close()
                self.local.conn = None
                if attempt == 2:
                    raise
                time.sleep(0.05)

    def json(self, method, path, body=None):
        status, raw = self.request(method, path, body)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None

    def metrics(self):
        status, raw = self.request("GET", "/metrics")
        if status != 200:
            raise DrillError(f"/metrics answered {status}")
        return parse_metrics(raw.decode())


METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """{name: [(labels dict, value)]} from Prometheus/OpenMetrics text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = dict(LABEL.findall(m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, value))
    return out


def per_shard(metrics, *names):
    """{shard: value} for the first of `names` present (counters may carry a _total suffix)."""
    for name in names:
        if name in metrics:
            return {labels.get("shard", "?"): v for labels, v in metrics[name]}
    return {}


def clock_figures(api):
    m = api.metrics()
    return {
        "steps": per_shard(m, "punctual_clock_steps_total", "punctual_clock_steps"),
        "set_backs": per_shard(m, "punctual_clock_set_backs_total", "punctual_clock_set_backs"),
        "offset": per_shard(m, "punctual_clock_offset_seconds"),
        "fallback": per_shard(m, "punctual_clock_fallback"),
        "raw": m,
    }


def delta(after, before):
    return {s: after.get(s, 0) - before.get(s, 0) for s in sorted(after)}


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(p / 100 * (len(sorted_values) - 1)))))
    return sorted_values[i]
