#!/usr/bin/env python3
"""Crash drill: SIGKILL in the middle of deliveries, restart on the same port, and hold what
came out against what the clients were told. Python standard library only.

Usage:  perf/drills/crash.py --bin target/release/punctual [--store journal|redis] [SECONDS]
        (perf/drills/crash.sh builds the binary and calls this; read that first.)

What it does, in order:

 1. Starts a webhook receiver on a free loopback port, and, with --store redis, its own
    redis-server on another. Then the real `punctual serve` on a free port with 2 shards, no
    pinning, spinning off, and four tenants:
        shop    callbacks to /ok/ (always 200), signed with a webhook secret
        flaky   callbacks to /flaky/ (503 for half the attempts, by a hash of the attempt),
                up to 30 attempts, backoff 20-200 ms
        reject  callbacks to /reject/ (always 400): every fire becomes a dead letter
        plain   (redis only) no callback: fires go to the stream punctual:fired:{plain}
 2. For SECONDS (default 40), 16 keep-alive connections send a mix of PUT (new and
    replacing), DELETE and batch POST for shop, flaky and plain (due in 0.3-4 s); each key
    belongs to one connection, so the order of its answers is the order of its operations.
    Four more connections walk reject keys through dead-letter scenarios: fire, become dead,
    then nothing / a new far timer under the same key / a new timer and the dead letter
    discarded / the dead letter discarded / re-driven / re-drive refused while a timer is
    pending (409).
 3. Meanwhile, every 2-5 s, the server gets SIGKILL and is started again on the same port and
    data directory (or Redis), whatever it is doing: committing, firing, delivering.
 4. When the load stops, it waits (bounded) until every timer that must be delivered was, reads
    /metrics, kills and restarts once more, and reads every reject key's pending timer and dead
    letter. Then SIGTERM, which must exit 0.

The model: an answer 2xx is an acknowledgement. A request that got no answer (the kill cut
the connection), a 503 or any other surprise makes its key *uncertain*: the checks that need
to know its exact history skip it (they are listed below with the keys they cover).

Checks (each failure is listed at the end; exit 1 if any):
  - never early: every attempt's fired_at_us >= its fire_at_us, and the receiver got it at or
    after fire_at_us on the same host clock; fire_at_us in the body is the acknowledged one
    (all keys);
  - nothing acknowledged is lost: every version of a certain shop/flaky key that no
    acknowledged operation replaced or cancelled was delivered (a 2xx from the receiver); for
    plain, it is in the stream (certain keys);
  - nothing cancelled or replaced comes back: no attempt of a version starts (fired_at_us)
    after the acknowledgement of the operation that replaced or cancelled it (all keys);
  - nothing invented: every delivered version of a certain key is one that was acknowledged;
  - versions only grow: each key's acknowledged versions increase strictly, across restarts;
  - dead letters and pending timers under one key are both kept, across restarts, exactly as
    acknowledged (certain reject keys);
  - signatures verify (shop);
  - /metrics is readable after the last restart; SIGTERM exits 0.

Reported, not checked: restarts and their time to healthy, delivery counts, repeats (at least
once allows them), lateness of first attempts for timers not due during an outage.

Environment (defaults in brackets): CRASH_CONNS [16], CRASH_REJECT_CONNS [4], CRASH_PAUSE_MS
[40, the most a connection waits between requests], CRASH_KILL_MIN_S
[2], CRASH_KILL_MAX_S [5], CRASH_SETTLE_S [90], CRASH_SEED [1], CRASH_KEEP=1 keeps the work
directory (server logs, the receiver's record) even when everything passed.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict

sys.dont_write_bytecode = True   # no __pycache__ beside the scripts
from common import env_int, free_port, pct  # noqa: E402
from crash_checks import check, check_reject, delivered_versions, metrics, wait_delivered  # noqa: E402
from crash_load import killer, mixed_worker, reject_worker  # noqa: E402
from crash_model import Model  # noqa: E402
from crash_procs import CHILDREN, SECRET, SHARDS, Receiver, Redis, Server  # noqa: E402

CONNS = env_int("CRASH_CONNS", 16)
REJECT_CONNS = env_int("CRASH_REJECT_CONNS", 4)
SETTLE_S = env_int("CRASH_SETTLE_S", 90)
SEED = env_int("CRASH_SEED", 1)


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--store", choices=["journal", "redis"], default="journal")
    ap.add_argument("--page-horizon-s", type=int, default=0,
                    help="journal only: page timers due further ahead than this (1 pages most of the drill's)")
    ap.add_argument("seconds", nargs="?", type=float, default=40)
    args = ap.parse_args()
    rng = random.Random(SEED)
    workdir = tempfile.mkdtemp(prefix="punctual-crash-")
    fails, errors = [], []
    redis = None
    try:
        receiver = Receiver()
        base = f"http://127.0.0.1:{receiver.port}/"
        cfg = os.path.join(workdir, "punctual.toml")
        with open(cfg, "w") as f:
            f.write(f'callback_allow = ["{base}"]\nwebhook_timeout_ms = 2000\n'
                    f'[tenants.shop]\ncallback_url = "{base}ok/shop"\nwebhook_secret = "{SECRET}"\n'
                    f'[tenants.flaky]\ncallback_url = "{base}flaky/x"\nretry_max_attempts = 30\n'
                    f'retry_base_delay_ms = 20\nretry_max_delay_ms = 200\n'
                    f'[tenants.reject]\ncallback_url = "{base}reject/x"\nretry_max_attempts = 1\n'
                    f'[tenants.plain]\n')
        if args.store == "redis":
            redis = Redis(workdir)
            store_args = ["--redis", f"redis://127.0.0.1:{redis.port}/"]
            tenants = ["shop", "flaky", "plain"]
        else:
            store_args = ["--data-dir", os.path.join(workdir, "data")]
            if args.page_horizon_s > 0:
                store_args += ["--page-horizon-s", str(args.page_horizon_s)]
            tenants = ["shop", "flaky"]
        port = free_port()
        server = Server(args.bin, workdir, port, cfg, store_args)
        server.start()
        model = Model()
        stop, stop_kills = threading.Event(), threading.Event()
        threads = [threading.Thread(target=mixed_worker, args=(i, port, model, tenants, stop, random.Random(SEED * 1000 + i)))
                   for i in range(CONNS)]
        threads += [threading.Thread(target=reject_worker, args=(i, port, model, receiver, stop, random.Random(SEED * 2000 + i)))
                    for i in range(REJECT_CONNS)]
        kt = threading.Thread(target=killer, args=(server, stop_kills, rng, errors))
        t0 = time.monotonic()
        for t in threads:
            t.start()
        kt.start()
        stop_kills.wait(args.seconds)
        stop_kills.set()
        kt.join()
        stop.set()
        for t in threads:
            t.join(60)
        load_s = time.monotonic() - t0
        if errors:
            raise RuntimeError("; ".join(errors))

        missing = wait_delivered(receiver, redis, model, time.monotonic() + SETTLE_S)
        settle_note = f"{len(missing)} still undelivered after {SETTLE_S} s" if missing else "all delivered"
        mstatus, msums = metrics(port)
        if mstatus != 200:
            fails.append(f"/metrics answered {mstatus}")
        stats = check(model, receiver, redis, fails)
        # Once more: the final state (far timers, dead letters) must survive a SIGKILL too.
        server.kill_and_restart()
        rstats = check_reject(port, model, fails)
        server.proc.send_signal(signal.SIGTERM)
        try:
            rc = server.proc.wait(60)
        except subprocess.TimeoutExpired:
            rc = "no exit within 60 s"
            server.proc.kill()
        if rc != 0:
            fails.append(f"SIGTERM: exit status {rc}")

        with open(os.path.join(workdir, "record.json"), "w") as f:
            json.dump({"outages": server.outages, "attempts": receiver.attempts}, f)
        keys = list(model.keys.values())
        acked = sum(len(k.versions) for k in keys)
        ok, _ = delivered_versions(receiver)
        firsts = defaultdict(lambda: None)
        for a in receiver.attempts:
            kv = (a["tenant"], a["key"], a["version"])
            if a["attempt"] == 1 and firsts[kv] is None:
                firsts[kv] = a
        def in_outage(us):
            # due within 0.1 s before a kill, during the outage, or in the 2 s after it, when
            # the outage's overdue deliveries compete with those falling due
            return any(k0 - 100_000 <= us <= h + 2_000_000 for k0, h in server.outages)
        shop = [a for a in firsts.values() if a is not None and a["tenant"] == "shop"]
        late = [(a["fired_at"] - a["fire_at"]) / 1000 for a in shop if not in_outage(a["fire_at"])]
        late_out = [(a["fired_at"] - a["fire_at"]) / 1000 for a in shop if in_outage(a["fire_at"])]
        print(f"punctual crash drill: store {args.store}, {SHARDS} shards, {CONNS}+{REJECT_CONNS} connections, "
              f"{load_s:.0f} s of load, seed {SEED}")
        print(f"  restarts after SIGKILL: {len(server.outages)}; time to healthy p50 {pct(server.start_s, 50):.2f} s, "
              f"max {max(server.start_s):.2f} s")
        print(f"  keys {len(keys)} ({sum(k.uncertain for k in keys)} uncertain); acknowledged versions {acked}")
        print(f"  webhook attempts {len(receiver.attempts)}; versions delivered {len(ok)}; settle: {settle_note}")
        print(f"  refusals: {dict(model.refusals) or 'none'}")
        for what, xs in (("away from outages", late), ("due around an outage", late_out)):
            print(f"  first-attempt lateness of shop timers {what} ({len(xs)}): p50 {pct(xs, 50):.2f} ms, "
                  f"p99 {pct(xs, 99):.2f} ms, max {max(xs, default=float('nan')):.2f} ms")
        print(f"  checks: {dict(stats)}; reject keys: {dict(rstats)}")
        print(f"  /metrics after the load: fired {msums['punctual_timers_fired_total']:.0f}, "
              f"webhook attempts {msums['punctual_webhook_attempts_total']:.0f}, "
              f"successes {msums['punctual_webhook_successes_total']:.0f}, "
              f"dead letters held {msums['punctual_webhook_dead_letters']:.0f}, "
              f"pending {msums['punctual_timers_pending']:.0f}")
        if fails:
            print(f"FAILED ({len(fails)}):")
            for f in fails[:60]:
                print("  - " + f)
            print(f"  work directory kept: {workdir}")
            return 1
        print("PASSED")
        return 0
    except RuntimeError as e:
        print(f"could not run: {e}")
        print(f"  work directory kept: {workdir}")
        return 2
    finally:
        for p in CHILDREN:
            if p.poll() is None:
                p.kill()
        if not fails and not errors and os.environ.get("CRASH_KEEP") != "1":
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
