#!/usr/bin/env python3
"""Cluster drill: punctual nodes on a Redis Cluster, under a mixed load, through every way a
node or a master leaves. Python standard library only (the RESP client and the helpers
are redis_nodes.py's and common.py's).

Usage:  perf/drills/cluster.py --bin target/release/punctual [--runs N] [--out DIR]
        (perf/drills/cluster.sh builds the binary and calls this; read that first.)

One run, on loopback and free ports, in a fresh directory:

 1. A Redis Cluster of 3 masters with 1 replica each (`cluster-node-timeout 1000`, no RDB, no
    AOF: a write outlives its master only through the replica), created with
    `redis-cli --cluster create … --cluster-replicas 1`.
 2. Three nodes A, B, C: `punctual serve --shards 2 --redis redis+cluster://… --advertise
    127.0.0.1:<port> --redis-wait-replicas 1`. The drill waits until each node has loaded
    exactly the partitions rendezvous hashing gives it (computed here with the same weights
    as src/nodes/rendezvous.rs) and their sum is 1,024.
 3. Load from LOAD_THREADS keep-alive connections, each request to a node picked at random
    among those a load balancer would send to: batch POSTs of new keys, single PUTs of new
    keys, re-PUTs (replace) and DELETEs of the thread's own pending keys whose deadline is at
    least 2 s away, deadlines 1-12 s ahead. Every answer is recorded: acknowledged versions,
    cancels, and "unsure" (no answer: the write may or may not have applied).
 4. The events, one after another, each waited out until the partitions settled again (every
    live node has loaded exactly its rendezvous share, and the share is over 0):
    - kill -9 C; then start C again on the same port (a join);
    - SIGSTOP B for 2 × the lease TTL, then SIGCONT (its leases lapse; it stays in the load
      balancer, so requests wait for it and what it had queued meets the fence);
    - start a fourth node D (a join);
    - SIGTERM A (a planned leave; it is taken out of the load balancer first);
    - kill -9 a Redis master (its replica is promoted); the old master is started again 3 s
      after the promotion and rejoins as the new master's replica, so that WAIT 1 can be met;
    - every Redis master stalls for STALL_S (`DEBUG SLEEP`, past the lease TTL, as an AOF fsync
      stall or a fork for BGSAVE would), with `cluster-node-timeout` raised to 15 s for it so
      that no failover happens: every lease lapses at once, and each node must drop, acquire
      again and reload every partition.
    For each: the time until the partitions settled, and the lateness of the timers due in
    its window, all of them and those of the partitions that changed owner.
 5. Load stops; once every deadline has passed, the drill reads every tenant's fired stream
    and every partition's pending records (at the master that serves each slot) and checks
    them against what the clients were told.

Checks (exit 1 if one fails):
  - nothing acknowledged is lost: a key's last acknowledged version (no unsure request on it)
    is in its stream; a re-PUT or DELETE of a pending timer never finds it gone;
  - nothing fires early; no version that a replace or cancel acknowledged before its deadline
    fires; no version is delivered more than twice (one repeat near a lease loss is allowed
    and counted);
  - the killed node's timers fire within TTL + 1 s of their deadline;
  - the partitions settle within 5 s of the fourth node's join and of the planned leave, and
    within SETTLE_LIMIT_S of the other events;
  - fenced writes during the pause are counted in B's /metrics;
  - no request hangs past CLIENT_TIMEOUT_S, SIGTERM exits 0 within 30 s.
Reported against targets (not an exit status): planned handoffs (the join of D, the SIGTERM of
A) with no timer later than 100 ms; the lateness of timers due during each event as a
distribution.

Environment (defaults in brackets): RATE [300 timers/s], LOAD_THREADS [6], BATCH [10],
SETTLE_LIMIT_S [20], GAP_S [4] (load between events), PAUSE_S [6] (2 × TTL), LEASE_TTL_S [3],
STALL_S [4.5] (1.5 × TTL).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

sys.dont_write_bytecode = True   # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_checks import check, dist, read_pending, read_streams  # noqa: E402
from cluster_load import CLIENT_TIMEOUT_S, LOAD_THREADS, Targets, load_thread  # noqa: E402
from cluster_nodes import (  # noqa: E402
    PARTITIONS, Cluster, Punctual, assignment, shares, wait_settled,
)
from common import env_float, log, now  # noqa: E402
from redis_nodes import text, try_cmd, wait_for  # noqa: E402

SETTLE_LIMIT_S = env_float("SETTLE_LIMIT_S", 20)
GAP_S = env_float("GAP_S", 4)
LEASE_TTL_S = env_float("LEASE_TTL_S", 3)
PAUSE_S = env_float("PAUSE_S", 2 * LEASE_TTL_S)
STALL_S = env_float("STALL_S", 1.5 * LEASE_TTL_S)
PLANNED_TARGET_MS = 100
JOIN_LIMIT_S = 5


# ---------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------

def one_run(binary, d, run_id, seed):
    res = {"run": run_id, "dir": d, "fails": [], "events": [], "stats": Counter()}
    fails, events = res["fails"], res["events"]
    log(f"run {run_id}: {d}")
    cluster = Cluster(d)
    url = cluster.url()
    nodes = {name: Punctual(binary, d, name, url) for name in "ABCD"}
    A, B, C, D = (nodes[n] for n in "ABCD")
    targets = Targets()
    stop = threading.Event()
    keys = {}
    threads = []
    try:
        for n in (A, B, C):
            n.start()
        live = [A, B, C]
        took = wait_settled(live, now(), 60)
        if took is None:
            raise RuntimeError("three nodes did not settle their partitions within 60 s")
        log(f"  3 nodes settled in {took:.1f} s")
        targets.set([n.port for n in live])
        for i in range(LOAD_THREADS):
            keys_i, stats_i = {}, Counter()
            t = threading.Thread(target=load_thread,
                                 args=(i, targets, stop, keys_i, stats_i, seed), daemon=True)
            t.keys, t.stats = keys_i, stats_i
            threads.append(t)
            t.start()
        time.sleep(GAP_S + 2)

        def event(name, planned, live_after, act, limit, moved_of=None):
            before = assignment([n.id for n in live])
            t_wall = time.time()
            t0 = now()
            act()
            took = wait_settled(live_after, t0, limit)
            after = assignment([n.id for n in live_after])
            moved = {p for p in range(PARTITIONS) if before[p] != after[p]}
            if moved_of is not None:
                moved = {p for p in range(PARTITIONS) if before[p] == moved_of.id}
            ev = {"name": name, "planned": planned, "start_us": int(t_wall * 1e6),
                  "settled_s": took, "limit_s": limit, "moved": len(moved),
                  "moved_set": moved}
            events.append(ev)
            log(f"  {name}: {len(moved)} partitions moved, settled in "
                + (f"{took:.2f} s" if took is not None else f"more than {limit:.0f} s"))
            if took is None:
                fails.append(f"{name}: partitions not settled within {limit:.0f} s")
            ev["end_us"] = int(time.time() * 1e6)
            time.sleep(GAP_S)
            return took

        # kill -9 C, then C again on the same port (a join).
        def kill_c():
            targets.set([A.port, B.port])
            C.kill()
        event("kill -9 node C", False, [A, B], kill_c, SETTLE_LIMIT_S)
        live = [A, B]

        def restart_c():
            C.start()
        event("node C started again (join)", True, [A, B, C], restart_c, SETTLE_LIMIT_S)
        live = [A, B, C]
        targets.set([n.port for n in live])

        # SIGSTOP B past its leases, then SIGCONT. B stays in the load balancer: requests sent
        # to it wait in its accept queue and socket buffers, and what it had queued when it
        # stopped meets the fence when it wakes.
        def pause_b():
            B.signal(signal.SIGSTOP)
            targets.paused = B.port
            time.sleep(PAUSE_S)
            B.signal(signal.SIGCONT)
            targets.paused = None
        m0 = B.metrics()
        event(f"SIGSTOP node B for {PAUSE_S:.0f} s, then SIGCONT", False, [A, B, C], pause_b,
              SETTLE_LIMIT_S, moved_of=B)
        m1 = B.metrics()
        res["paused"] = {
            "fenced writes": m1.get("punctual_store_fenced_total", 0) - m0.get("punctual_store_fenced_total", 0),
            "fenced drops": m1.get("punctual_cluster_fenced_drops_total", 0) - m0.get("punctual_cluster_fenced_drops_total", 0),
            "lease losses": m1.get("punctual_cluster_lease_losses_total", 0) - m0.get("punctual_cluster_lease_losses_total", 0),
        }
        targets.set([n.port for n in live])

        # A fourth node joins.
        event("node D joins", True, [A, B, C, D], D.start, JOIN_LIMIT_S)
        live = [A, B, C, D]
        targets.set([n.port for n in live])

        # SIGTERM A (out of the load balancer first).
        def term_a():
            targets.set([B.port, C.port, D.port])
            time.sleep(0.2)
            rc, secs = A.term()
            res["sigterm"] = (rc, secs)
            if rc != 0:
                fails.append(f"SIGTERM of A: exit status {rc} after {secs:.1f} s")
        event("SIGTERM node A (planned leave)", True, [B, C, D], term_a, JOIN_LIMIT_S)
        live = [B, C, D]

        # kill -9 a Redis master; start it again once its replica took over.
        victim = cluster.masters()[0]
        t_kill = now()
        t_wall = time.time()
        next(n for n in cluster.nodes if n.port == victim).kill()
        promoted = wait_for("a replica to take over the killed master's slots",
                            lambda: victim not in cluster.masters() and len(cluster.masters()) == 3
                            and all("cluster_state:ok" in text(try_cmd(n.port, "CLUSTER", "INFO") or b"")
                                    for n in cluster.running()), 60)
        t_promoted = now() - t_kill
        time.sleep(3)
        next(n for n in cluster.nodes if n.port == victim).start()
        wait_for("the old master to rejoin as a replica", cluster.healthy, 60)
        t_back = now() - t_kill
        events.append({"name": "kill -9 a Redis master", "planned": False,
                       "start_us": int(t_wall * 1e6), "settled_s": t_back, "limit_s": None,
                       "moved": 0, "moved_set": set(), "end_us": int(time.time() * 1e6),
                       "promoted_s": t_promoted})
        log(f"  kill -9 Redis master :{victim}: replica promoted in {t_promoted:.1f} s, "
            f"old master back as replica at {t_back:.1f} s")
        time.sleep(GAP_S)

        # Every master stalls past the lease TTL at once; no failover (node timeout 15 s).
        def stall_masters():
            for n in cluster.running():
                try_cmd(n.port, "CONFIG", "SET", "cluster-node-timeout", "15000")
            sleepers = [threading.Thread(target=try_cmd,
                                         args=(m, "DEBUG", "SLEEP", f"{STALL_S:.1f}"),
                                         kwargs={"timeout": STALL_S + 5})
                        for m in cluster.masters()]
            for t in sleepers:
                t.start()
            for t in sleepers:
                t.join()
        masters_before = sorted(cluster.masters())
        s0 = {n.name: n.metrics() for n in (B, C, D)}
        event(f"every Redis master stalled for {STALL_S:.1f} s", False, [B, C, D],
              stall_masters, SETTLE_LIMIT_S, moved_of=None)
        # Every partition was dropped and loaded again: its timers count as moved.
        events[-1]["moved_set"] = set(range(PARTITIONS))
        events[-1]["moved"] = PARTITIONS
        s1 = {n.name: n.metrics() for n in (B, C, D)}
        res["stalled"] = {
            name: {k: s1[name].get(f"punctual_cluster_{k}_total", 0)
                   - s0[name].get(f"punctual_cluster_{k}_total", 0)
                   for k in ("lease_losses", "lease_acquisitions", "round_errors")}
            for name in s0
        }
        log(f"  stall: per node, leases lost, acquired again, rounds failed: {res['stalled']}")
        for n in cluster.running():
            try_cmd(n.port, "CONFIG", "SET", "cluster-node-timeout", "1000")
        if sorted(cluster.masters()) != masters_before:
            fails.append("the stall caused a failover: the drill's premise did not hold")
        time.sleep(2)
    except BaseException:
        stop.set()
        for n in list(nodes.values()):
            n.kill()
        for n in cluster.nodes:
            n.kill()
        raise
    finally:
        stop.set()
        for t in threads:
            t.join(CLIENT_TIMEOUT_S + 5)
    for t in threads:
        keys.update(t.keys)
        res["stats"].update(t.stats)
    last_due = max((o[2] for kl in keys.values() for o in kl.ops if o[0] == "put"), default=0)
    wait_s = max(0, last_due / 1e6 - time.time()) + 3
    log(f"  load stopped; {len(keys)} keys; waiting {wait_s:.0f} s for the last deadline")
    time.sleep(wait_s)
    # Stragglers: at most 30 s more until every acknowledged last version is in a stream.
    give_up = now() + 30
    while True:
        fired = read_streams(cluster)
        missing = sum(1 for tk, kl in keys.items() if not kl.unsure() and kl.pending
                      and not any(f[0] == kl.pending[0] for f in fired.get(tk, [])))
        if missing == 0 or now() > give_up:
            break
        time.sleep(1)
    pending = read_pending(cluster)
    res["metrics"] = {n.name: n.metrics() for n in (B, C, D)}
    fires = check(keys, fired, pending, fails, res["stats"])
    res["keys"] = len(keys)
    res["acked_versions"] = sum(1 for kl in keys.values() for o in kl.ops if o[0] == "put")
    res["fires"] = len(fires)
    res["pending_left"] = len(pending)
    if pending:
        fails.append(f"{len(pending)} records still pending after every deadline")
    if res["stats"].get("hung requests"):
        fails.append(f"{res['stats']['hung requests']} requests hung past {CLIENT_TIMEOUT_S} s")
    for k, v in res["stats"].items():
        if "lost?" in k and v:
            fails.append(f"{v} × {k}")
    if res.get("paused", {}).get("lease losses", 0) + res.get("paused", {}).get("fenced writes", 0) == 0:
        fails.append("the pause lapsed no lease of B's and fenced nothing: the drill did not pause it")
    stalled = res.get("stalled", {})
    if stalled and any(v["lease_losses"] == 0 or v["lease_acquisitions"] == 0 for v in stalled.values()):
        fails.append(f"a node lost or re-acquired no lease in the stall: {stalled}")
    # Lateness by window: a timer is in an event's window when due between its start and the
    # end of its settling (plus one round).
    res["windows"] = []
    all_late = [l for _, l, _ in fires]
    res["windows"].append(("all timers", dist(all_late), None))
    spans = [(ev["start_us"], ev["end_us"] + 1_000_000) for ev in events]
    quiet = [l for f, l, _ in fires if not any(lo <= f <= hi for lo, hi in spans)]
    res["windows"].append(("due outside every event", dist(quiet), None))
    for ev in events:
        lo, hi = ev["start_us"], ev["end_us"] + 1_000_000
        inside = [(l, p) for f, l, p in fires if lo <= f <= hi]
        moved = [l for l, p in inside if p in ev["moved_set"]]
        ev["late_all"] = [l for l, _ in inside]
        ev["late_moved"] = moved
        res["windows"].append((ev["name"], dist(ev["late_all"]), dist(moved) if ev["moved"] else None))
        if ev["name"] == "kill -9 node C" and moved and max(moved) > (LEASE_TTL_S + 1) * 1000:
            fails.append(f"kill -9: a timer of the killed node's partitions fired "
                         f"{max(moved):.0f} ms late (bound: TTL + 1 s)")
    for n in nodes.values():
        if n.proc is not None:
            rc, secs = n.term()
            if rc != 0:
                fails.append(f"SIGTERM of {n.name} at the end: exit {rc} after {secs:.1f} s")
    for n in cluster.nodes:
        n.kill()
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump({**res, "events": [{k: v for k, v in ev.items() if k != "moved_set"}
                                     for ev in events]}, f, indent=1, default=str)
    return res


def report(res):
    lines = [f"run {res['run']}: {res['keys']} keys, {res['acked_versions']} acknowledged "
             f"versions, {res['fires']} expected fires found, {res['stats'].get('lost', 0)} lost, "
             f"{res['stats'].get('repeats (same key and version delivered again)', 0)} repeats, "
             f"{res['pending_left']} left pending"]
    for ev in res["events"]:
        s = ev["settled_s"]
        lines.append(f"  {ev['name']}: {ev['moved']} partitions moved; settled "
                     + (f"{s:.2f} s" if s is not None else "NOT") + " after it"
                     + (f" (replica promoted at {ev['promoted_s']:.1f} s)" if "promoted_s" in ev else ""))
    lines.append("  lateness (fired_at - fire_at, by deadline window; 'moved' = partitions that changed owner):")
    for name, all_d, moved_d in res["windows"]:
        lines.append(f"    {name}: {all_d}" + (f"; moved: {moved_d}" if moved_d else ""))
    for ev in res["events"]:
        if ev["planned"] and ev["late_all"]:
            worst = max(ev["late_all"])
            verdict = "met" if worst <= PLANNED_TARGET_MS else "MISSED"
            lines.append(f"  target {PLANNED_TARGET_MS} ms during '{ev['name']}': worst "
                         f"{worst:.1f} ms: {verdict}")
    if "paused" in res:
        lines.append("  B during its pause: " + ", ".join(f"{k} {v:.0f}" for k, v in res["paused"].items()))
    for name, v in res.get("stalled", {}).items():
        lines.append(f"  {name} through the stall: leases lost {v['lease_losses']:.0f}, acquired again "
                     f"{v['lease_acquisitions']:.0f}, rounds failed {v['round_errors']:.0f}")
    st = res["stats"]
    lines.append("  answers: " + ", ".join(f"{k} {v}" for k, v in sorted(st.items())
                                          if k not in ("lost",)))
    for name, m in res.get("metrics", {}).items():
        fw = {k.split("outcome=\"", 1)[1].split("\"", 1)[0]: int(v) for k, v in m.items()
              if k.startswith("punctual_cluster_forwards_total{")}
        lines.append(f"  node {name}: acquisitions {m.get('punctual_cluster_lease_acquisitions_total', 0):.0f}, "
                     f"releases {m.get('punctual_cluster_lease_releases_total', 0):.0f}, "
                     f"losses {m.get('punctual_cluster_lease_losses_total', 0):.0f}, "
                     f"fenced writes {m.get('punctual_store_fenced_total', 0):.0f}, forwards {fw}")
    for f in res["fails"][:30]:
        lines.append(f"  FAIL {f}")
    if len(res["fails"]) > 30:
        lines.append(f"  FAIL … and {len(res['fails']) - 30} more (result.json)")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--balance", action="store_true",
                    help="print how evenly rendezvous hashing spreads the partitions over "
                         "2 to 64 nodes (ids 10.0.0.<i>:7480), and run nothing")
    a = ap.parse_args()
    if a.balance:
        print("nodes  fewest  most  fullest/mean")
        for n in (2, 3, 4, 8, 16, 32, 64):
            counts = sorted(shares([f"10.0.0.{i + 1}:7480" for i in range(n)]).values())
            print(f"{n:>5}  {counts[0]:>6}  {counts[-1]:>4}  {counts[-1] / (PARTITIONS / n):.2f}")
        return 0
    if not a.bin or not os.access(a.bin, os.X_OK):
        print(f"no punctual binary at {a.bin}", file=sys.stderr)
        return 2
    out = a.out or tempfile.mkdtemp(prefix="punctual-cluster-drill-")
    os.makedirs(out, exist_ok=True)
    summaries, failed, ran = [], False, 0
    for r in range(a.runs):
        d = os.path.join(out, f"run-{r + 1}")
        os.makedirs(d, exist_ok=True)
        try:
            res = one_run(a.bin, d, r + 1, a.seed + r)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            log(f"run {r + 1} could not run: {e}")
            summaries.append(f"run {r + 1}: could not run: {e}")
            continue
        ran += 1
        s = report(res)
        log(s)
        summaries.append(s)
        failed |= bool(res["fails"])
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(summaries) + "\n")
    log(f"outputs in {out}")
    if ran == 0:
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
