"""The soak's view of the server from outside: /proc (memory, threads, descriptors, CPU, run
queue waits), the host's pressure, and /metrics with its histograms."""

import collections
import http.client
import math
import os
import re

from proc_sample import thread_ids

HISTOGRAMS = ("punctual_fire_lateness_seconds", "punctual_store_flush_seconds")

LINE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")
LE_RE = re.compile(r'le="([^"]+)"')


def proc_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except OSError:
        return False


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "Threads"):
                out[k] = int(v.split()[0])
    return out


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shard_runq_wait_ns(pid):
    """{tid: ns spent runnable but waiting for a CPU} of the shard threads (all threads if
    none is named punctual-shard-*), from /proc/PID/task/TID/schedstat."""
    out, every = {}, {}
    for tid in thread_ids(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                wait = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        every[tid] = wait
        if comm.startswith("punctual-shard"):
            out[tid] = wait
    return out or every


def host_pressure(what):
    """'some avg10' of /proc/pressure/<what> (cpu, io): % of the last 10 s in which some task
    waited for a CPU / for I/O (None where PSI is not available)."""
    try:
        with open(f"/proc/pressure/{what}") as f:
            return float(f.readline().split()[1].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


def proc_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def scrape(host, port):
    """Sums over shards: {name: value} for plain series, and {histogram: {le: cumulative}}
    for the HISTOGRAMS."""
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        if resp.status != 200:
            raise OSError(f"/metrics answered {resp.status}")
    finally:
        conn.close()
    sums = collections.defaultdict(float)
    buckets = {h: collections.defaultdict(float) for h in HISTOGRAMS}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = LINE_RE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        try:
            v = float(value)
        except ValueError:
            continue
        if name.endswith("_bucket") and name[:-7] in buckets:
            le = LE_RE.search(labels)
            if le:
                buckets[name[:-7]][float(le.group(1))] += v  # float("+Inf") is inf
        else:
            sums[name] += v
    return sums, {h: dict(b) for h, b in buckets.items()}


def hist_quantile(q, cum_now, cum_before):
    """Quantile q of the observations between two scrapes of a cumulative histogram.

    Returns (value_s, max_le_s) or (None, None) with no observation. value is interpolated
    linearly inside its bucket (lower bound = the previous bucket's upper bound, 0 for the
    first); a quantile in the +Inf bucket is reported as the largest finite bound."""
    les = sorted(cum_now)
    delta = []
    for le in les:
        d = cum_now[le] - cum_before.get(le, 0.0)
        delta.append(d)
    if any(d < 0 for d in delta):  # counter reset: the server restarted
        delta = [cum_now[le] for le in les]
    total = delta[-1] if delta else 0
    if total <= 0:
        return None, None
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    value = None
    for le, c in zip(les, delta):
        if c >= rank:
            if math.isinf(le):
                value = prev_le
            elif c == prev_c:
                value = le
            else:
                value = prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
            break
        prev_le, prev_c = le, c
    max_le = None
    prev_c = 0.0
    for le, c in zip(les, delta):
        if c > prev_c:
            max_le = le
        prev_c = c
    if max_le is not None and math.isinf(max_le):
        max_le = max(x for x in les if not math.isinf(x))
    return value, max_le


def pct(sorted_values, q):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[i]
