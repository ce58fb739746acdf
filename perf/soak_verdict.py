"""The soak's verdict on a finished run: samples.csv and summary.json read back, trends
fitted, and each check printed with its figures (verdict.txt)."""

import csv
import json
import os
import re
import statistics

from soak_plot import fit


def slope_per_hour(points):
    """Least-squares slope of (t_s, y) points, per hour."""
    f = fit(points)
    return None if f is None else f[0] * 3600


def fnum(row, k):
    v = row.get(k, "")
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v, spec="{:.2f}"):
    return "n/a" if v is None else spec.format(v)


def cmd_verdict(args):
    with open(os.path.join(args.out, "samples.csv")) as f:
        rows = list(csv.DictReader(f))
    try:
        with open(os.path.join(args.out, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {"server_died": True, "errors_total": None}
    load = [r for r in rows if r["phase"] == "load"]
    lines = []
    out = lines.append
    if not load:
        out("VERDICT: FAIL (no samples)")
        print("\n".join(lines))
        return 2
    t_end = fnum(load[-1], "t_s")
    half = [r for r in load if fnum(r, "t_s") >= t_end / 2]
    rss_pts = [(fnum(r, "t_s"), fnum(r, "rss_mib")) for r in half if fnum(r, "rss_mib") is not None]
    fd_pts = [(fnum(r, "t_s"), fnum(r, "fds")) for r in half if fnum(r, "fds") is not None]
    thr_pts = [(fnum(r, "t_s"), fnum(r, "threads")) for r in half if fnum(r, "threads") is not None]
    aux_pts = [(fnum(r, "t_s"), fnum(r, "aux_rss_mib")) for r in half if fnum(r, "aux_rss_mib") is not None]
    rss_slope, fd_slope, thr_slope = slope_per_hour(rss_pts), slope_per_hour(fd_pts), slope_per_hour(thr_pts)
    aux_slope = slope_per_hour(aux_pts)
    loaded = load[1:]  # without the idle t=0 row

    def col(k, rs=loaded):
        return [v for v in (fnum(r, k) for r in rs) if v is not None]

    def spread(k):
        v = col(k)
        return (statistics.median(v), max(v)) if v else (None, None)

    late_med, late_max = spread("late_p99_ms")
    req_med, req_max = spread("req_p99_ms")
    svc_med, svc_max = spread("svc_p99_ms")
    lag_med, lag_max = spread("gen_lag_p99_ms")
    pend = col("pending")
    pend_half = col("pending", half)
    ops = col("ops_per_s")
    fired = col("fired_per_s")
    cpu = col("cpu_pct")
    rss0 = fnum(load[0], "rss_mib")
    rss1 = fnum(loaded[0], "rss_mib") if loaded else None
    rss_mid = rss_pts[0][1] if rss_pts else None
    rss_end = fnum(load[-1], "rss_mib")
    rss_max = max(col("rss_mib", load))
    fds = col("fds", load)
    drain = [r for r in rows if r["phase"] == "drain"]

    dur = t_end
    out(f"soak verdict: store={s.get('store')} shards={s.get('shards')} load {dur / 60:.1f} min "
        f"at {s.get('rate')} ops/s target, {s.get('conns')} connections, samples every {s.get('sample_s')} s")
    out(f"  RSS MiB: idle {fmt(rss0)}, first loaded sample {fmt(rss1)}, half-way {fmt(rss_mid)}, "
        f"end of load {fmt(rss_end)}, max {fmt(rss_max)}")
    out(f"  RSS slope, 2nd half: {fmt(rss_slope, '{:+.2f}')} MiB/h "
        f"(over 24 h: {fmt(None if rss_slope is None else rss_slope * 24, '{:+.1f}')} MiB)")
    out(f"  fds: start {int(fds[0])}, end {int(fds[-1])}, max {int(max(fds))}; slope, 2nd half: "
        f"{fmt(fd_slope, '{:+.2f}')} fds/h; threads slope {fmt(thr_slope, '{:+.2f}')}/h")
    if aux_pts:
        se = col("stream_entries", load)
        out(f"  redis-server RSS MiB: end {fmt(aux_pts[-1][1])}, slope, 2nd half: {fmt(aux_slope, '{:+.2f}')} MiB/h"
            + (f" (fired-stream entries at the end: {int(se[-1])}; each tenant's stream is trimmed at ~1,000,000)" if se else ""))
    if pend:
        out(f"  pending: min {int(min(pend))}, median {int(statistics.median(pend))}, max {int(max(pend))} "
            f"(2nd half {int(min(pend_half))}..{int(max(pend_half))})")
    out(f"  fire lateness p99 per 10 s window (bucket-interpolated): median {fmt(late_med, '{:.3f}')} ms, "
        f"max {fmt(late_max, '{:.3f}')} ms; highest bucket reached: "
        f"{fmt(max(col('late_max_le_ms')) if col('late_max_le_ms') else None, '{:g}')} ms")
    out(f"  request p99 (client, from due time) per window: median {fmt(req_med, '{:.2f}')} ms, "
        f"max {fmt(req_max, '{:.2f}')} ms; from send: median {fmt(svc_med, '{:.2f}')}, max {fmt(svc_max, '{:.2f}')} ms; "
        f"worst single request {fmt(max(col('req_max_ms')) if col('req_max_ms') else None, '{:.1f}')} ms")
    bl = col("backlog", load)
    out(f"  backlog (due, not yet sent) at samples: max {fmt(max(bl) if bl else None, '{:.0f}')}")
    out(f"  generator lag p99: median {fmt(lag_med, '{:.2f}')} ms, max {fmt(lag_max, '{:.2f}')} ms")
    rq_med, rq_max = spread("shard_runq_wait_pct")
    psi = col("host_cpu_pressure_pct")
    pio = col("host_io_pressure_pct")
    pc = "{:.0f}%"
    out(f"  host contention: shard thread waiting for a CPU median {fmt(rq_med, pc)} of the time, "
        f"max {fmt(rq_max, pc)}; host pressure (PSI some avg10) CPU median "
        f"{fmt(statistics.median(psi) if psi else None, pc)}, max {fmt(max(psi) if psi else None, pc)}, "
        f"I/O median {fmt(statistics.median(pio) if pio else None, pc)}, max {fmt(max(pio) if pio else None, pc)}")
    if ops:
        out(f"  ops/s: mean {statistics.mean(ops):.0f} (min {min(ops):.0f}, max {max(ops):.0f}); "
            f"fires/s mean {fmt(statistics.mean(fired) if fired else None, '{:.0f}')}; "
            f"server CPU mean {fmt(statistics.mean(cpu) if cpu else None, '{:.0f}')}% of one core, "
            f"generator {fmt(statistics.mean(col('gen_cpu_pct')) if col('gen_cpu_pct') else None, '{:.0f}')}%")
    out(f"  requests answered {s.get('requests_answered')}; answers: {s.get('answers')}")
    out(f"  errors: {s.get('errors_total')} {s.get('errors_by_kind') or ''}; expected 404 on cancel: {s.get('cancel_404')}")
    last = rows[-1]
    ok_fires = None
    if s.get("drained") is not None and s.get("expected_fires") is not None:
        # Requests answered 5xx or lost may or may not have taken effect: each unacknowledged
        # PUT may add one fire, each unacknowledged DELETE may remove one.
        exp, fired_n = s["expected_fires"], s.get("fired_total")
        lo, hi = exp - s.get("unacked_cancels", 0), exp + s.get("unacked_puts", 0)
        ok_fires = bool(s.get("drained")) and fired_n is not None and lo <= fired_n <= hi
        rng = f"{exp}" if lo == hi else f"{lo}..{hi} (the {hi - lo} unacknowledged requests may or may not have taken effect)"
        out(f"  after the load: pending {last.get('pending')} after {len(drain)} drain samples; fired "
            f"{fired_n}, expected {rng}; 201s {s.get('created_201')} - 204s {s.get('cancelled_204')}"
            f"{'' if ok_fires else '  MISMATCH'}")
    fl_med, fl_max = spread("flush_p99_ms")
    if fl_med is not None:
        out(f"  store flush (journal group commit / Redis pipeline) p99 per window: median {fl_med:.2f} ms, "
            f"max {fl_max:.2f} ms; highest bucket reached {max(col('flush_max_le_ms')):g} ms")
    for k in ("store_errors_total", "store_ack_timeouts_total", "store_refused_total",
              "ring_rejected_total", "watchdog_wakes_total", "executor_stalls_total",
              "executor_runnable_sleeps_total", "journal_snapshots_total", "journal_compaction_holds_total"):
        v = fnum(last, k)
        if v or k in ("watchdog_wakes_total", "executor_stalls_total",
                      "executor_runnable_sleeps_total"):
            out(f"  {k}: {int(v or 0)}")
    log_bad = []
    if args.server_log and os.path.exists(args.server_log):
        with open(args.server_log, errors="replace") as f:
            for line in f:
                if re.search(r"\b(ERROR|panicked|WARN)\b", line):
                    log_bad.append(line.rstrip())
        out(f"  server log: {len(log_bad)} WARN/ERROR/panic lines" +
            ("" if not log_bad else "; first: " + log_bad[0][:160]))
    died = s.get("server_died") or (args.server_exit not in (None, 0))
    if s.get("server_died"):
        out(f"  SERVER DIED at t={s.get('died_at_s')} s")
    if args.server_exit is not None:
        out(f"  server exit status after SIGTERM: {args.server_exit}")
    errors = s.get("errors_total")
    if died:
        verdict, code = "FAIL (server died or exited badly)", 2
    elif errors or errors is None:
        verdict, code = "FAIL (request errors)", 1
    elif ok_fires is False:
        verdict, code = "FAIL (fired count does not add up, or timers still pending after 60 s)", 1
    else:
        verdict, code = "PASS (no errors, server alive; judge the slopes above)", 0
    out(f"VERDICT: {verdict}")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "verdict.txt"), "w") as f:
        f.write(text + "\n")
    return code
