#!/usr/bin/env python3
"""Failover drill: the Redis master dies under load and Redis Sentinel promotes its replica.
Python standard library only; Redis is spoken to with a small RESP client over a socket.

Usage:  perf/drills/failover.py --bin target/release/punctual [--runs N] [--wait 0,1] [--out DIR]
        (perf/drills/failover.sh builds the binary and calls this; read that first.)

One run, for one setting of --redis-wait-replicas (0 or 1):

 1. In a fresh directory, on loopback and free ports: a Redis master, one replica, and three
    sentinels monitoring the master (quorum 2, down-after-milliseconds 1000, failover-timeout
    5000, resolve-hostnames no, announce-ip 127.0.0.1). Redis keeps no RDB and no AOF here:
    in this drill a write survives the master only through the replica (that is what
    --redis-wait-replicas is for). repl-diskless-sync-delay is 0 so that a returning node
    resynchronises at once (Redis's default waits 5 s more before a full sync).
 2. `punctual serve --shards 2 --redis redis+sentinel://127.0.0.1:S1,…/<master>
    [--redis-wait-replicas 1]` on a free port (no pinning, spinning off: a shared host).
 3. Load from LOAD_PROCS processes × LOAD_CONNS keep-alive connections, paced at RATE timers
    per second in all (half the connections PUT one timer per request, half POST batches of
    BATCH), every key new, deadlines 1-15 s ahead so that timers fire throughout the drill.
    Every acknowledged (2xx) timer is recorded with its version. 503s are counted apart (with
    and without Retry-After; batch items refused with 503 too): a 503 is not an
    acknowledgement, whatever happens to the write later. Nobody retries: each key is sent once.
 4. After WARMUP_S (5 s) of load: SIGKILL of the master. Every sentinel's events are
    subscribed to (PSUBSCRIBE *) and timestamped on receipt; +switch-master marks the
    quorum's promotion.
 5. Time to writes on the new master: from just before the kill, CLIENT LIST is polled on the
    replica every 10 ms; the first connection that is not a sentinel's (their names start
    with "sentinel-"), not a replication link (flags M/S) and whose last command is a write of
    punctual's (hset, hdel, xadd, multi, exec, wait) marks punctual's first write there. Its
    time minus the +switch-master receipt is the figure (negative when punctual got there
    first: a sentinel names the promoted replica as soon as the failover has chosen it).
    Resolution about 10 ms plus one poll round trip.
 6. With --redis-wait-replicas 1 the new master has no replica, so acknowledgements stall.
    RESTART_AFTER_S (3 s) after +switch-master the drill restarts the old master on its old
    port as a replica of the new master (`--replicaof`), as an operator's supervisor should
    restart a node that keeps nothing on disk (never as a master: an empty master that
    Sentinel took for the master again would wipe the replicas); it resynchronises, and WAIT
    is satisfied again.
 7. Acks resume: the first 2xx received after punctual's first write on the new master, from
    the kill, from +switch-master and (wait 1) from the restart. Also the longest gap between
    two consecutive 2xx around the kill.
 8. Load goes on AFTER_S (10 s) after acks resume, then stops. The drill waits until every
    deadline sent has passed plus a margin, then reads, from the master Sentinel names now,
    every tenant's stream `punctual:fired:{<tenant>}` (XRANGE) and every pending record
    (HSCAN of punctual:{p<N>}:timers, N in 0..1023).
 9. Per run: acknowledged timers; acknowledged timers lost (the acknowledged version is
    neither in the key's stream nor pending); acknowledged timers still pending past their
    deadline + margin; duplicates (the same key and version delivered more than once; the
    extra copies are counted); early fires; 503s; time to writes on the new master; time
    until acks resume.

Checks (exit 1 if one fails): with wait 1, no acknowledged timer lost; in every mode,
punctual writes to the new master no later than SWITCH_LIMIT_S (5 s) after +switch-master,
acks resume within RESUME_LIMIT_S (60 s) of the kill, no acknowledged timer is still pending
at the end, nothing fires early, every 503 carries Retry-After, no request times out, and
punctual stops cleanly on SIGTERM. Without WAIT (wait 0) a lost acknowledged timer is possible
(a write the master acknowledged and had not yet replicated when it died) and is only
reported; so is the rare duplicate (a pipeline applied but not answered before the kill is
written again to the new master: same key and version, which consumers de-duplicate on).
Exit 2: the drill could not run (no binary, no redis-server, or every failing run failed
before the kill: Redis, the sentinels or punctual did not come up). A failover that never
happens after the kill is a failed check (exit 1).

Outputs go to --out (default: a new directory under /tmp), one directory per run with the
Redis, Sentinel and punctual logs, the sentinels' event timeline, /metrics before stopping,
the lost keys if any, and result.json; summary.txt holds the table printed at the end.

Environment (defaults in brackets): RATE [1000 timers/s], LOAD_PROCS [2], LOAD_CONNS [4 per
process], BATCH [20], WARMUP_S [5], AFTER_S [10], RESTART_AFTER_S [3], DELAY_MIN_MS [1000],
DELAY_MAX_MS [15000], SWITCH_LIMIT_S [5], RESUME_LIMIT_S [60], REDIS_SERVER [redis-server].
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

sys.dont_write_bytecode = True   # no __pycache__ beside the scripts
from common import env_float, env_int, free_port, http_get, log, now  # noqa: E402
from failover_load import (  # noqa: E402
    CLIENT_TIMEOUT_S, DELAY_MIN_MS, TENANTS, Punctual, read_pending, read_streams, worker_main,
)
from failover_sentinel import (  # noqa: E402
    Events, Watch, master_addr, redis_conf, sentinel_conf, sentinel_master,
)
from redis_nodes import REDIS_SERVER, Node, info, wait_for  # noqa: E402

RATE = env_float("RATE", 1000)
LOAD_PROCS = env_int("LOAD_PROCS", 2)
LOAD_CONNS = env_int("LOAD_CONNS", 4)
WARMUP_S = env_float("WARMUP_S", 5)
AFTER_S = env_float("AFTER_S", 10)
RESTART_AFTER_S = env_float("RESTART_AFTER_S", 3)
SWITCH_LIMIT_S = env_float("SWITCH_LIMIT_S", 5)
RESUME_LIMIT_S = env_float("RESUME_LIMIT_S", 60)
FIRE_MARGIN_S = 5            # after the last deadline, before the streams are read
SETTLE_S = 30                # then at most this long for stragglers to appear



# ---------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------

def one_run(binary, wait, d, run_id):
    os.makedirs(d, exist_ok=True)
    res = {"wait_replicas": wait, "dir": d, "failures": []}
    fail = res["failures"]
    nodes = []
    events, ev_lock = [], threading.Lock()
    subs = []
    server = None
    workers = []
    stop_file = os.path.join(d, "stop-load")
    try:
        pm, pr = free_port(), free_port()
        master = Node("master", pm, redis_conf(d, "master", pm))
        replica = Node("replica", pr, redis_conf(d, "replica", pr, replica_of=pm))
        nodes += [master, replica]
        master.start()
        replica.start()
        wait_for("the replica's link to the master",
                 lambda: info(pr, "replication").get("master_link_status") == "up", 30)
        sports = [free_port() for _ in range(3)]
        for i, sp in enumerate(sports):
            s = Node(f"sentinel{i + 1}", sp, sentinel_conf(d, f"sentinel{i + 1}", sp, pm), sentinel=True)
            nodes.append(s)
            s.start()
        # Every sentinel must know the replica and the two other sentinels before the kill,
        # or the quorum cannot form and the failover cannot pick the replica.
        wait_for("the sentinels to discover the replica and each other", lambda: all(
            sentinel_master(sp).get("num-slaves") == "1"
            and sentinel_master(sp).get("num-other-sentinels") == "2" for sp in sports), 60)
        for sp in sports:
            e = Events(sp, events, ev_lock)
            e.start()
            subs.append(e)

        hp = free_port()
        server = Punctual(binary, d, hp, sports, wait)
        log(f"  master :{pm}, replica :{pr}, sentinels :{sports[0]},:{sports[1]},:{sports[2]}, punctual :{hp}")

        # Load.
        start_at = now() + 0.3
        for w in range(LOAD_PROCS):
            out = os.path.join(d, f"load-{w}.json")
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                  "--port", str(hp), "--rate", str(RATE / LOAD_PROCS),
                                  "--conns", str(LOAD_CONNS), "--prefix", f"r{run_id}w{w}c",
                                  "--stop-file", stop_file, "--start-at", str(start_at),
                                  "--out", out])
            workers.append((p, out))
        time.sleep(max(0.0, start_at + WARMUP_S - now()))

        watch = Watch(pr)
        watch.start()
        t_kill = now()
        master.kill()
        log(f"  master SIGKILLed after {WARMUP_S:.0f} s of load")
        res["t_kill"] = t_kill

        def switch_time():
            with ev_lock:
                ts = [t for t, _, ch, _ in events if ch == "+switch-master"]
            return min(ts) if ts else None

        try:
            t_switch = wait_for("+switch-master from a sentinel", switch_time, 60)
        except RuntimeError as e:
            fail.append(str(e))
            raise
        new_port = master_addr(sports[0])
        if new_port != pr:
            fail.append(f"sentinels name :{new_port} as master, not the replica :{pr}")
        log(f"  +switch-master {t_switch - t_kill:.2f} s after the kill")
        try:
            wait_for("punctual's first write on the new master",
                     lambda: watch.first_write_at, SWITCH_LIMIT_S + 25)
        except RuntimeError as e:
            fail.append(str(e))
        t_first_write = watch.first_write_at

        t_restart = None
        if wait > 0:
            time.sleep(max(0.0, t_switch + RESTART_AFTER_S - now()))
            # As the new master's replica: a node that keeps nothing on disk must never come
            # back as a master (if the failover had not settled, Sentinel could take the
            # empty node for the master and the replicas would resync from it, wiping them).
            master.start(replica_of=new_port)
            t_restart = now()
            log(f"  old master restarted on :{pm} {t_restart - t_switch:.2f} s after +switch-master")

        # Acks resume: watched live from the load's files would need IPC; the probe below
        # is one more acknowledged write per 100 ms from this process, recorded like the rest.
        probe_acked = []
        resumed_at = None
        give_up = t_kill + RESUME_LIMIT_S
        seq = 0
        while now() < give_up:
            k = f"probe-{run_id}-{seq}"
            seq += 1
            t0 = now()
            try:
                c = http.client.HTTPConnection("127.0.0.1", hp, timeout=CLIENT_TIMEOUT_S)
                c.request("PUT", f"/v1/timers/{TENANTS[0]}/{k}",
                          body=json.dumps({"delay_ms": DELAY_MIN_MS}))
                r = c.getresponse()
                data = r.read()
                c.close()
            except (OSError, http.client.HTTPException):
                time.sleep(0.1)
                continue
            if 200 <= r.status < 300:
                j = json.loads(data)
                probe_acked.append([now(), TENANTS[0], k, j["version"], j["fire_at_us"], t0])
                if t_first_write is not None and t0 > t_first_write and (t_restart is None or t0 > t_restart):
                    resumed_at = now()
                    break
            if t_first_write is None:
                t_first_write = watch.first_write_at
            time.sleep(max(0.0, 0.1 - (now() - t0)))
        if resumed_at is None:
            fail.append(f"no acknowledgement within {RESUME_LIMIT_S:.0f} s of the kill")
        else:
            time.sleep(AFTER_S)
        with open(stop_file, "w"):
            pass
        for p, _ in workers:
            p.wait()
        t_load_end = now()
        watch.halt.set()

        acked, refused, statuses, last_deadline = list(probe_acked), [], Counter(), 0.0
        for p, out in workers:
            with open(out) as f:
                j = json.load(f)
            acked += j["acked"]
            refused += j["refused"]
            statuses.update(j["statuses"])
            last_deadline = max(last_deadline, j["last_deadline"])
        statuses["probe PUT 2xx"] = len(probe_acked)

        # Timing.
        ack_times = sorted(a[0] for a in acked)
        res["switch_after_kill_s"] = t_switch - t_kill
        res["first_write_after_switch_s"] = (t_first_write - t_switch) if t_first_write else None
        res["promoted_after_kill_s"] = (watch.master_at - t_kill) if watch.master_at else None
        res["replica_online_after_kill_s"] = (watch.replica_online_at - t_kill) if watch.replica_online_at else None
        res["first_write_client"] = watch.first_write_client
        first_after = next((t for t in ack_times if t_first_write and t >= t_first_write), None)
        res["acks_resume_after_kill_s"] = (first_after - t_kill) if first_after else None
        res["acks_resume_after_switch_s"] = (first_after - t_switch) if first_after else None
        res["acks_resume_after_restart_s"] = (first_after - t_restart) if (first_after and t_restart) else None
        res["restart_after_kill_s"] = (t_restart - t_kill) if t_restart else None
        before = [t for t in ack_times if t <= t_kill]
        after = [t for t in ack_times if t > t_kill]
        res["last_ack_before_kill_s"] = (before[-1] - t_kill) if before else None
        # 2xx answers that left after the kill but before punctual reached the new master:
        # writes the old master (and with WAIT, its replica) confirmed just before it died.
        early_acks = [t for t in after if t_first_write is None or t < t_first_write]
        res["acks_between_kill_and_new_master"] = len(early_acks)
        res["last_of_those_after_kill_s"] = (early_acks[-1] - t_kill) if early_acks else None
        gap, prev = 0.0, (before[-1] if before else t_kill)
        for t in after:
            gap = max(gap, t - prev)
            prev = t
        res["longest_ack_gap_s"] = gap
        with ev_lock:
            timeline = sorted(events)
        res["sentinel_events"] = [[round(t - t_kill, 3), p, ch, m] for t, p, ch, m in timeline]
        conv = [t for t, _, ch, _ in timeline if ch == "+convert-to-slave"]
        res["convert_to_slave_after_restart_s"] = (min(conv) - t_restart) if (conv and t_restart) else None

        # /metrics while the load is over but the timers have not all fired.
        try:
            with open(os.path.join(d, "metrics.txt"), "wb") as f:
                f.write(http_get(hp, "/metrics")[1])
        except (OSError, http.client.HTTPException):
            pass

        # Wait for every deadline sent, then for stragglers.
        wait_s = last_deadline + FIRE_MARGIN_S - time.time()
        log(f"  load stopped ({t_load_end - t_kill:.1f} s after the kill); waiting {max(0, wait_s):.0f} s for the deadlines")
        time.sleep(max(0.0, wait_s))
        final_port = master_addr(sports[0])
        want = {(a[1], a[2]): a[3] for a in acked}
        settle_until = now() + SETTLE_S
        while True:
            streams = read_streams(final_port)
            missing = [tk for tk, v in want.items() if v not in [e[0] for e in streams[tk[0]].get(tk[1], [])]]
            if not missing or now() > settle_until:
                break
            time.sleep(1)
        pending = read_pending(final_port)

        lost, stuck = [], []
        for (tenant, key), v in want.items():
            if any(e[0] == v for e in streams[tenant].get(key, [])):
                continue
            if pending.get((tenant, key)) == v:
                stuck.append([tenant, key, v])
            else:
                lost.append([tenant, key, v])
        dups = early = entries = 0
        for tenant, keys in streams.items():
            for key, es in keys.items():
                entries += len(es)
                c = Counter(e[0] for e in es)
                dups += sum(n - 1 for n in c.values() if n > 1)
                early += sum(1 for e in es if e[2] < e[1])
        refused_keys = {(r[1], r[2]) for r in refused}
        res.update({
            "acknowledged": len(acked),
            "lost": len(lost),
            "stuck_pending": len(stuck),
            "duplicates": dups,
            "early": early,
            "stream_entries": entries,
            "pending_left": len(pending),
            "refused_timers": len(refused_keys),
            "refused_applied_later": sum(1 for tk in refused_keys if tk[1] in streams[tk[0]] or tk in pending),
            "statuses": dict(sorted(statuses.items())),
            "http_503_with_retry_after": sum(n for s, n in statuses.items() if " 503 " in s and s.endswith("with Retry-After")),
            "http_503_without_retry_after": sum(n for s, n in statuses.items() if "WITHOUT Retry-After" in s),
            "batch_items_503": sum(n for s, n in statuses.items() if s.startswith("item 503")),
            "transport_errors": sum(n for s, n in statuses.items() if " error " in s),
        })
        if lost:
            with open(os.path.join(d, "lost.json"), "w") as f:
                json.dump(lost, f)
        if stuck:
            with open(os.path.join(d, "stuck.json"), "w") as f:
                json.dump(stuck, f)

        # Checks.
        if wait > 0 and lost:
            fail.append(f"{len(lost)} acknowledged timers lost with --redis-wait-replicas {wait}")
        fw = res["first_write_after_switch_s"]
        if fw is None or fw > SWITCH_LIMIT_S:
            fail.append(f"first write on the new master {fw} s after +switch-master (limit {SWITCH_LIMIT_S} s)")
        if stuck:
            fail.append(f"{len(stuck)} acknowledged timers still pending past their deadline")
        if early:
            fail.append(f"{early} fires before their deadline")
        if res["http_503_without_retry_after"]:
            fail.append(f"{res['http_503_without_retry_after']} 503 answers without Retry-After")
        if res["transport_errors"]:
            fail.append(f"{res['transport_errors']} requests failed at the transport (time-out or reset)")
        rc = server.stop()
        res["punctual_exit"] = rc
        if rc != 0:
            fail.append(f"punctual did not stop cleanly on SIGTERM (exit {rc})")
        server = None
    except RuntimeError as e:
        if str(e) not in fail:
            fail.append(str(e))
        if "t_kill" not in res:
            res["setup_error"] = str(e)
    finally:
        if not os.path.exists(stop_file):
            with open(stop_file, "w"):
                pass
        for p, _ in workers:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        if server is not None:
            res["punctual_exit"] = server.stop()
        for s in subs:
            s.stop()
        for n in nodes:
            n.kill()
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(d, "sentinel-events.txt"), "w") as f:
        for ev in res.get("sentinel_events", []):
            f.write(f"{ev[0]:+8.3f} s  :{ev[1]}  {ev[2]}  {ev[3]}\n")
    return res


def fmt(v, unit="s"):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f} {unit}".strip()
    return str(v)


def report(res):
    lines = [
        f"    acknowledged           {fmt(res.get('acknowledged'))}",
        f"    lost (acked)           {fmt(res.get('lost'))}",
        f"    still pending (acked)  {fmt(res.get('stuck_pending'))}",
        f"    duplicates delivered   {fmt(res.get('duplicates'))}",
        f"    early fires            {fmt(res.get('early'))}",
        f"    503 with Retry-After   {fmt(res.get('http_503_with_retry_after'))} requests, "
        f"{fmt(res.get('batch_items_503'))} batch items; refused timers applied later anyway: "
        f"{fmt(res.get('refused_applied_later'))} of {fmt(res.get('refused_timers'))}",
        f"    +switch-master         {fmt(res.get('switch_after_kill_s'))} after the kill",
        f"    first write, new master {fmt(res.get('first_write_after_switch_s'))} after +switch-master",
        f"    acks resume            {fmt(res.get('acks_resume_after_switch_s'))} after +switch-master"
        + (f", {fmt(res.get('acks_resume_after_restart_s'))} after the restart"
           if res.get("restart_after_kill_s") is not None else ""),
        f"    longest gap in acks    {fmt(res.get('longest_ack_gap_s'))}",
    ]
    if res.get("convert_to_slave_after_restart_s") is not None:
        lines.append(f"    +convert-to-slave      {fmt(res['convert_to_slave_after_restart_s'])} after the restart")
    for f_ in res["failures"]:
        lines.append(f"    FAIL: {f_}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin")
    ap.add_argument("--runs", type=int, default=2, help="runs per mode [2]")
    ap.add_argument("--wait", default="0,1", help="modes: --redis-wait-replicas values, comma-separated [0,1]")
    ap.add_argument("--out", help="where the runs' directories go [a new directory under /tmp]")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--conns", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--prefix", help=argparse.SUPPRESS)
    ap.add_argument("--stop-file", help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker_main(a)
        return 0
    if not a.bin or not os.access(a.bin, os.X_OK):
        print(f"no executable punctual binary: {a.bin!r} (--bin)", file=sys.stderr)
        return 2
    try:
        subprocess.run([REDIS_SERVER, "--version"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        print(f"{REDIS_SERVER} is needed (Redis 6.2 or later, with Sentinel)", file=sys.stderr)
        return 2
    modes = [int(m) for m in a.wait.replace(" ", ",").split(",") if m.strip()]
    out = a.out or tempfile.mkdtemp(prefix="punctual-failover-")
    os.makedirs(out, exist_ok=True)
    log(f"failover drill: modes wait={modes}, {a.runs} run(s) each, {RATE:.0f} timers/s; outputs in {out}")
    results = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for run in range(a.runs):
        for wait in modes:
            run_id = f"{stamp}-w{wait}-{run + 1}"
            log(f"run {run_id}")
            res = one_run(a.bin, wait, os.path.join(out, run_id), run_id)
            results.append(res)
            log(report(res))
    lines = ["", f"{'run':<26} {'wait':>4} {'acked':>7} {'lost':>5} {'dups':>5} {'503':>6} "
             f"{'503item':>7} {'switch':>7} {'write':>7} {'resume':>7} {'gap':>6}  result"]
    for r in results:
        def s(k):
            v = r.get(k)
            return "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))
        lines.append(f"{os.path.basename(r['dir']):<26} {r['wait_replicas']:>4} {s('acknowledged'):>7} "
                     f"{s('lost'):>5} {s('duplicates'):>5} {s('http_503_with_retry_after'):>6} "
                     f"{s('batch_items_503'):>7} {s('switch_after_kill_s'):>7} "
                     f"{s('first_write_after_switch_s'):>7} {s('acks_resume_after_switch_s'):>7} "
                     f"{s('longest_ack_gap_s'):>6}  {'FAIL' if r['failures'] else 'ok'}")
    lines.append("switch: +switch-master after the kill; write: punctual's first write on the new "
                 "master after +switch-master; resume: first 2xx after +switch-master; gap: longest "
                 "time without a 2xx (seconds)")
    summary = "\n".join(lines)
    log(summary)
    with open(os.path.join(out, "summary.txt"), "a") as f:
        f.write(summary + "\n")
    failed = [r for r in results if r["failures"]]
    if failed and all(r.get("setup_error") for r in failed):
        log(f"COULD NOT RUN: {len(failed)} of {len(results)} runs failed before the kill (see above)")
        return 2
    if failed:
        log(f"FAILED: {len(failed)} of {len(results)} runs (see FAIL lines above)")
        return 1
    log("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
