#!/usr/bin/env python3
"""Clock-step drill for `punctual serve`: the engine behind perf/drills/clock_step.sh.

Runs the real server under libfaketime, so that CLOCK_REALTIME as the server reads it can be
stepped and slewed while the TSC (which the server maps to UTC) runs on untouched, and checks
from outside, with a webhook receiver of its own, that no timer is delivered before its
deadline by the stepped clock, none twice, and none lost; and that the server counted and
logged the steps. Python standard library only. Run it through clock_step.sh, which finds the
binary and libfaketime; `clock_step.py --help` lists the knobs.

How the clock is moved
----------------------
libfaketime (LD_PRELOAD) answers clock_gettime(CLOCK_REALTIME) inside the server with the real
clock plus the offset written in FAKETIME_TIMESTAMP_FILE, and, with FAKETIME_NO_CACHE=1,
re-reads that file on every call: a new offset takes effect at the server's next read.
FAKETIME_DONT_FAKE_MONOTONIC=1 leaves CLOCK_MONOTONIC alone, and RDTSC is never faked. The
drill writes each new offset to a temporary file and renames it over the old one, so that
the server never reads a half-written file, and records the real time just before and just
after the rename.

The slew is emulated as small steps under the server's 50 ms step threshold: by default
5 ms every 100 ms, 40 times forward, then 40 times back: a 5 % rate, below chrony's default
maximum slew (83,333 ppm) and inside the 10 % band the server believes as a clock rate.
libfaketime's speed factor ("+0 x1.001") is not used: it counts from the process's start, so
changing it at run time jumps the clock by the elapsed time times the change (its README says
so), and the drill could not know the exact offset in force at every instant. Not 10 ms
every 100 ms either: 10 % is the edge of that band (max_slew_ppm), so the server drops the
rate as implausible and the slew no longer exercises its rate tracking, and the lag it leaves
hovers at the 50 ms threshold, so some runs count a step during the slew.

How a delivery is judged
------------------------
The receiver runs in this process, outside libfaketime. Each delivery is stamped with the
receiver's real CLOCK_REALTIME as soon as its request head is read; the stepped clock at that
moment is that stamp plus the offset in force. Deadlines are the drill's own record of what
it registered (absolute `fire_at_ms`), never the delivery's fields.

- on time: deadline <= arrival + offset in force at the arrival. Around a change (between
  the two stamps taken around the rename) the larger of the two offsets is used.
- step window: a backward step made through libfaketime is not a set of the kernel's clock,
  so the kernel's cancel-on-set timerfd (which makes every shard re-anchor at once after a
  real clock_settime) does not fire, and each shard sees the step only at its next regular
  anchor, at most 100 ms later. src/clock/mod.rs documents it: "A step of the system clock
  that no SetWatch reports leads by the step until the next anchor." A webhook fired just
  before a change and received just after it is in the same case. So a delivery that is
  early by the offset at its arrival, but on time by an offset that was in force at some
  moment of the `--window-ms` (default 150 ms: the 100 ms anchor interval plus slack for a
  loaded host and the delivery in flight) before its arrival, is counted here, not failed.
  The slew's small backward changes are steps too, as the server sees them, and are judged
  the same way.
- early: anything else, a failure: in particular a delivery early while the clock only ever
  moved forward (during or after the forward slew). Such a lead comes from the server's own
  rate policy, not from libfaketime: a span in which the clock ran fast is believed as the
  clock's rate (src/clock/rate.rs accepts rates up to max_slew_ppm, 10 %, off the calibrated
  one), and when the clock then runs slower than that (here between two small changes; on a
  real host at the end of a fast slew, chrony slews at up to 83,333 ppm by default) the
  mapping leads until the next anchor. `--lead-tolerance-ms` lets such leads pass up to a
  bound; `--strict` fails on the step window too.

Every first delivery, with its verdict and the clock phase it arrived in, is written to
deliveries.csv in the work directory.

This is conservative against false alarms (the arrival stamp is after the true arrival, and
around a change the more favourable offset is taken), and it still catches a shard that
fires early without a step, by more than the step, or more than the window after the step.
The arrival stamp includes the delivery's own latency (about a millisecond on loopback), so
earliness smaller than that cannot be seen from outside; the server's own `fired_at_us` is
compared with the deadline too, for information only.

Exit status: 0 when every assertion holds, 1 when one fails, 2 when the drill could not run.
"""

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # punctual keeps its connections alive

            def do_POST(self):
                arrival = time.time_ns()  # first thing: the head has just been read
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                key = self.headers.get("Idempotency-Key")
                attempt = self.headers.get("Punctual-Attempt")
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = None
                with receiver.lock:
                    if key is None or doc is None:
                        receiver.bad_requests += 1
                    else:
                        receiver.deliveries.append((arrival, key, attempt, doc))
                        receiver.keys.add(key)
                # Answer at once: a slow answer would be retried and repeat legitimately.
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 1024

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="receiver", daemon=True)
        self.thread.start()

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


# ---------------------------------------------------------------------------------------
# The drill.
# ---------------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(p / 100 * (len(sorted_values) - 1)))))
    return sorted_values[i]


class Drill:
    def __init__(self, args):
        self.a = args
        self.work = args.workdir
        self.failures = []
        self.passed = []
        self.notes = []
        self.server = None
        self.receiver = None
        self.acked = {}  # (tenant, key) -> (version, deadline µs)
        self.superseded = set()  # idempotency keys of versions replaced before they fired
        self.fired_first = {}  # idempotency key -> deadline µs: fired before its replacement
        # (tenant, key) -> deadlines µs of writes answered 503: not acknowledged, so they may or
        # may not have taken effect, and a delivery of one of them is allowed.
        self.unacked = {}
        self.not_acked = 0
        self.phase_figures = {}
        self.phase_spans = []  # (name, real ns at its first change, real ns when it ended)

    def check(self, ok, what):
        (self.passed if ok else self.failures).append(what)
        log(("ok    " if ok else "FAIL  ") + what)

    # -- start ---------------------------------------------------------------------------

    def start(self):
        a = self.a
        os.makedirs(self.work, exist_ok=True)
        self.fake = FakeClock(os.path.join(self.work, "faketime.rc"))
        self.receiver = Receiver()
        self.hook_prefix = f"http://127.0.0.1:{self.receiver.port}/"
        config = os.path.join(self.work, "punctual.toml")
        with open(config, "w") as f:
            f.write(
                "# written by perf/drills/clock_step.py\n"
                f"callback_allow = [\"{self.hook_prefix}\"]\n"
            )
        env = dict(os.environ)
        env.update(
            {
                "LD_PRELOAD": a.faketime_lib,
                "FAKETIME_TIMESTAMP_FILE": self.fake.path,
                "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "RUST_LOG": env.get("RUST_LOG", "info"),
            }
        )
        env.pop("FAKETIME", None)  # it would take priority over the file
        self.log_path = os.path.join(self.work, "server.log")
        # The port is picked free, then bound by the server: another process may take it in
        # between (other drills on the host). Then the server exits at once and the drill
        # tries another port.
        for attempt in range(3):
            self.port = free_port()
            cmd = [
                a.bin, "serve",
                "--config", config,
                "--listen", f"127.0.0.1:{self.port}",
                "--bind-retry-ms", "0",
                "--shards", str(a.shards),
                "--data-dir", os.path.join(self.work, "data"),
                "--pinning", a.pinning,
            ] + (["--page-horizon-s", str(a.page_horizon_s)] if a.page_horizon_s > 0 else [])
            log(f"server: {' '.join(cmd)}")
            log(f"        LD_PRELOAD={a.faketime_lib} FAKETIME_TIMESTAMP_FILE={self.fake.path} "
                "FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1")
            self.server = subprocess.Popen(
                cmd, env=env, stdout=open(os.path.join(self.work, "server.out"), "w"),
                stderr=open(self.log_path, "w"),
            )
            self.api = Api(self.port)
            if self.wait_healthy():
                break
            with open(self.log_path, errors="replace") as f:
                taken = "cannot bind" in f.read()
            if not taken or attempt == 2:
                raise DrillError(f"the server exited at start ({self.server.returncode}); "
                                 f"see {self.log_path}")
            log(f"port {self.port} was taken meanwhile; trying another")
        with open(f"/proc/{self.server.pid}/maps") as f:
            preloaded = "libfaketime" in f.read()
        if not preloaded:
            raise DrillError("libfaketime is not mapped into the server process "
                             "(LD_PRELOAD ignored?): the clock cannot be stepped")
        fig = clock_figures(self.api)
        if any(v for v in fig["fallback"].values()):
            self.notes.append("the server's clock runs on its clock_gettime fallback (no invariant TSC)")
        self.start_figures = fig
        log(f"server up on 127.0.0.1:{self.port} (pid {self.server.pid}), receiver on "
            f"127.0.0.1:{self.receiver.port}, libfaketime mapped, shards {sorted(fig['steps'])}")

    def wait_healthy(self):
        """True once the server says it serves HTTP and /healthz answers 200; False if it
        exits first. The log line comes first, so that a health check never reaches another
        process that happens to hold the port."""
        deadline = time.monotonic() + self.a.start_timeout
        listening = False
        while True:
            if self.server.poll() is not None:
                return False
            if not listening:
                with open(self.log_path, errors="replace") as f:
                    listening = "punctual serving HTTP" in f.read()
            if listening:
                try:
                    status, _ = self.api.request("GET", "/healthz")
                    if status == 200:
                        return True
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise DrillError(f"the server did not answer /healthz 200 within "
                                 f"{self.a.start_timeout} s; see {self.log_path}")
            time.sleep(0.05)

    # -- registration --------------------------------------------------------------------

    def register(self):
        a = self.a
        rng = random.Random(a.seed)
        now_ms = time.time_ns() // MS
        self.first_ms = now_ms + int(a.lead_s * 1000)
        self.last_ms = self.first_ms + int(a.spread_s * 1000)
        tenants = [f"drill-{i}" for i in range(a.tenants)]
        plan = []  # (tenant, key, fire_at_ms)
        for i in range(a.timers):
            t = tenants[i % len(tenants)]
            plan.append((t, f"k{i:06d}", rng.randint(self.first_ms, self.last_ms)))
        rng.shuffle(plan)
        n_put = int(len(plan) * a.put_share)
        by_put, by_batch = plan[:n_put], plan[n_put:]

        def item(key, tenant, ms):
            return {"key": key, **body(tenant, ms)}

        def body(tenant, ms):  # a PUT's body: the key is in the path
            return {"fire_at_ms": ms, "payload": {"drill": "clock_step"},
                    "callback": {"url": f"{self.hook_prefix}hook/{tenant}"}}

        def record(tenant, key, status, doc, ms):
            if status in (200, 201) and doc and "version" in doc:
                if doc.get("fire_at_us") != ms * 1000:
                    self.failures.append(f"{tenant}/{key}: acknowledged fire_at_us "
                                         f"{doc.get('fire_at_us')} != {ms * 1000}")
                prev = self.acked.get((tenant, key))
                if prev:
                    self.superseded.add(f"{tenant}/{key}/{prev[0]}")
                self.acked[(tenant, key)] = (doc["version"], ms * 1000)
                return True
            return False

        t0 = time.monotonic()
        # Batches: one POST per tenant and chunk.
        per_tenant = {}
        for t, k, ms in by_batch:
            per_tenant.setdefault(t, []).append((k, ms))
        for t, items in per_tenant.items():
            for c in range(0, len(items), a.batch):
                chunk = items[c:c + a.batch]
                pending = list(chunk)
                for _ in range(5):  # resubmit items answered 503 (not acknowledged)
                    status, doc = self.api.json(
                        "POST", f"/v1/timers/{t}", {"timers": [item(k, t, ms) for k, ms in pending]})
                    if status == 503:  # the whole request refused (overloaded): try again
                        time.sleep(0.2)
                        continue
                    if status != 200 or not doc:
                        raise DrillError(f"batch POST for {t} answered {status}: {doc}")
                    retry = []
                    for (k, ms), res in zip(pending, doc["results"]):
                        if not record(t, k, res.get("status"), res, ms):
                            if res.get("status") == 503:
                                self.unacked.setdefault((t, k), set()).add(ms * 1000)
                                retry.append((k, ms))
                            else:
                                raise DrillError(f"batch item {t}/{k} refused: {res}")
                    pending = retry
                    if not pending:
                        break
                    time.sleep(0.2)
                self.not_acked += len(pending)

        # Single PUTs, from a few client threads.
        def put_all(part):
            for t, k, ms in part:
                for _ in range(5):
                    status, doc = self.api.json("PUT", f"/v1/timers/{t}/{k}", body(t, ms))
                    with self.reg_lock:
                        if record(t, k, status, doc, ms):
                            break
                    if status != 503:
                        raise DrillError(f"PUT {t}/{k} answered {status}: {doc}")
                    with self.reg_lock:
                        self.unacked.setdefault((t, k), set()).add(ms * 1000)
                    time.sleep(0.2)
                else:
                    with self.reg_lock:
                        self.not_acked += 1

        self.reg_lock = threading.Lock()
        self.reg_errors = []

        def guarded(part):
            try:
                put_all(part)
            except Exception as e:  # noqa: BLE001 - reported below
                self.reg_errors.append(e)

        threads = [threading.Thread(target=guarded, args=(by_put[i::4],)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if self.reg_errors:
            raise DrillError(f"registration failed: {self.reg_errors[0]}")

        # Replacements: PUT some batch-registered keys again with a later deadline. Only the
        # new version may be delivered; the replaced one never.
        replaced = by_batch[: int(len(by_batch) * a.replace_share)]
        for t, k, ms in replaced:
            new_ms = min(self.last_ms, ms + rng.randint(100, 2000))
            old = self.acked[(t, k)]
            for _ in range(5):
                status, doc = self.api.json("PUT", f"/v1/timers/{t}/{k}", body(t, new_ms))
                if status != 503:  # 503: not acknowledged, retry the same PUT
                    break
                self.unacked.setdefault((t, k), set()).add(new_ms * 1000)
                time.sleep(0.2)
            if status not in (200, 201) or not record(t, k, status, doc, new_ms):
                raise DrillError(f"replacing PUT {t}/{k} answered {status}: {doc}")
            if status == 201:
                # The first timer had already fired (a slow registration): both are expected.
                old_key = f"{t}/{k}/{old[0]}"
                self.superseded.discard(old_key)
                self.fired_first[old_key] = old[1]
        took = time.monotonic() - t0
        self.replaced = len(replaced)
        log(f"registered {len(self.acked)} timers ({len(by_batch)} by batch POST, {len(by_put)} by PUT, "
            f"{len(replaced)} replaced by PUT) over {a.tenants} tenants in {took:.2f} s; "
            f"deadlines over {a.spread_s:g} s from {a.lead_s:g} s ahead")
        if time.time_ns() // MS > self.first_ms:
            # The clock changes are timed against the deadlines: with timers firing (or fired)
            # before they are all registered, the drill would not test what it says.
            raise DrillError(f"registration took {took:.2f} s, past the first deadline "
                             f"({a.lead_s:g} s ahead): the host is too slow for this run "
                             "(journal writes answered 503 or slow); rerun, or raise --lead-s")

    # -- the clock schedule --------------------------------------------------------------

    def sleep_until_ms(self, real_ms):
        while True:
            left = real_ms / 1000 - time.time()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def watch_offset(self, expect_sign, seconds):
        """Scrapes /metrics until every shard has shown an offset gauge of about the step.
        The gauge holds the last anchor's offset, so it shows a step for one anchor interval
        (100 ms) only; returns what each shard showed, and the longest span between the
        start of one scrape and the end of the next (a miss is conclusive only when that
        stayed under the interval)."""
        seen = {}
        end = time.monotonic() + seconds
        last_start = None
        widest = 0.0
        while time.monotonic() < end:
            start = time.monotonic()
            try:
                off = per_shard(self.api.metrics(), "punctual_clock_offset_seconds")
            except (OSError, http.client.HTTPException, DrillError):
                off = {}
            if last_start is not None:
                widest = max(widest, time.monotonic() - last_start)
            last_start = start
            for s, v in off.items():
                if v * expect_sign > abs(seen.get(s, 0)):
                    seen[s] = v
            if off and all(abs(seen.get(s, 0)) >= 0.9 * self.a.step_s for s in off):
                break
            time.sleep(0.01)
        return seen, widest * 1000

    def phase(self, name, action):
        before = clock_figures(self.api)
        begin = time.time_ns()
        extra = action()
        time.sleep(0.4)  # a few anchor intervals for every shard to see the last change
        self.phase_spans.append((name, begin, time.time_ns()))
        after = clock_figures(self.api)
        self.phase_figures[name] = {
            "steps": delta(after["steps"], before["steps"]),
            "set_backs": delta(after["set_backs"], before["set_backs"]),
            "extra": extra,
        }

    def run_clock(self):
        a = self.a
        step_ns = int(a.step_s * NS)
        slew_ns = int(a.slew_step_ms * MS)
        start = self.first_ms

        def step(delta_ns, sign):
            def go():
                t = self.fake.step(delta_ns)
                log(f"clock: stepped {delta_ns / NS:+.3f} s (offset now {self.fake.offset_ns / NS:+.3f} s)")
                gauge, widest_ms = self.watch_offset(sign, 1.5)
                return {"gauge": gauge, "widest_ms": widest_ms, "at": t}
            return go

        def slew(delta_ns, n):
            def go():
                for _ in range(n):
                    self.fake.step(delta_ns)
                    time.sleep(a.slew_every_ms / 1000)
                log(f"clock: slewed {n} x {delta_ns / MS:+.1f} ms every {a.slew_every_ms} ms "
                    f"(offset now {self.fake.offset_ns / NS:+.3f} s)")
                return {}
            return go

        # Points in the spread of deadlines; a phase that runs late starts the next one late.
        # Step backward (the mapping suddenly leads: it must not fire what became not due).
        self.sleep_until_ms(start + int(a.spread_s * 1000 * 0.15))
        self.phase("step back", step(-step_ns, +1))
        # Step forward (what became due fires at once, late by the stepped clock).
        self.sleep_until_ms(start + int(a.spread_s * 1000 * 0.35))
        self.phase("step forward", step(+step_ns, -1))
        # Slew forward, then back: small changes under the step threshold.
        self.sleep_until_ms(start + int(a.spread_s * 1000 * 0.50))
        self.phase("slew forward", slew(+slew_ns, a.slew_steps))
        self.sleep_until_ms(start + int(a.spread_s * 1000 * 0.73))
        self.phase("slew back", slew(-slew_ns, a.slew_steps))

    # -- waiting and judging -------------------------------------------------------------

    def wait_for_deliveries(self):
        expected = {f"{t}/{k}/{v}" for (t, k), (v, _) in self.acked.items()} | set(self.fired_first)
        # The last deadline by the stepped clock, plus the webhook timeout and slack.
        give_up = self.last_ms / 1000 + abs(self.fake.offset_ns) / NS + self.a.settle_s
        while time.time() < give_up:
            if expected <= self.receiver.delivered_keys():
                break
            if self.server.poll() is not None:
                self.failures.append(f"the server exited during the drill ({self.server.returncode})")
                break
            time.sleep(0.2)
        time.sleep(self.a.linger_s)  # time for a repeat to show up
        self.expected = expected

    def judge(self):
        a = self.a
        window_ns = int(a.window_ms * MS)
        deliveries, bad = self.receiver.snapshot()
        deadline_of = {f"{t}/{k}/{v}": d for (t, k), (v, d) in self.acked.items()}
        deadline_of.update(self.fired_first)
        count = {}
        lateness_ms = []
        early, stepwin, tolerated = [], [], []
        rows = []
        self_early = 0
        retries = 0
        mismatched = 0
        unexpected = []
        unacked_delivered = 0
        # Deadlines that a forward change jumped over (by the stepped clock): they became due
        # all at once, so their lateness is up to the jump by design; reported apart.
        jumped = [(before + old, after + new) for before, after, old, new in self.fake.changes
                  if new > old]
        other_ms = []
        for arrival, key, attempt, doc in deliveries:
            count[key] = count.get(key, 0) + 1
            if attempt not in (None, "1"):
                retries += 1
            if count[key] > 1:
                continue  # judge the first delivery of each key; repeats are counted apart
            tenant, k, version = key.rsplit("/", 2)
            if key not in deadline_of:
                # A write answered 503 may still have taken effect, and fired: allowed, and
                # judged by the deadline the drill sent with it.
                sent = self.unacked.get((tenant, k), set())
                if doc.get("fire_at_us") not in sent:
                    unexpected.append(key)
                    continue
                deadline_of[key] = doc["fire_at_us"]
                unacked_delivered += 1
            d_ns = deadline_of[key] * 1000
            if (doc.get("tenant"), doc.get("key"), str(doc.get("version"))) != (tenant, k, version) \
                    or doc.get("fire_at_us") != deadline_of[key]:
                mismatched += 1
            if isinstance(doc.get("fired_at_us"), int) and doc["fired_at_us"] < deadline_of[key]:
                self_early += 1
            offset = self.fake.offset_at(arrival)
            stepped = arrival + offset
            lateness_ms.append((stepped - d_ns) / MS)
            if not any(lo < d_ns <= hi for lo, hi in jumped):
                other_ms.append((stepped - d_ns) / MS)
            verdict = "on_time"
            if stepped < d_ns:
                verdict = self.classify(arrival, d_ns, stepped, window_ns)
                rec = (key, (d_ns - stepped) / MS, arrival)
                {"step_window": stepwin, "tolerated": tolerated, "early": early}[verdict].append(rec)
            rows.append((key, deadline_of[key], arrival // 1000, offset // 1000,
                         f"{(stepped - d_ns) / MS:.3f}", verdict, self.phase_of(arrival).replace(" ", "_")))
        with open(os.path.join(self.work, "deliveries.csv"), "w") as f:
            f.write("idempotency_key,deadline_us,arrival_real_us,offset_us,lateness_ms,verdict,phase\n")
            for row in rows:
                f.write(",".join(str(x) for x in row) + "\n")
        dups = sum(n - 1 for n in count.values() if n > 1)
        missing = sorted(self.expected - set(count))
        lateness_ms.sort()
        other_ms.sort()
        self.result = {
            "deliveries": len(deliveries), "delivered": len(set(count) & self.expected),
            "early": early, "stepwin": stepwin, "tolerated": tolerated, "dups": dups, "missing": missing,
            "unexpected": unexpected, "retries": retries, "mismatched": mismatched,
            "self_early": self_early, "bad": bad, "lateness_ms": lateness_ms,
            "other_ms": other_ms, "unacked_delivered": unacked_delivered,
        }

    def classify(self, arrival, d_ns, stepped, window_ns):
        """A delivery early by the offset at its arrival: "step_window" when it was on time by an
        offset in force during the window before it (a backward change the shard had not yet
        seen at its next anchor, or a request already under way), "tolerated" when it is early
        by no more than --lead-tolerance-ms, else "early"."""
        if self.a.strict:
            return "early"
        best = max(self.fake.offsets_between(arrival - window_ns, arrival))
        if arrival + best >= d_ns:
            return "step_window"
        if d_ns - stepped <= self.a.lead_tolerance_ms * MS:
            return "tolerated"
        return "early"

    def phase_of(self, arrival):
        """The clock phase an arrival fell in (up to a window after its end), or "-"."""
        window_ns = int(self.a.window_ms * MS)
        for name, lo, hi in self.phase_spans:
            if lo <= arrival <= hi + window_ns:
                return name
        return "-"

    def since_change(self, arrival):
        """ms from the last offset change at or before `arrival` to it."""
        last = None
        for before, _after, _old, _new in self.fake.changes:
            if before <= arrival:
                last = before
        return None if last is None else (arrival - last) / MS

    def backward_cause(self, arrival):
        """The last backward change at or before `arrival`: (size ns, ms since it)."""
        last = None
        for before, _after, old, new in self.fake.changes:
            if before <= arrival and new < old:
                last = (old - new, (arrival - before) / MS)
        return last

    # -- the server's own account: metrics and log -----------------------------------------

    def check_server(self):
        a = self.a
        end = clock_figures(self.api)
        shards = sorted(end["steps"])
        self.check(len(shards) == a.shards, f"/metrics reports {len(shards)} shards (expected {a.shards})")
        total = delta(end["steps"], self.start_figures["steps"])
        self.total_steps = total
        self.total_set_backs = delta(end["set_backs"], self.start_figures["set_backs"])
        self.end_offset = end["offset"]
        for name in ("step back", "step forward"):
            ph = self.phase_figures[name]
            for s in shards:
                self.check(ph["steps"].get(s, 0) == 1,
                           f"{name}: shard {s} counted {ph['steps'].get(s, 0):g} step(s) in "
                           "punctual_clock_steps (expected 1)")
            sign = +1 if name == "step back" else -1
            gauge, widest = ph["extra"]["gauge"], ph["extra"]["widest_ms"]
            for s in shards:
                v = gauge.get(s, 0.0)
                what = (f"{name}: shard {s} showed punctual_clock_offset_seconds {v:+.3f} "
                        f"(expected about {sign * a.step_s:+.1f})")
                if v * sign < 0.9 * a.step_s and widest >= 100:
                    # The gauge shows a step for one 100 ms anchor interval; scrapes this far
                    # apart can miss it, so the miss proves nothing (the counter still must).
                    self.notes.append(f"{what}: not seen, but scrapes were up to {widest:.0f} ms "
                                      "apart on this host (the gauge shows a step for 100 ms): inconclusive")
                    continue
                self.check(v * sign >= 0.9 * a.step_s, what)
        for name in ("slew forward", "slew back"):
            ph = self.phase_figures[name]
            for s in shards:
                # Each small change is under the 50 ms threshold, and the lag it leaves is slewed
                # out at up to 10 % of the rate: no step, unless a shard went unscheduled for
                # several anchor intervals on a starved host.
                self.check(ph["steps"].get(s, 0) == 0,
                           f"{name}: shard {s} counted {ph['steps'].get(s, 0):g} step(s) (expected 0: "
                           f"{a.slew_step_ms:g} ms changes are under the threshold)")
        ph = self.phase_figures["slew back"]
        for s in shards if a.slew_steps > 0 else []:
            self.check(ph["set_backs"].get(s, 0) >= 1,
                       f"slew back: shard {s} counted {ph['set_backs'].get(s, 0):g} set-back(s) "
                       "in punctual_clock_set_backs (leads under the threshold)")
        for s in shards:
            v = end["offset"].get(s, 0.0)
            self.check(abs(v) < 0.05, f"shard {s}: punctual_clock_offset_seconds {v:+.6f} at the end "
                                      "(settled within 50 ms)")
        with open(self.log_path, errors="replace") as f:
            lines = [l for l in f if "system clock stepped" in l]
        back = sum(1 for l in lines if re.search(r'direction="?backward', l))
        fwd = sum(1 for l in lines if re.search(r'direction="?forward', l))
        self.log_lines = (len(lines), back, fwd)
        self.check(back >= a.shards and fwd >= a.shards,
                   f"server log: {len(lines)} \"system clock stepped\" lines, {back} backward and "
                   f"{fwd} forward (at least {a.shards} of each: one per shard)")

    # -- stop ------------------------------------------------------------------------------

    def stop(self):
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                rc = self.server.wait(timeout=30)
                if rc != 0:
                    self.failures.append(f"the server exited {rc} on SIGTERM")
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
                self.failures.append("the server did not stop within 30 s of SIGTERM (killed)")
        if self.server and self.server.poll() is not None:
            # libfaketime may leave its shared memory behind when a process does not exit cleanly.
            for name in (f"faketime_shm_{self.server.pid}", f"sem.faketime_sem_{self.server.pid}"):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass
        if self.receiver:
            self.receiver.stop()

    # -- summary -----------------------------------------------------------------------------

    def summary(self):
        a, r = self.a, self.result
        lat = r["lateness_ms"]
        self.check(not r["early"], f"early by the stepped clock: {len(r['early'])}")
        self.check(r["dups"] == 0, f"duplicate deliveries (same Idempotency-Key): {r['dups']}")
        self.check(not r["missing"], f"acknowledged but not delivered: {len(r['missing'])}")
        self.check(not r["unexpected"], f"deliveries of no acknowledged version "
                                        f"(replaced or unknown): {len(r['unexpected'])}")
        self.check(r["mismatched"] == 0, f"deliveries whose body does not match the registration: {r['mismatched']}")
        self.check(r["bad"] == 0, f"requests without Idempotency-Key or JSON body: {r['bad']}")
        print()
        print("=" * 78)
        print("clock-step drill: summary")
        print("=" * 78)
        print(f"binary            {a.bin}")
        print(f"shards            {a.shards} (pinning {a.pinning}), journal store in {self.work}/data")
        print(f"timers            {len(self.acked)} acknowledged over {a.tenants} tenants "
              f"({self.replaced} replaced once; not acknowledged: {self.not_acked})")
        print(f"clock changes     step {-a.step_s:+g} s, step {a.step_s:+g} s, slew {a.slew_steps} x "
              f"{a.slew_step_ms:+g} ms every {a.slew_every_ms} ms, then {a.slew_steps} x {-a.slew_step_ms:+g} ms")
        print(f"delivered         {r['delivered']} of {len(self.expected)} "
              f"({r['deliveries']} requests, {r['retries']} with Punctual-Attempt > 1)")
        if self.unacked:
            print(f"                  writes answered 503 (not acknowledged): {len(self.unacked)} keys, "
                  f"{r['unacked_delivered']} of them delivered anyway (allowed: a 503 may have taken effect)")
        print(f"early             {len(r['early'])}   (judged by the stepped clock, window {a.window_ms:g} ms"
              f"{', strict' if a.strict else ''})")
        sw = r["stepwin"]
        print(f"  step window     {len(sw)}" + (" early by the clock at arrival, on time by the offset in force "
                                                 f"up to {a.window_ms:g} ms before:" if sw else ""))
        groups = {}
        for _key, by, arrival in sw:
            cause = self.backward_cause(arrival)
            kind = "the backward step" if cause and cause[0] >= 50 * MS else "a small backward change"
            g = groups.setdefault(kind, [0, 0.0, 0.0])
            g[0] += 1
            g[1] = max(g[1], by)
            g[2] = max(g[2], cause[1] if cause else 0.0)
        for kind, (n, by, since) in sorted(groups.items()):
            print(f"                  after {kind}: {n}, at most {by:.3f} ms early, "
                  f"arriving at most {since:.1f} ms after it")
        if sw:
            print("                  (a libfaketime step is no kernel clock set: the server's cancel-on-set")
            print("                  timerfd does not fire, so each shard sees it at its next 100 ms anchor)")
        if a.lead_tolerance_ms:
            tol = r["tolerated"]
            print(f"  tolerated       {len(tol)} early by at most --lead-tolerance-ms {a.lead_tolerance_ms:g}")
        if r["early"]:
            by_phase = {}
            for _key, by, arrival in r["early"]:
                g = by_phase.setdefault(self.phase_of(arrival), [0, 0.0])
                g[0] += 1
                g[1] = max(g[1], by)
            for name, (n, by) in sorted(by_phase.items(), key=lambda x: -x[1][0]):
                print(f"  EARLY in phase  {name}: {n}, at most {by:.3f} ms early")
            for key, by, arrival in sorted(r["early"], key=lambda x: -x[1])[:5]:
                since = self.since_change(arrival)
                print(f"    e.g. {key}: {by:.3f} ms early, "
                      f"{'-' if since is None else f'{since:.1f} ms'} after the last offset change")
        print(f"duplicates        {r['dups']}")
        print(f"missing           {len(r['missing'])}" + (f"  e.g. {r['missing'][:5]}" if r['missing'] else ""))
        replaced = sum(1 for k in r["unexpected"] if k in self.superseded)
        print(f"unexpected        {len(r['unexpected'])}" + (
            f"  ({replaced} of a replaced version) e.g. {r['unexpected'][:5]}" if r["unexpected"] else ""))
        if lat:
            oth = r["other_ms"]
            print(f"lateness (ms)     p50 {percentile(lat, 50):.2f}  p99 {percentile(lat, 99):.2f}  "
                  f"max {lat[-1]:.2f}   all deliveries, arrival by the stepped clock - deadline")
            if oth:
                print(f"                  p50 {percentile(oth, 50):.2f}  p99 {percentile(oth, 99):.2f}  "
                      f"max {oth[-1]:.2f}   without the {len(lat) - len(oth)} deadlines a forward change "
                      "jumped over")
        print(f"self-reported     fired_at_us < fire_at_us in {r['self_early']} deliveries (server's own view; "
              "information)")
        shards = sorted(self.total_steps)
        print("clock metrics     per shard: " + "; ".join(
            f"shard {s}: steps {self.total_steps[s]:g}, set-backs {self.total_set_backs.get(s, 0):g}, "
            f"offset now {self.end_offset.get(s, 0) * 1e6:+.1f} us" for s in shards))
        for name, ph in self.phase_figures.items():
            gauge = ph["extra"].get("gauge") if ph["extra"] else None
            g = "" if not gauge else "; offset gauge seen " + ", ".join(
                f"{s}: {v:+.3f} s" for s, v in sorted(gauge.items()))
            print(f"  {name:<15} steps {dict((s, int(v)) for s, v in ph['steps'].items())}, "
                  f"set-backs {dict((s, int(v)) for s, v in ph['set_backs'].items())}{g}")
        n, back, fwd = self.log_lines
        print(f"server log        {n} \"system clock stepped\" lines ({back} backward, {fwd} forward)")
        for note in self.notes:
            print(f"note              {note}")
        print("-" * 78)
        if self.failures:
            print(f"FAILED: {len(self.failures)} assertion(s)")
            for f in self.failures:
                print(f"  - {f}")
        else:
            print("PASSED: every assertion holds")
        print(f"work directory    {self.work} (server.log, punctual.toml, faketime.rc, deliveries.csv)")
        print("=" * 78)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True, help="the punctual binary")
    p.add_argument("--faketime-lib", required=True, help="path of libfaketimeMT.so.1")
    p.add_argument("--workdir", required=True, help="where the journal, config and logs go")
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--page-horizon-s", type=int, default=0,
                   help="page timers due further ahead than this (3 pages most of the drill's)")
    p.add_argument("--pinning", default="none", help="auto|none (default none: shared hosts)")
    p.add_argument("--timers", type=int, default=3000)
    p.add_argument("--tenants", type=int, default=8)
    p.add_argument("--batch", type=int, default=250, help="items per batch POST")
    p.add_argument("--put-share", type=float, default=0.2, help="share registered by single PUTs")
    p.add_argument("--replace-share", type=float, default=0.03,
                   help="share of batch timers replaced by a later PUT")
    p.add_argument("--lead-s", type=float, default=8.0,
                   help="first deadline this far ahead (registration must finish first)")
    p.add_argument("--spread-s", type=float, default=20.0, help="deadlines spread over this long")
    p.add_argument("--step-s", type=float, default=2.0, help="size of the backward and forward steps")
    p.add_argument("--slew-step-ms", type=float, default=5.0,
                   help="size of each small step of the emulated slew (under 50 ms)")
    p.add_argument("--slew-every-ms", type=int, default=100)
    p.add_argument("--slew-steps", type=int, default=40, help="small steps each way")
    p.add_argument("--window-ms", type=float, default=150.0,
                   help="after an offset change, an arrival may be judged by the offset before it")
    p.add_argument("--strict", action="store_true",
                   help="fail on early deliveries inside the step window too")
    p.add_argument("--lead-tolerance-ms", type=float, default=0.0,
                   help="do not fail on deliveries early by at most this much (default 0)")
    p.add_argument("--settle-s", type=float, default=20.0, help="wait this long past the last deadline")
    p.add_argument("--linger-s", type=float, default=2.0, help="watch for repeats after the last delivery")
    p.add_argument("--start-timeout", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args()
    if a.seed is None:
        a.seed = random.randrange(1 << 30)
    if a.slew_step_ms * MS >= 50 * MS:
        p.error("--slew-step-ms must stay under the 50 ms step threshold")
    log(f"clock-step drill: {a.timers} timers, {a.shards} shards, seed {a.seed}")

    d = Drill(a)
    try:
        d.start()
        d.register()
        d.run_clock()
        d.wait_for_deliveries()
        d.judge()
        if d.server.poll() is None:
            d.check_server()
        else:
            d.failures.append("the server was not running at the end: its metrics and log "
                              "were not checked")
            d.log_lines, d.total_steps, d.total_set_backs, d.end_offset = (0, 0, 0), {}, {}, {}
    except DrillError as e:
        log(f"drill could not run: {e}")
        d.stop()
        return 2
    except (OSError, http.client.HTTPException) as e:
        if d.server is not None and d.server.poll() is not None:
            log(f"FAIL  the server exited ({d.server.returncode}) during the drill: {e}; "
                f"see {d.work}/server.log")
            d.stop()
            return 1
        d.stop()
        raise
    except BaseException:
        d.stop()
        raise
    d.stop()
    d.summary()
    return 1 if d.failures else 0


if __name__ == "__main__":
    sys.exit(main())
