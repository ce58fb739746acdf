#!/usr/bin/env python3
"""Soak load generator, sampler and verdict for `punctual serve` (called by perf/soak.sh).

Python standard library only.

    soak.py run --url http://127.0.0.1:PORT --pid PID --duration 30m --out DIR [--aux-pid PID]
    soak.py verdict --out DIR [--server-exit N] [--server-log FILE]

`run` drives a running server and samples it; it writes DIR/samples.csv (one row per sample),
DIR/summary.json (counts for the whole run) and DIR/errors.log (unexpected answers and
connection errors). `verdict` reads those files and prints the verdict (also written to
DIR/verdict.txt); its exit status is 0 when the run was clean, 1 when requests failed or the
fire count does not add up, 2 when the server died or did not exit cleanly.

The load
--------
Open loop: operations are due at a constant rate (--rate, ops/s, all connections together)
whatever the server does. Each due operation joins one FIFO queue; any idle keep-alive
connection (--conns of them) takes the head. A request's latency is measured from the time
it was DUE, not from when it was sent, so a stalled server shows up as latency instead of
as a quieter generator (no coordinated omission). The time from send to answer is recorded
too (svc_*), as is the generator's own lag (how late its loop noticed that an operation was
due: if that is large, the generator, not the server, was starved of CPU).

Operations (weights --mix, default new 50, resched 25, cancel 20, batch 5):
  new      PUT of a new key, delay 1-30 s                      expect 201
  resched  PUT of a recently scheduled key, new delay 1-30 s    expect 200 (pending) or 201 (it had fired)
  cancel   DELETE of a recently scheduled key                   expect 204, or 404 (it had fired or was cancelled)
  batch    POST of --batch new keys, delays 1-30 s             expect 200, every item 201
Every other answer, a connection error or a request outstanding for more than 10 s is an error.

Sampling
--------
Every --sample seconds (10 by default), from a separate thread:
  rss_mib, threads, fds     VmRSS and Threads of /proc/PID/status, entries of /proc/PID/fd
  cpu_pct                   server CPU time over the window (100 = one core)
  pending, fired_per_s      sum over shards of punctual_timers_pending; rate of punctual_timers_fired_total
  late_p50_ms, late_p99_ms  fire lateness quantiles over the window, from the difference of the
                            punctual_fire_lateness_seconds buckets (summed over shards) between
                            this scrape and the previous one, interpolated linearly inside the
                            bucket that holds the quantile (as Prometheus' histogram_quantile
                            does); the buckets go 1-2-5 from 1 us to 10 s, so a value is only
                            known to lie within its bucket
  late_max_le_ms            upper bound of the highest non-empty bucket in the window
  ops_per_s                 requests answered per second (client side)
  req_p50_ms .. req_max_ms  client-side latency from the due time, over requests answered in
                            the window (exact, from every request)
  svc_p99_ms                client-side latency from the actual send
  gen_lag_p99_ms            generator loop lag (see above); its timer resolution is ~1 ms
  errors, errors_total      unexpected answers/connection errors in the window, and so far
  cancel_404_total          expected 404s on DELETE so far
  store_pending_writes, journal_disk_mib, store_errors_total, ring_rejected_total,
  watchdog_wakes_total,
  executor_stalls_total     from /metrics, summed over shards
  executor_runnable_sleeps_total  of those, with the shard's task runnable (glommio's park bug)
  aux_rss_mib               VmRSS of --aux-pid (the soak's redis-server), if given
  shard_runq_wait_pct       host contention as the server saw it: the largest share of the
                            window a shard thread spent runnable but not running (schedstat)
  host_cpu_pressure_pct     /proc/pressure/cpu "some avg10": share of the last 10 s in which
                            some task on the host waited for a CPU
  host_io_pressure_pct      the same for I/O (a slow fdatasync shows up here)
  flush_p99_ms, flush_max_le_ms  punctual_store_flush_seconds over the window, like lateness
  gen_cpu_pct               this generator's own CPU use (100 = one core)
  backlog                   operations due but not yet sent (all connections busy): grows
                            without bound when the server cannot keep up with --rate
  stream_entries            Redis store: entries in the fired streams, all tenants (each is
                            trimmed at about 1,000,000, so Redis memory grows until then)
The first row (t=0) is taken before any load. After the load phase the server is sampled for
up to 60 s more (phase "drain") until no timer is pending: every timer then has fired or was
cancelled, and the fired count must equal the 201s minus the 204s the client received.
"""

import argparse
import json
import os
import re
import sys
import time

sys.dont_write_bytecode = True   # no __pycache__ beside the scripts
from soak_load import Load  # noqa: E402
from soak_sampler import Sampler  # noqa: E402
from soak_verdict import cmd_verdict  # noqa: E402


def parse_duration(text):
    """'90s', '30m', '1h', '1h30m', '45' (seconds) -> seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError(f"bad duration {text!r}: use e.g. 90s, 30m, 1h, 1h30m")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def cmd_run(args):
    os.makedirs(args.out, exist_ok=True)
    duration = parse_duration(args.duration)
    load = Load(args)
    sampler = Sampler(args, load, load.host, load.port)
    sampler.start()
    # let the t=0 (idle) sample land before the load starts
    while not sampler.rows and sampler.is_alive():
        time.sleep(0.01)
    elapsed = load.run(duration)
    sampler.finish.set()
    sampler.join()
    fs = getattr(sampler, "final_sums", None) or {}
    fired = int(fs.get("punctual_timers_fired_total", 0))
    summary = {
        "duration_s": duration, "load_elapsed_s": round(elapsed, 1), "rate": args.rate,
        "conns": args.conns, "mix": args.mix, "batch": args.batch, "sample_s": args.sample,
        "url": args.url, "store": args.store, "shards": args.shards,
        "requests_answered": load.done, "errors_total": load.errors_total,
        "errors_by_kind": dict(load.err_kinds), "answers": dict(sorted(load.by_kind.items())),
        "batch_items": {str(k): v for k, v in load.batch_items.items()},
        "cancel_404": load.cancel_404, "created_201": load.n201, "cancelled_204": load.n204,
        "expected_fires": load.n201 - load.n204, "fired_total": fired,
        "unacked_puts": load.unacked_puts, "unacked_cancels": load.unacked_cancels,
        "pending_end": sampler.rows[-1].get("pending") if sampler.rows else None,
        "drained": sampler.drained, "server_died": sampler.died, "died_at_s": sampler.died_at,
        "scrape_errors": sampler.scrape_errors,
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    load.err_log.close()
    if sampler.died:
        return 2
    return 1 if load.errors_total else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="drive and sample a running server")
    r.add_argument("--url", required=True)
    r.add_argument("--pid", type=int, required=True, help="the server's pid (for /proc)")
    r.add_argument("--aux-pid", type=int, help="another process whose RSS to record (redis-server)")
    r.add_argument("--duration", required=True, help="90s, 30m, 1h ...")
    r.add_argument("--out", required=True)
    r.add_argument("--rate", type=float, default=2000, help="operations per second, all connections")
    r.add_argument("--conns", type=int, default=64)
    r.add_argument("--batch", type=int, default=20, help="timers per batch POST")
    r.add_argument("--mix", default="50,25,20,5", help="weights: new,resched,cancel,batch")
    r.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--store", default="?", help="for the record only")
    r.add_argument("--shards", default="?", help="for the record only")
    r.add_argument("-v", "--verbose", action="store_true", help="print each sample to stderr")
    v = sub.add_parser("verdict", help="print the verdict of a finished run")
    v.add_argument("--out", required=True)
    v.add_argument("--server-exit", type=int)
    v.add_argument("--server-log")
    args = ap.parse_args()
    sys.exit(cmd_run(args) if args.cmd == "run" else cmd_verdict(args))


if __name__ == "__main__":
    main()
