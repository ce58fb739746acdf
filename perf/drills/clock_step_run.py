"""The clock-step drill's actions: start the server under libfaketime, register the timers,
step and slew its clock, wait for the deliveries, stop it."""

import http.client
import os
import random
import signal
import subprocess
import threading
import time

from clock_step_io import (
    MS, NS, Api, DrillError, FakeClock, Receiver, clock_figures, delta, log, per_shard,
)
from common import free_port


class Running:
    """Drill's steps that act on the server (the state lives in Drill.__init__)."""

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

    # -- waiting -----------------------------------------------------------------------

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
