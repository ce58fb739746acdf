"""The cluster drill's reading back and checking: the streams and pending records every
master holds, held against what each key was told."""

from collections import Counter, defaultdict

from cluster_load import TENANTS
from cluster_nodes import PARTITIONS, partition_of
from common import pct
from redis_nodes import text


def read_streams(cluster):
    """(tenant, key) -> [(version, fire_at_us, fired_at_us)]"""
    out = defaultdict(list)
    hint = cluster.masters()[0]
    for tenant in TENANTS:
        start = "-"
        while True:
            page = cluster.cmd(hint, "XRANGE", f"punctual:fired:{{{tenant}}}", start, "+",
                               "COUNT", 10000)
            for _eid, fields in page:
                f = {text(fields[i]): text(fields[i + 1]) for i in range(0, len(fields) - 1, 2)}
                out[(tenant, f.get("key", ""))].append(
                    (int(f.get("version", 0)), int(f.get("fire_at_us", 0)),
                     int(f.get("fired_at_us", 0)), text(_eid)))
            if len(page) < 10000:
                break
            start = "(" + text(page[-1][0])
    return out


def read_pending(cluster):
    out = {}
    hint = cluster.masters()[0]
    for n in range(PARTITIONS):
        cursor = "0"
        while True:
            cursor, flat = cluster.cmd(hint, "HSCAN", f"punctual:{{p{n}}}:timers", cursor,
                                       "COUNT", 1000)
            cursor = text(cursor)
            for i in range(0, len(flat) - 1, 2):
                tenant, _, key = text(flat[i]).partition("/")
                out[(tenant, key)] = text(flat[i + 1])[:40]
            if cursor == "0":
                break
    return out


def dist(xs):
    if not xs:
        return "none due"
    return (f"n={len(xs)} p50={pct(xs, 50):.1f} p99={pct(xs, 99):.1f} "
            f"p99.9={pct(xs, 99.9):.1f} max={max(xs):.1f} ms")


def check(keys, fired, pending, fails, stats):
    """Holds every key's answers against the streams. Returns [(fire_at_us, lateness_ms,
    partition)] of every expected fire found."""
    fires = []
    for tk, kl in keys.items():
        got = fired.get(tk, [])
        for v, fire_at, fired_at, _ in got:
            if fired_at < fire_at:
                fails.append(f"early: {tk} v{v} fired {(fire_at - fired_at) / 1000:.1f} ms early")
        by_version = Counter(f[0] for f in got)
        for v, c in by_version.items():
            if c > 1:
                stats["repeats (same key and version delivered again)"] += c - 1
            if c > 2:
                copies = [(f[2], f[3]) for f in got if f[0] == v]
                fails.append(f"{tk} (partition {partition_of(*tk)}) v{v} due {got[0][1]} "
                             f"delivered {c} times: (fired_at_us, stream id) {copies}")
        if kl.unsure():
            continue
        acked = [o for o in kl.ops if o[0] in ("put", "del")]
        if not acked:
            continue
        # A version replaced or cancelled by an answer that came before its deadline never fires.
        for i, o in enumerate(acked[:-1]):
            if o[0] != "put":
                continue
            nxt_ack = acked[i + 1][3]
            if o[2] > nxt_ack and o[1] in by_version:
                fails.append(f"{tk} v{o[1]} fired though replaced or cancelled before its deadline")
        last = acked[-1]
        if last[0] == "del":
            continue
        v, fire_at = last[1], last[2]
        hit = [f for f in got if f[0] == v]
        if not hit:
            where = "still pending" if tk in pending else "neither fired nor pending"
            fails.append(f"lost: {tk} v{v} due {fire_at} acknowledged, {where}")
            stats["lost"] += 1
            continue
        first = min(hit, key=lambda f: f[2])
        fires.append((fire_at, (first[2] - fire_at) / 1000, partition_of(*tk)))
    return fires
