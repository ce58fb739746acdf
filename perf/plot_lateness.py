#!/usr/bin/env python3
"""Draw punctual's fire lateness as SVG plots: one per system, plus one that compares them.

Inputs (any number, mixed; the format is detected per file, `-` is stdin):

* the jitter bench's output (`cargo bench --bench jitter`): its JSON lines, one object per
  line with the fields system, workload, n, fired, lost, early, p50_us, p90_us, p99_us,
  p999_us, max_us, cpu_s (the human table printed before them is skipped);
* a `/metrics` scrape (Prometheus text) holding the histogram
  punctual_fire_lateness_seconds (buckets from 1 us to 10 s, summed over shards);
  its system name is --label, else the file name without its extension.

Output, in --out-dir (default: the current directory):

* lateness-<system>.svg: left, the percentile curve (p50 ... max on a "nines" axis,
  lateness on a log axis, one line per workload); right, the histogram (from /metrics:
  the count per bucket; from JSON lines, which carry percentiles only: bars per percentile);
  below, the counts (fired, lost, early) and CPU time;
* lateness-all.svg: every system's percentile curves on one chart, when there are several.

Only the Python standard library is used, so the script runs wherever python3 does.
Convert to PNG, if needed, with `rsvg-convert -o out.png in.svg`.

    perf/plot_lateness.py bench.jsonl
    curl -s localhost:7480/metrics > pinned.prom && perf/plot_lateness.py pinned.prom --out-dir plots
"""

import argparse
import json
import math
import os
import re
import sys
from xml.sax.saxutils import escape

METRIC = "punctual_fire_lateness_seconds"
PERCENTILES = [("p50", 0.5, "p50_us"), ("p90", 0.9, "p90_us"), ("p99", 0.99, "p99_us"), ("p99.9", 0.999, "p999_us")]
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]
FLOOR_US = 0.1  # lateness of 0 is drawn at this floor of the log axis


class Series:
    """One line on a percentile chart: points (nines, lateness in us), and facts for the caption."""

    def __init__(self, system, workload):
        self.system = system
        self.workload = workload
        self.points = []  # (label, x in nines, lateness us)
        self.buckets = []  # (upper bound us, count in bucket), from /metrics only
        self.facts = {}


def nines(p):
    return -math.log10(1.0 - p)


MAX_X = nines(0.999) + 0.8  # where "max" sits on the nines axis


def read_text(path):
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def parse_json_lines(text, source):
    """Every line that starts with `{`; the bench's human table around them is skipped."""
    series = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise SystemExit(f"{source}:{number}: not a JSON object: {line[:80]!r}")
        if not isinstance(row, dict) or "system" not in row:
            raise SystemExit(f"{source}:{number}: a jitter line needs at least 'system' and the p*_us fields")
        s = Series(str(row["system"]), str(row.get("workload", "")))
        for label, p, key in PERCENTILES:
            if isinstance(row.get(key), (int, float)):
                s.points.append((label, nines(p), float(row[key])))
        if isinstance(row.get("max_us"), (int, float)):
            s.points.append(("max", MAX_X, float(row["max_us"])))
        if not s.points:
            raise SystemExit(f"{source}:{number}: no p50_us/p90_us/p99_us/p999_us/max_us numbers")
        for key in ("n", "fired", "lost", "early", "duplicates", "cpu_s"):
            if key in row:
                s.facts[key] = row[key]
        series.append(s)
    return series


LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text, system):
    cumulative = {}  # le (seconds) -> count summed over shards
    count = total = 0.0
    shards = set()
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m or not m.group("name").startswith(METRIC):
            continue
        labels = dict(LABEL.findall(m.group("labels") or ""))
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if "shard" in labels:
            shards.add(labels["shard"])
        name = m.group("name")
        if name == METRIC + "_bucket" and "le" in labels:
            try:
                le = float(labels["le"])  # "+Inf" parses to inf
            except ValueError:
                continue
            if le >= 1e300:  # some encoders write f64::MAX for the last bucket
                le = math.inf
            cumulative[le] = cumulative.get(le, 0.0) + value
        elif name == METRIC + "_count":
            count += value
        elif name == METRIC + "_sum":
            total += value
    if not cumulative:
        raise SystemExit(f"{system}: no {METRIC}_bucket samples in this /metrics text")
    bounds = sorted(cumulative)
    s = Series(system, f"{len(shards) or 1} shard(s)")
    previous = 0.0
    for le in bounds:
        s.buckets.append((le * 1e6, max(cumulative[le] - previous, 0.0)))
        previous = cumulative[le]
    n = cumulative[bounds[-1]]
    s.facts = {"fired": int(n), "mean_us": round(total / count * 1e6, 1) if count else None}
    if n > 0:
        for label, p, _ in PERCENTILES:
            s.points.append((label, nines(p), quantile_us(bounds, cumulative, p)))
        top = max(le for le in bounds if cumulative[le] - (cumulative.get(prev_of(bounds, le), 0.0)) > 0)
        s.points.append(("max", MAX_X, (top if top != math.inf else bounds[-2]) * 1e6))
    return [s]


def prev_of(bounds, le):
    i = bounds.index(le)
    return bounds[i - 1] if i > 0 else None


def quantile_us(bounds, cumulative, q):
    """Like Prometheus' histogram_quantile: linear inside the bucket that holds rank q*n."""
    n = cumulative[bounds[-1]]
    rank = q * n
    lower, below = 0.0, 0.0
    for le in bounds:
        if cumulative[le] >= rank:
            if le == math.inf:
                return lower * 1e6
            inside = cumulative[le] - below
            fraction = (rank - below) / inside if inside > 0 else 1.0
            return (lower + (le - lower) * fraction) * 1e6
        lower, below = le, cumulative[le]
    return lower * 1e6


def load(paths, label):
    series = []
    for path in paths:
        text = read_text(path)
        if any(line.lstrip().startswith("{") for line in text.splitlines()):
            series += parse_json_lines(text, path)
        else:
            name = label or (os.path.splitext(os.path.basename(path))[0] if path != "-" else "metrics")
            series += parse_prometheus(text, name)
    return series


# ---- drawing -------------------------------------------------------------------------


class Svg:
    def __init__(self, width, height):
        self.width, self.height, self.parts = width, height, []

    def add(self, element):
        self.parts.append(element)

    def text(self, x, y, content, size=12, anchor="start", color="#222", weight="normal", vertical=False):
        turn = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if vertical else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{color}" '
                 f'font-weight="{weight}"{turn}>{escape(str(content))}</text>')

    def line(self, x1, y1, x2, y2, color="#ccc", width=1, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" stroke-width="{width}"{d}/>')

    def render(self):
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" font-family="sans-serif">'
                f'<rect width="100%" height="100%" fill="white"/>')
        return head + "".join(self.parts) + "</svg>\n"


def us_label(us):
    if us >= 1e6:
        return f"{us / 1e6:g} s"
    if us >= 1e3:
        return f"{us / 1e3:g} ms"
    return f"{us:g} µs"


def log_range(values):
    positive = [v for v in values if v > 0] or [1.0]
    low = max(min(positive), FLOOR_US)
    return 10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(max(positive) * 1.0001))


def log_axis(svg, x0, y0, w, h, lo, hi, label):
    """A vertical log axis from lo to hi (us); returns value -> y."""
    span = math.log10(hi) - math.log10(lo) or 1.0

    def y_of(v):
        return y0 + h - (math.log10(max(v, lo)) - math.log10(lo)) / span * h

    decade = lo
    while decade <= hi * 1.0001:
        y = y_of(decade)
        svg.line(x0, y, x0 + w, y, "#e5e5e5")
        svg.text(x0 - 6, y + 4, us_label(decade), 11, "end", "#555")
        decade *= 10
    svg.text(x0 - 58, y0 + h / 2, label, 12, "middle", "#333", vertical=True)
    return y_of


def percentile_chart(svg, x0, y0, w, h, series, title, name_of):
    svg.text(x0 + w / 2, y0 - 12, title, 14, "middle", weight="bold")
    lo, hi = log_range([v for s in series for (_, _, v) in s.points])
    y_of = log_axis(svg, x0, y0, w, h, lo, hi, "lateness")
    x_of = lambda x: x0 + (x - nines(0.5)) / (MAX_X - nines(0.5)) * w  # noqa: E731
    for label, p, _ in PERCENTILES + [("max", None, None)]:
        x = x_of(MAX_X if p is None else nines(p))
        svg.line(x, y0, x, y0 + h, "#eee")
        svg.text(x, y0 + h + 16, label, 11, "middle", "#555")
    svg.line(x0, y0 + h, x0 + w, y0 + h, "#888")
    svg.line(x0, y0, x0, y0 + h, "#888")
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        points = " ".join(f"{x_of(x):.1f},{y_of(max(v, lo)):.1f}" for (_, x, v) in s.points)
        svg.add(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>')
        for (label, x, v) in s.points:
            svg.add(f'<circle cx="{x_of(x):.1f}" cy="{y_of(max(v, lo)):.1f}" r="3" fill="{color}">'
                    f'<title>{escape(name_of(s))} {label}: {v:g} µs</title></circle>')
        svg.line(x0 + 10, y0 + 14 + 16 * i, x0 + 28, y0 + 14 + 16 * i, color, 3)
        svg.text(x0 + 32, y0 + 18 + 16 * i, name_of(s), 11)


def histogram_chart(svg, x0, y0, w, h, series):
    """From /metrics: count per bucket on a log-count axis. From JSON: bars per percentile."""
    with_buckets = [s for s in series if s.buckets]
    if with_buckets:
        s = with_buckets[0]
        svg.text(x0 + w / 2, y0 - 12, "histogram (fires per lateness bucket)", 14, "middle", weight="bold")
        buckets = [(le, c) for (le, c) in s.buckets]
        top = max((c for _, c in buckets), default=0) or 1
        span = math.log10(top + 1)
        bar_w = w / len(buckets)
        for i, (le, c) in enumerate(buckets):
            bh = (math.log10(c + 1) / span) * h if span else 0
            x = x0 + i * bar_w
            svg.add(f'<rect x="{x + 1:.1f}" y="{y0 + h - bh:.1f}" width="{max(bar_w - 2, 1):.1f}" height="{bh:.1f}" '
                    f'fill="{PALETTE[0]}"><title>≤ {us_label(le) if le != math.inf else "+Inf"}: {int(c)}</title></rect>')
            if len(buckets) <= 12 or i % 2 == 0:
                svg.text(x + bar_w / 2, y0 + h + 16, "+Inf" if le == math.inf else "≤" + us_label(le), 9, "middle", "#555")
        svg.line(x0, y0 + h, x0 + w, y0 + h, "#888")
        svg.text(x0 - 8, y0 + 10, f"{int(top)}", 10, "end", "#555")
        svg.text(x0 - 8, y0 + h, "0", 10, "end", "#555")
        svg.text(x0 - 30, y0 + h / 2, "fires (log scale)", 12, "middle", "#333", vertical=True)
        return
    svg.text(x0 + w / 2, y0 - 12, "lateness by percentile (JSON lines carry no buckets)", 14, "middle", weight="bold")
    lo, hi = log_range([v for s in series for (_, _, v) in s.points])
    y_of = log_axis(svg, x0, y0, w, h, lo, hi, "")
    labels = [label for label, _, _ in PERCENTILES] + ["max"]
    group_w = w / len(labels)
    bar_w = (group_w - 10) / max(len(series), 1)
    for g, label in enumerate(labels):
        svg.text(x0 + g * group_w + group_w / 2, y0 + h + 16, label, 11, "middle", "#555")
        for i, s in enumerate(series):
            value = next((v for (l, _, v) in s.points if l == label), None)
            if value is None:
                continue
            x = x0 + g * group_w + 5 + i * bar_w
            top = y_of(max(value, lo))
            svg.add(f'<rect x="{x:.1f}" y="{top:.1f}" width="{max(bar_w - 1, 1):.1f}" height="{y0 + h - top:.1f}" '
                    f'fill="{PALETTE[i % len(PALETTE)]}"><title>{escape(s.workload)} {label}: {value:g} µs</title></rect>')
    svg.line(x0, y0 + h, x0 + w, y0 + h, "#888")


def caption(svg, x, y, series):
    for i, s in enumerate(series):
        facts = ", ".join(f"{k} {v}" for k, v in s.facts.items() if v is not None)
        bad = any(s.facts.get(k) for k in ("lost", "early"))
        svg.text(x, y + 16 * i, f"{s.workload or s.system}: {facts}", 11, color="#c00" if bad else "#333")


def plot_system(system, series):
    svg = Svg(1100, 470 + 16 * len(series))
    svg.text(550, 24, f"punctual fire lateness: {system}", 16, "middle", weight="bold")
    percentile_chart(svg, 90, 70, 430, 320, series, "percentile curve", lambda s: s.workload or s.system)
    histogram_chart(svg, 620, 70, 440, 320, series)
    caption(svg, 40, 440, series)
    return svg.render()


def plot_all(series):
    svg = Svg(900, 470)
    svg.text(450, 24, "punctual fire lateness: all systems", 16, "middle", weight="bold")
    percentile_chart(svg, 90, 70, 760, 340, series, "percentile curves",
                     lambda s: f"{s.system} {s.workload}".strip())
    return svg.render()


def safe_name(name):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "system"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="JSON-lines files from the jitter bench, or /metrics scrapes; - is stdin")
    parser.add_argument("--out-dir", default=".", help="directory for the SVG files (default: .)")
    parser.add_argument("--label", help="system name for /metrics inputs (default: the file name)")
    args = parser.parse_args(argv)
    try:
        series = load(args.inputs, args.label)
    except OSError as e:
        raise SystemExit(f"plot_lateness.py: {e}")
    if not series:
        raise SystemExit("plot_lateness.py: the inputs hold no lateness data")
    os.makedirs(args.out_dir, exist_ok=True)
    systems = {}
    for s in series:
        systems.setdefault(s.system, []).append(s)
    written = []
    for system, group in systems.items():
        path = os.path.join(args.out_dir, f"lateness-{safe_name(system)}.svg")
        with open(path, "w", encoding="utf-8") as f:
            f.write(plot_system(system, group))
        written.append(path)
    if len(systems) > 1:
        path = os.path.join(args.out_dir, "lateness-all.svg")
        with open(path, "w", encoding="utf-8") as f:
            f.write(plot_all(series))
        written.append(path)
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
