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
import random
import sys

sys.dont_write_bytecode = True   # no __pycache__ beside the scripts
from clock_step_io import MS, DrillError, log  # noqa: E402
from clock_step_judge import Judging  # noqa: E402
from clock_step_run import Running  # noqa: E402


class Drill(Running, Judging):
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
