"""The soak's sampler: one row of samples.csv every --sample seconds, from /proc and /metrics,
and the drain after the load."""

import csv
import http.client
import os
import sys
import threading
import time

from soak_probe import (
    hist_quantile, host_pressure, pct, proc_alive, proc_cpu_s, proc_fds, proc_status, scrape,
    shard_runq_wait_ns,
)

COLUMNS = [
    "t_s", "phase", "rss_mib", "threads", "fds", "cpu_pct", "pending", "fired_per_s",
    "late_p50_ms", "late_p99_ms", "late_max_le_ms", "ops_per_s", "req_p50_ms", "req_p99_ms",
    "req_max_ms", "svc_p99_ms", "gen_lag_p99_ms", "errors", "errors_total", "cancel_404_total",
    "flush_p99_ms", "flush_max_le_ms", "store_pending_writes", "journal_disk_mib",
    "store_errors_total", "store_ack_timeouts_total", "store_refused_total",
    "ring_rejected_total", "watchdog_wakes_total", "executor_stalls_total", "executor_runnable_sleeps_total", "journal_snapshots_total",
    "journal_compaction_holds_total", "aux_rss_mib", "shard_runq_wait_pct",
    "host_cpu_pressure_pct", "host_io_pressure_pct", "gen_cpu_pct", "stream_entries", "backlog",
]


class Sampler(threading.Thread):
    def __init__(self, args, load, host, port):
        super().__init__(daemon=True)
        self.args, self.load, self.host, self.port = args, load, host, port
        self.rows = []
        self.died = False
        self.died_at = None
        self.phase = "load"
        self.finish = threading.Event()  # set by main when the load is over: drain, then stop
        self.drained = False
        self.scrape_errors = 0
        self.last = None
        f = open(os.path.join(args.out, "samples.csv"), "w", newline="")
        self.csv_file = f
        self.csv = csv.DictWriter(f, fieldnames=COLUMNS)
        self.csv.writeheader()
        f.flush()

    def sample(self, t):
        pid = self.args.pid
        if not proc_alive(pid):
            self.died, self.died_at = True, round(t, 1)
            return None
        try:
            st = proc_status(pid)
            fds = proc_fds(pid)
            cpu = proc_cpu_s(pid)
            runq = shard_runq_wait_ns(pid)
        except OSError:
            self.died, self.died_at = True, round(t, 1)
            return None
        try:
            sums, buckets = scrape(self.host, self.port)
        except (OSError, http.client.HTTPException) as e:
            self.scrape_errors += 1
            self.load.error("scrape_error", str(e))
            sums, buckets = None, None
        with self.load.lock:
            lat, self.load.win_lat = self.load.win_lat, []
            lag, self.load.win_lag = self.load.win_lag, []
            done = self.load.done
        errors_total = self.load.errors_total
        now = time.monotonic()
        row = {k: "" for k in COLUMNS}
        gen_cpu = sum(os.times()[:2])
        row["backlog"] = len(self.load.queue)
        row.update(t_s=f"{t:.1f}", phase=self.phase, rss_mib=f"{st.get('VmRSS', 0) / 1024:.2f}",
                   threads=st.get("Threads", ""), fds=fds,
                   errors_total=errors_total, cancel_404_total=self.load.cancel_404)
        prev = self.last
        for what in ("cpu", "io"):
            psi = host_pressure(what)
            if psi is not None:
                row[f"host_{what}_pressure_pct"] = f"{psi:.1f}"
        if sums is not None:
            row["pending"] = int(sums.get("punctual_timers_pending", 0))
            row["store_pending_writes"] = int(sums.get("punctual_store_pending_writes", 0))
            if "punctual_journal_disk_bytes" in sums:
                row["journal_disk_mib"] = f"{sums['punctual_journal_disk_bytes'] / 2**20:.2f}"
            row["store_errors_total"] = int(sums.get("punctual_store_errors_total", 0))
            if "punctual_stream_length" in sums:
                row["stream_entries"] = int(sums["punctual_stream_length"])
            row["store_ack_timeouts_total"] = int(sums.get("punctual_store_ack_timeouts_total", 0))
            row["store_refused_total"] = int(sums.get("punctual_store_refused_total", 0))
            row["ring_rejected_total"] = int(sums.get("punctual_ring_rejected_total", 0))
            row["watchdog_wakes_total"] = int(sums.get("punctual_shard_watchdog_wakes_total", 0))
            row["executor_stalls_total"] = int(sums.get("punctual_executor_stalls_total", 0))
            row["executor_runnable_sleeps_total"] = int(
                sums.get("punctual_executor_runnable_sleeps_total", 0))
            row["journal_snapshots_total"] = int(sums.get("punctual_journal_snapshots_total", 0))
            row["journal_compaction_holds_total"] = int(
                sums.get("punctual_journal_compaction_holds_total", 0))
        if self.args.aux_pid:
            try:
                row["aux_rss_mib"] = f"{proc_status(self.args.aux_pid).get('VmRSS', 0) / 1024:.2f}"
            except OSError:
                row["aux_rss_mib"] = ""
        if prev is not None:
            dt = now - prev["mono"]
            row["cpu_pct"] = f"{100 * (cpu - prev['cpu']) / dt:.1f}"
            row["gen_cpu_pct"] = f"{100 * (gen_cpu - prev['gen_cpu']) / dt:.1f}"
            waits = [w - prev["runq"][tid] for tid, w in runq.items() if tid in prev["runq"]]
            if waits:
                row["shard_runq_wait_pct"] = f"{100 * max(waits) / 1e9 / dt:.1f}"
            row["ops_per_s"] = f"{(done - prev['done']) / dt:.1f}"
            row["errors"] = errors_total - prev["errors_total"]
            if sums is not None and prev["sums"] is not None:
                fired = sums.get("punctual_timers_fired_total", 0) - prev["sums"].get(
                    "punctual_timers_fired_total", 0)
                row["fired_per_s"] = f"{fired / dt:.1f}"
                late, late0 = buckets["punctual_fire_lateness_seconds"], prev["buckets"]["punctual_fire_lateness_seconds"]
                p50, _ = hist_quantile(0.50, late, late0)
                p99, max_le = hist_quantile(0.99, late, late0)
                if p99 is not None:
                    row["late_p50_ms"] = f"{p50 * 1e3:.4f}"
                    row["late_p99_ms"] = f"{p99 * 1e3:.4f}"
                    row["late_max_le_ms"] = f"{max_le * 1e3:.4f}"
                fl, fl0 = buckets["punctual_store_flush_seconds"], prev["buckets"]["punctual_store_flush_seconds"]
                p99, max_le = hist_quantile(0.99, fl, fl0)
                if p99 is not None:
                    row["flush_p99_ms"] = f"{p99 * 1e3:.3f}"
                    row["flush_max_le_ms"] = f"{max_le * 1e3:.3f}"
            if lat:
                due = sorted(x[0] for x in lat)
                svc = sorted(x[1] for x in lat)
                row["req_p50_ms"] = f"{pct(due, 0.50) * 1e3:.3f}"
                row["req_p99_ms"] = f"{pct(due, 0.99) * 1e3:.3f}"
                row["req_max_ms"] = f"{due[-1] * 1e3:.3f}"
                row["svc_p99_ms"] = f"{pct(svc, 0.99) * 1e3:.3f}"
            if lag:
                row["gen_lag_p99_ms"] = f"{pct(sorted(lag), 0.99) * 1e3:.3f}"
        self.last = {"mono": now, "cpu": cpu, "runq": runq, "gen_cpu": gen_cpu, "done": done, "errors_total": errors_total,
                     "sums": sums if sums is not None else (prev or {}).get("sums"),
                     "buckets": buckets if buckets is not None else (prev or {}).get("buckets")}
        self.final_sums = self.last["sums"]
        self.csv.writerow(row)
        self.csv_file.flush()
        self.rows.append(row)
        return row

    def run(self):
        step = self.args.sample
        t0 = time.monotonic()
        k = 0
        finished_at = None
        while True:
            if self.phase == "load" and self.finish.is_set():
                self.phase = "drain"
                finished_at = time.monotonic()
            t = time.monotonic() - t0
            row = self.sample(t)
            if row is None:
                self.load.stop.set()
                print(f"soak: the server (pid {self.args.pid}) is gone at t={t:.0f}s",
                      file=sys.stderr, flush=True)
                return
            if self.args.verbose:
                print("soak: " + " ".join(f"{c}={row[c]}" for c in (
                    "t_s", "phase", "rss_mib", "fds", "pending", "ops_per_s", "late_p99_ms",
                    "req_p99_ms", "gen_lag_p99_ms", "errors_total")), file=sys.stderr, flush=True)
            if self.phase == "drain":
                if row.get("pending") == 0:
                    self.drained = True
                    return
                if time.monotonic() - finished_at >= 60:
                    return
            k += 1
            deadline = t0 + k * step
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, 0.5))
