#!/usr/bin/env python3
"""Draw a soak run (perf/soak.py's samples.csv) as one SVG: stacked panels against time.

    perf/soak_plot.py OUT_DIR/samples.csv --out OUT_DIR/soak.svg [--title TEXT]

Panels, top to bottom: server RSS (MiB; and the soak's redis-server RSS when recorded), open
fds and threads, pending timers, fire lateness p50/p99 per sample window (ms, log axis; from
the /metrics histogram deltas, interpolated inside the bucket), client-side request latency
p50/p99 (ms, log axis; p99 from the due time and from the actual send; with the store's
flush p99 from /metrics, which a 2xx waits for), and ops/s with
errors, and host contention (how long the shard threads waited for a CPU, the host's
CPU and I/O pressure, and the server's own CPU use). On the RSS and fds panels a dashed line is the least-squares fit over the second half
of the load phase, labelled with its slope per hour. The drain phase (load stopped, timers
still firing) is shaded. Only the Python standard library is used.
"""

import argparse
import csv
import math
from xml.sax.saxutils import escape

W, LEFT, RIGHT = 1240, 80, 280
PANEL_H, GAP, TOP = 150, 38, 80
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def nice_ticks(lo, hi, n=5):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 10))
        t += step
    return ticks, step


def fmt_tick(v):
    if v == 0:
        return "0"
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def fit(points):
    n = len(points)
    if n < 3:
        return None
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    b = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    return b, my - b * mx


class Panel:
    def __init__(self, svg, idx, title, unit, tmax, log=False):
        self.svg, self.title, self.unit, self.log, self.tmax = svg, title, unit, log, tmax
        self.y0 = TOP + idx * (PANEL_H + GAP)
        self.x0, self.x1 = LEFT, W - RIGHT
        self.series = []

    def add(self, name, pts, color, dash=None, width=1.6):
        self.series.append((name, [p for p in pts if p[1] is not None], color, dash, width))

    def X(self, t):
        return self.x0 + (self.x1 - self.x0) * (t / self.tmax if self.tmax else 0)

    def draw(self, shade=None, fits=()):
        out = self.svg
        vals = [p[1] for s in self.series for p in s[1]]
        if self.log:
            vals = [v for v in vals if v > 0]
        if not vals:
            lo, hi = (0.01, 1) if self.log else (0, 1)
        elif self.log:
            lo = 10 ** math.floor(math.log10(min(vals)))
            hi = 10 ** math.ceil(math.log10(max(vals)))
            if hi <= lo:
                hi = lo * 10
        else:
            lo, hi = min(vals), max(vals)
            lo = 0 if lo >= 0 and (lo < 0.5 * hi or hi == 0) else lo - 0.05 * (hi - lo)
            pad = 0.08 * (hi - lo) if hi > lo else max(1.0, abs(hi) * 0.1)
            hi += pad
        self.lo, self.hi = lo, hi
        y0, y1 = self.y0, self.y0 + PANEL_H

        def Y(v):
            if self.log:
                v = max(v, lo)
                f = (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
            else:
                f = (v - lo) / (hi - lo) if hi > lo else 0.5
            return y1 - f * PANEL_H

        self.Y = Y
        out.append(f'<rect x="{self.x0}" y="{y0}" width="{self.x1 - self.x0}" height="{PANEL_H}" '
                   f'fill="#fff" stroke="#999"/>')
        if shade:
            xa, xb = self.X(shade[0]), self.X(shade[1])
            out.append(f'<rect x="{xa:.1f}" y="{y0}" width="{max(0, xb - xa):.1f}" height="{PANEL_H}" '
                       f'fill="#eee"/>')
        # y grid
        if self.log:
            ticks = [10 ** e for e in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]
        else:
            ticks, _ = nice_ticks(lo, hi)
        for t in ticks:
            y = Y(t)
            out.append(f'<line x1="{self.x0}" x2="{self.x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{self.x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">'
                       f'{escape(fmt_tick(t))}</text>')
        # x grid
        xt, _ = nice_ticks(0, self.tmax / 60 if self.tmax else 1, 10)
        for m in xt:
            x = self.X(m * 60)
            if x > self.x1 + 0.5:
                continue
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y1}" stroke="#f0f0f0"/>')
            out.append(f'<text x="{x:.1f}" y="{y1 + 13}" text-anchor="middle" font-size="10" '
                       f'fill="#666">{fmt_tick(m)}</text>')
        out.append(f'<text x="{self.x0}" y="{y0 - 6}" font-size="13" font-weight="bold">'
                   f'{escape(self.title)}<tspan font-weight="normal" fill="#666"> ({escape(self.unit)})'
                   f'</tspan></text>')
        ly = y0 + 12
        for name, pts, color, dash, width in self.series:
            if pts:
                d = " ".join(f"{'M' if i == 0 else 'L'}{self.X(t):.1f},{Y(v):.1f}" for i, (t, v) in enumerate(pts))
                da = f' stroke-dasharray="{dash}"' if dash else ""
                out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="{width}"{da}/>')
                if len(pts) < 40:
                    for t, v in pts:
                        out.append(f'<circle cx="{self.X(t):.1f}" cy="{Y(v):.1f}" r="2" fill="{color}"/>')
            last = f"{pts[-1][1]:.4g}" if pts else "n/a"
            out.append(f'<line x1="{self.x1 + 10}" x2="{self.x1 + 28}" y1="{ly - 4}" y2="{ly - 4}" '
                       f'stroke="{color}" stroke-width="2"{f" stroke-dasharray={chr(34)}{dash}{chr(34)}" if dash else ""}/>')
            out.append(f'<text x="{self.x1 + 32}" y="{ly}" font-size="11">{escape(name)}: {last}</text>')
            ly += 15
        for label, (b, a, ta, tb), color in fits:
            out.append(f'<line x1="{self.X(ta):.1f}" x2="{self.X(tb):.1f}" y1="{Y(a + b * ta):.1f}" '
                       f'y2="{Y(a + b * tb):.1f}" stroke="{color}" stroke-width="1.5" stroke-dasharray="6,3"/>')
            out.append(f'<text x="{self.x1 + 10}" y="{ly}" font-size="11" fill="{color}">{escape(label)}</text>')
            ly += 15


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="punctual soak")
    a = ap.parse_args()
    with open(a.csv) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit("soak_plot: no samples")
    T = [num(r["t_s"]) for r in rows]
    tmax = max(T) or 1

    def series(k, phase=None):
        return [(t, num(r.get(k))) for t, r in zip(T, rows) if phase is None or r["phase"] == phase]

    load = [(t, r) for t, r in zip(T, rows) if r["phase"] == "load"]
    t_load_end = load[-1][0] if load else tmax
    drain = [t for t, r in zip(T, rows) if r["phase"] == "drain"]
    shade = (t_load_end, tmax) if drain else None

    def half_fit(k, unit, color):
        pts = [(t, num(r.get(k))) for t, r in load if t >= t_load_end / 2 and num(r.get(k)) is not None]
        fr = fit(pts)
        if fr is None:
            return []
        b, c = fr
        return [(f"2nd-half fit: {b * 3600:+.2f} {unit}/h", (b, c, pts[0][0], pts[-1][0]), color)]

    svg = []
    n_panels = 7
    H = TOP + n_panels * (PANEL_H + GAP) + 30
    panels = []
    p = Panel(svg, 0, "server RSS", "MiB", tmax)
    p.add("punctual VmRSS", series("rss_mib"), COLORS[0])
    if any(v is not None for _, v in series("aux_rss_mib")):
        p.add("redis-server VmRSS", series("aux_rss_mib"), COLORS[4], dash="3,2")
    panels.append((p, half_fit("rss_mib", "MiB", "#000")))
    p = Panel(svg, 1, "open fds and threads", "count", tmax)
    p.add("fds", series("fds"), COLORS[1])
    p.add("threads", series("threads"), COLORS[5], dash="3,2")
    panels.append((p, half_fit("fds", "fds", "#000")))
    p = Panel(svg, 2, "pending timers", "sum over shards", tmax)
    p.add("pending", series("pending"), COLORS[2])
    panels.append((p, []))
    p = Panel(svg, 3, "fire lateness per window", "ms, log; bucket-interpolated", tmax, log=True)
    p.add("p99", series("late_p99_ms"), COLORS[1])
    p.add("p50", series("late_p50_ms"), COLORS[0], dash="3,2")
    panels.append((p, []))
    p = Panel(svg, 4, "request latency per window, client side", "ms, log", tmax, log=True)
    p.add("p99 from due time", series("req_p99_ms"), COLORS[1])
    p.add("p99 from send", series("svc_p99_ms"), COLORS[3], dash="5,3")
    p.add("p50 from due time", series("req_p50_ms"), COLORS[0], dash="3,2")
    p.add("store flush p99", series("flush_p99_ms"), COLORS[2], dash="1,2")
    panels.append((p, []))
    p = Panel(svg, 5, "throughput and errors", "per s / count", tmax)
    p.add("ops/s answered", series("ops_per_s"), COLORS[0])
    p.add("fires/s", series("fired_per_s"), COLORS[2], dash="3,2")
    p.add("errors in window", series("errors"), COLORS[1], width=2.2)
    panels.append((p, []))
    p = Panel(svg, 6, "host contention", "%", tmax)
    p.add("shard runnable, not running", series("shard_runq_wait_pct"), COLORS[4])
    p.add("host CPU pressure (PSI some)", series("host_cpu_pressure_pct"), "#7f7f7f", dash="3,2")
    p.add("server CPU (100 = 1 core)", series("cpu_pct"), COLORS[0], dash="5,3")
    p.add("host I/O pressure (PSI some)", series("host_io_pressure_pct"), COLORS[3], dash="1,2")
    panels.append((p, []))
    body = []
    for p, fits in panels:
        p.svg = body
        p.draw(shade=shade, fits=fits)
    errs = rows[-1].get("errors_total") or "0"
    sub = (f"x: minutes since start; {len(rows)} samples; load phase 0-{t_load_end / 60:.1f} min"
           + (f", grey: drain (load stopped, timers still firing)" if drain else "")
           + f"; errors total {errs}")
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'font-family="sans-serif">',
        f'<rect width="{W}" height="{H}" fill="#fafafa"/>',
        f'<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{escape(a.title)}</text>',
        f'<text x="{LEFT}" y="42" font-size="11" fill="#444">{escape(sub)}</text>',
    ]
    with open(a.out, "w") as f:
        f.write("\n".join(head + body + ["</svg>"]) + "\n")


if __name__ == "__main__":
    main()
