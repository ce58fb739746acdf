"""The crash drill's checks: what came out held against what the clients were told."""

import http.client
import time
from collections import Counter, defaultdict

from crash_model import Client


def delivered_versions(receiver):
    """(tenant, key, version) -> first 2xx attempt; and every attempt by (tenant, key)."""
    ok, by_key = {}, defaultdict(list)
    for a in receiver.attempts:
        by_key[(a["tenant"], a["key"])].append(a)
        if a["status"] == 200:
            ok.setdefault((a["tenant"], a["key"], a["version"]), a)
    return ok, by_key


def must_deliver(model, tenants):
    """Every version of a certain key that no acknowledged operation ended."""
    out = []
    for (t, _), k in model.keys.items():
        if t in tenants and not k.uncertain:
            out += [(t, k.key, v) for v, s in k.versions.items() if s["ended"] is None]
    return out


def wait_delivered(receiver, redis, model, deadline):
    while time.monotonic() < deadline:
        ok, _ = delivered_versions(receiver)
        missing = [m for m in must_deliver(model, ("shop", "flaky")) if m not in ok]
        if redis is not None:
            got = {(e["key"], int(e["version"])) for e in redis.stream("plain")}
            missing += [m for m in must_deliver(model, ("plain",)) if (m[1], m[2]) not in got]
        if not missing:
            return []
        time.sleep(0.5)
    return missing


def check(model, receiver, redis, fails):
    ok, by_key = delivered_versions(receiver)
    fails += receiver.bad[:20]
    early = []
    for a in receiver.attempts:
        if a["fired_at"] is None or a["fire_at"] is None:
            fails.append(f"attempt without fire_at_us/fired_at_us: {a}")
            continue
        if a["fired_at"] < a["fire_at"] or a["recv"] < a["fire_at"]:
            early.append(a)
    for a in early[:10]:
        fails.append(f"early: {a['tenant']}/{a['key']} v{a['version']} fire_at {a['fire_at']} fired_at {a['fired_at']} received {a['recv']}")
    if early:
        fails.append(f"{len(early)} attempts early in all")

    entries = defaultdict(list)
    if redis is not None:
        for e in redis.stream("plain"):
            entries[("plain", e["key"])].append({"version": int(e["version"]), "fire_at": int(e["fire_at_us"]),
                                                 "fired_at": int(e["fired_at_us"]), "recv": None})
            if int(e["fired_at_us"]) < int(e["fire_at_us"]):
                fails.append(f"early in the stream: plain/{e['key']} v{e['version']}")

    stats = Counter()
    for (t, name), k in model.keys.items():
        vs = list(k.versions)
        if any(b <= a for a, b in zip(vs, vs[1:])):
            fails.append(f"{t}/{name}: acknowledged versions do not grow: {vs} ({k.why[-8:]})")
        seen = by_key.get((t, name), []) + entries.get((t, name), [])
        for a in seen:
            s = k.versions.get(a["version"])
            if s is None:
                if not k.uncertain:
                    fails.append(f"{t}/{name}: version {a['version']} was never acknowledged ({k.why[-8:]})")
                continue
            if a["fire_at"] != s["fire_at"]:
                fails.append(f"{t}/{name} v{a['version']}: fire_at_us {a['fire_at']}, acknowledged {s['fire_at']}")
            if s["ended"] is not None and a["fired_at"] > s["ended"] and t != "reject":
                fails.append(f"{t}/{name} v{a['version']}: an attempt began at {a['fired_at']}, after it was "
                             f"{s['end']} (acknowledged at {s['ended']})")
                stats["resurrected"] += 1
    missing = []
    for t, name, v in must_deliver(model, ("shop", "flaky")):
        if (t, name, v) not in ok:
            missing.append(f"{t}/{name} v{v}")
    if redis is not None:
        got = defaultdict(Counter)
        for (t, name), es in entries.items():
            for e in es:
                got[name][e["version"]] += 1
        for t, name, v in must_deliver(model, ("plain",)):
            if got[name][v] == 0:
                missing.append(f"{t}/{name} v{v}")
        stats["stream repeats"] = sum(c - 1 for g in got.values() for c in g.values() if c > 1)
    for m in missing[:10]:
        fails.append(f"lost: {m} was acknowledged and never delivered")
    if missing:
        fails.append(f"{len(missing)} acknowledged timers never delivered in all")
    stats["lost"] = len(missing)
    return stats


def check_reject(port, model, fails):
    cl = Client(port)
    dead = {}
    after = None
    while True:
        path = "/v1/dead/reject?limit=1000" + (f"&after={after}" if after else "")
        st, j = cl.call("GET", path)
        if st != 200:
            fails.append(f"GET {path} answered {st}")
            return Counter()
        for d in j["dead"]:
            dead[d["key"]] = d["version"]
        if len(j["dead"]) < 1000:
            break
        after = j["dead"][-1]["key"]
    c = Counter()
    for (t, name), k in model.keys.items():
        if t != "reject" or k.uncertain:
            continue
        c["certain reject keys"] += 1
        st, j = cl.call("GET", f"/v1/timers/reject/{name}")
        got_pending = j["version"] if st == 200 else None
        if st not in (200, 404):
            fails.append(f"GET reject/{name} answered {st}")
        if got_pending != k.pending:
            fails.append(f"reject/{name}: pending {got_pending}, acknowledged {k.pending} ({k.why})")
            c["pending wrong"] += 1
        if dead.get(name) != k.dead:
            fails.append(f"reject/{name}: dead letter {dead.get(name)}, acknowledged {k.dead} ({k.why})")
            c["dead wrong"] += 1
        if k.pending is not None and k.dead is not None:
            c["dead letter beside a pending timer"] += 1
    cl.close()
    return c


def metrics(port):
    st, _ = Client(port).call("GET", "/healthz")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    sums = Counter()
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{")[0].split(" ")[0]
        try:
            sums[name] += float(line.rsplit(" ", 1)[1])
        except ValueError:
            pass
    return r.status, sums
