#!/usr/bin/env python3
"""Which timers of a jitter-bench run were late, and what was going on when they were.

Reads the per-timer files that `JITTER_DUMP=DIR cargo bench --bench jitter` writes
(`DIR/<system>-<workload>.csv`: deadline and lateness in ns, in deadline order).

    perf/late_timers.py slots CSV [--late-us 3]
        Splits the timers by whether each is the first of its slot on wheel level 1, 2 or 3
        (64 us, 4.1 ms, 262 ms: `src/wheel/mod.rs`), and prints how many of each were late and
        their percentiles. A slot's first timer fires right after the slot's cascade: if it is
        late far more often than the rest, the cascade is what made it late.

    perf/late_timers.py events CSV EVENTS [--late-us 3]
        EVENTS is `perf script -F tid,time,event,trace --ns` of a `perf record -k mono -C 1
        -e ...` taken during the run, with its first line replaced by
        "offset <CLOCK_REALTIME - CLOCK_MONOTONIC in ns>" (read just before the run). For the
        late timers and for the timers on time, prints which kernel events the core saw between
        10 us before each deadline and its fire. A late timer with no event at all was held
        up by something the guest kernel does not see (the host) or by the process itself.
        The offset is read once, to within about a microsecond, so an event just after a
        fire may count as before it: a shard's ppoll right after it fires shows up so.

Only the Python standard library.
"""

import argparse
import bisect
import collections
import csv
import re
import sys


def load(path):
    rows = []
    with open(path) as f:
        reader = csv.reader(f)
        next(reader)
        for deadline, late in reader:
            if late:
                rows.append((int(deadline), int(late)))
    rows.sort()
    return rows


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def slots(rows, late_ns):
    late_total = sum(1 for _, l in rows if l >= late_ns)
    print(f"{len(rows)} timers, {late_total} late by {late_ns / 1e3:.1f} us or more")
    for level in (1, 2, 3):
        seen = set()
        first, rest = [], []
        for d, l in rows:
            s = (d // 1000) >> (6 * level)
            (rest if s in seen else first).append(l)
            seen.add(s)
        late_first = sum(1 for l in first if l >= late_ns)
        late_rest = sum(1 for l in rest if l >= late_ns)
        print(
            f"  level {level}: {len(first):6d} first in their slot, {late_first:5d} late "
            f"({100 * late_first / len(first):.1f}%; "
            f"the rest {100 * late_rest / max(1, len(rest)):.2f}%); "
            f"their p50 {pct(first, .5) / 1e3:.1f} p90 {pct(first, .9) / 1e3:.1f} "
            f"p99 {pct(first, .99) / 1e3:.1f} us"
        )


def events(rows, path, late_ns):
    with open(path) as f:
        head = f.readline().split()
        if len(head) != 2 or head[0] != "offset":
            sys.exit(f"{path}: the first line must be 'offset <ns>'")
        offset = int(head[1])
        evs = []
        for line in f:
            m = re.match(r"\s*(\d+)\s+(\d+)\.(\d+):\s+(\S+):\s*(.*)", line)
            if not m:
                continue
            _, sec, frac, name, rest = m.groups()
            t = int(sec) * 10**9 + int(frac.ljust(9, "0")[:9]) + offset
            if name == "irq:softirq_entry" and "action=" in rest:
                name += " " + rest.split("action=")[1].strip("]")
            if name == "sched:sched_switch" and "next_comm=" in rest:
                name += " to " + rest.split("next_comm=")[1].split()[0]
            evs.append((t, name))
    evs.sort()
    times = [t for t, _ in evs]

    def seen(d, l):
        i = bisect.bisect_left(times, d - 10_000)
        j = bisect.bisect_right(times, d + l)
        return {evs[k][1] for k in range(i, j)}

    for label, pick in (
        (f"late by {late_ns / 1e3:.1f} us or more", lambda l: l >= late_ns),
        ("on time (under 1 us)", lambda l: l < 1_000),
    ):
        picked = [(d, l) for d, l in rows if pick(l)]
        counts = collections.Counter()
        quiet = 0
        for d, l in picked:
            names = seen(d, l)
            quiet += not names
            counts.update(names)
        print(f"{label}: {len(picked)} timers, {quiet} with no kernel event on the core")
        for name, n in counts.most_common(8):
            print(f"   {n:6d} ({100 * n / max(1, len(picked)):.1f}%) {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["slots", "events"])
    ap.add_argument("csv")
    ap.add_argument("events_file", nargs="?")
    ap.add_argument("--late-us", type=float, default=3.0)
    a = ap.parse_args()
    rows = load(a.csv)
    if not rows:
        sys.exit(f"{a.csv}: no fired timers")
    late_ns = int(a.late_us * 1000)
    if a.what == "slots":
        slots(rows, late_ns)
    else:
        if not a.events_file:
            sys.exit("events needs the perf script output")
        events(rows, a.events_file, late_ns)


if __name__ == "__main__":
    main()
