#!/usr/bin/env python3
"""Recurring schedules across steps of the system clock: the engine behind
perf/drills/schedule_clock.sh.

Runs `punctual serve` (the journal) under libfaketime, as perf/drills/clock_step.py does (its
module doc says how the clock is moved and why a step is seen within one 100 ms anchor), with
four schedules every second, each delivered to this process's receiver:

  all      every_ms 1000, catch_up all
  latest   every_ms 1000, catch_up latest
  skip     every_ms 1000, catch_up skip
  cron     "* * * * * *" in Europe/Paris, catch_up all

The clock: 4 s as it is, then a step forward (default 10 s), 4 s, a step back of twice that
(the stepped clock now lies behind the occurrences already fired), 6 s, a step forward back
to the real time, 5 s; then SIGTERM.

Checks, each schedule (exit 1 on any failure):
  - the server logged each step ("system clock stepped"), so the steps reached it;
  - never early: every delivery arrives at or after its occurrence by the stepped clock (the
    larger offset in force around a change, as clock_step.py judges);
  - once: no occurrence delivered under two versions or two sequences;
  - forward only: occurrences fire in increasing order (`fired_at_us`; their webhooks run
    concurrently, so arrivals may swap), and none fired after the step back
    repeats one before it (the schedule's cursor only moves forward);
  - catch-up as asked: `all` and `cron` hold every second from their first occurrence to their
    last, the ones the forward step jumped over among them, marked `caught_up`; `skip` fires
    none caught up; `latest` at most one per step; each `sequence` one more than the last.

Usage: schedule_clock.py --bin PUNCTUAL --faketime-lib LIB --workdir DIR [--step-s 10]
Python standard library only."""

import argparse
import os
import signal
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clock_step_io import DrillError, log  # noqa: E402
from clock_step_run import Running  # noqa: E402

NS, SECOND_US = 1_000_000_000, 1_000_000
SCHEDULES = {
    "all": {"every_ms": 1000, "catch_up": {"policy": "all", "window_ms": 3_600_000}},
    "latest": {"every_ms": 1000, "catch_up": {"policy": "latest", "window_ms": 3_600_000}},
    "skip": {"every_ms": 1000, "catch_up": {"policy": "skip", "window_ms": 3_600_000}},
    "cron": {"cron": "* * * * * *", "time_zone": "Europe/Paris",
             "catch_up": {"policy": "all", "window_ms": 3_600_000}},
}


class Drill(Running):
    def __init__(self, a):
        self.a, self.work, self.notes, self.fails = a, a.workdir, [], []

    def fail(self, msg):
        self.fails.append(msg)
        log(f"FAIL {msg}")

    def create(self):
        for name, body in SCHEDULES.items():
            body = dict(body, payload={"drill": name}, callback={"url": f"{self.hook_prefix}{name}"})
            status, answer = self.api.json("PUT", f"/v1/schedules/drill/{name}", body)
            if status != 201:
                raise DrillError(f"schedule {name}: PUT answered {status} {answer}")

    def run_clock(self):
        step = int(self.a.step_s * NS)
        time.sleep(4)
        self.steps = [("forward", self.fake.step(step))]
        time.sleep(4)
        self.steps.append(("back", self.fake.step(-2 * step)))
        time.sleep(6)
        self.steps.append(("forward", self.fake.step(step)))
        time.sleep(5)

    def judge(self):
        deliveries, bad = self.receiver.snapshot()
        if bad:
            self.fail(f"{bad} deliveries without an Idempotency-Key or a JSON body")
        with open(self.log_path, errors="replace") as f:
            logged = f.read().count("system clock stepped")
        if logged < len(self.steps):
            self.fail(f"the server logged {logged} clock steps of the drill's {len(self.steps)}: the steps were not seen")
        back_at = next(t for kind, t in self.steps if kind == "back")
        forward_steps = sum(1 for kind, _ in self.steps if kind == "forward")
        for name in SCHEDULES:
            seen = []  # (arrival ns, occurrence µs, version, sequence, caught_up)
            for arrival, _key, _attempt, doc in deliveries:
                p = doc.get("payload") or {}
                if doc.get("key", "").startswith(f"@{name}@"):
                    seen.append((arrival, p.get("occurrence_us"), doc.get("version"), p.get("sequence"),
                                 p.get("caught_up"), doc.get("fired_at_us")))
            self.judge_one(name, seen, back_at, forward_steps)

    def judge_one(self, name, seen, back_at, forward_steps):
        fired = {}
        for _, occ, _, _, _, fired_at in seen:
            fired.setdefault(occ, fired_at)
        seen = [t[:5] for t in seen]
        if len(seen) < 5:
            self.fail(f"{name}: only {len(seen)} deliveries")
            return
        by_occ = {}
        for arrival, occ, version, seq, _ in seen:
            by_occ.setdefault(occ, set()).add((version, seq))
            stepped_us = (arrival + self.fake.offset_at(arrival)) // 1000
            if stepped_us < occ:
                self.fail(f"{name}: occurrence {occ} arrived {(occ - stepped_us) / 1e3:.1f} ms early by the stepped clock")
        for occ, kinds in by_occ.items():
            if len(kinds) > 1:
                self.fail(f"{name}: occurrence {occ} delivered as {sorted(kinds)} (version, sequence)")
        # In order of firing: deliveries run concurrently, so two fired in the same pass may
        # arrive either way round (as any two webhooks).
        by_fire = sorted(fired, key=lambda occ: (fired[occ], occ))
        if by_fire != sorted(fired):
            self.fail(f"{name}: occurrences fired out of order: {[(o, fired[o]) for o in by_fire]}")
        by_arrival = list(dict.fromkeys(occ for _, occ, _, _, _ in sorted(seen)))
        swapped = sum(1 for a, b in zip(by_arrival, by_arrival[1:]) if b < a)
        before = {occ for arrival, occ, _, _, _ in seen if arrival < back_at}
        after = {occ for arrival, occ, _, _, _ in seen if arrival >= back_at}
        if after and before and min(after) <= max(before):
            self.fail(f"{name}: after the step back, occurrence {min(after)} fired again or behind "
                      f"{max(before)}")
        occs = sorted(by_occ)
        seqs = {occ: min(s for _, s in by_occ[occ]) for occ in occs}
        caught = {occ for _, occ, _, _, c in seen if c}
        gaps = [(a, b) for a, b in zip(occs, occs[1:]) if b - a != SECOND_US]
        for a, b in zip(occs, occs[1:]):
            if seqs[b] != seqs[a] + 1:
                self.fail(f"{name}: sequence {seqs[a]} at {a}, then {seqs[b]} at {b}")
        if name in ("all", "cron"):
            if gaps:
                self.fail(f"{name}: catch-up all, yet occurrences missing after {[a for a, _ in gaps]}")
            if len(caught) < self.a.step_s - 2:
                self.fail(f"{name}: only {len(caught)} occurrences caught up after a {self.a.step_s} s step")
        elif name == "skip" and caught:
            self.fail(f"skip: {len(caught)} occurrences fired as caught up")
        elif name == "latest" and len(caught) > forward_steps:
            self.fail(f"latest: {len(caught)} occurrences caught up over {forward_steps} forward steps")
        log(f"{name}: {len(occs)} occurrences, {len(caught)} caught up, gaps after "
            f"{[f'{(b - a) // SECOND_US - 1} s' for a, b in gaps]}, {len(seen) - len(occs)} repeats, {swapped} arrived before the one fired before them")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--faketime-lib", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--step-s", type=float, default=10.0)
    a = p.parse_args()
    args = types.SimpleNamespace(bin=a.bin, faketime_lib=a.faketime_lib, workdir=a.workdir, shards=2,
                                 pinning="none", page_horizon_s=0, start_timeout=60.0, step_s=a.step_s)
    d = Drill(args)
    try:
        d.start()
        d.create()
        d.run_clock()
        d.judge()
        d.server.send_signal(signal.SIGTERM)
        rc = d.server.wait(timeout=30)
        if rc != 0:
            d.fail(f"SIGTERM: exit {rc}")
    except DrillError as e:
        log(f"schedule clock drill: could not run: {e}")
        sys.exit(2)
    finally:
        if getattr(d, "server", None) is not None and d.server.poll() is None:
            d.server.kill()
        if getattr(d, "receiver", None) is not None:
            d.receiver.stop()
    log(f"schedule clock drill: {'FAILED' if d.fails else 'passed'} ({a.workdir})")
    sys.exit(1 if d.fails else 0)


if __name__ == "__main__":
    main()
