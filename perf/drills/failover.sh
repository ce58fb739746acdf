#!/usr/bin/env bash
# Failover drill: the Redis master dies under load; Redis Sentinel promotes its replica and
# punctual must follow it, without losing an acknowledged timer when it waits for a replica.
#
#   perf/drills/failover.sh [RUNS] [WAIT]      # RUNS per mode (default 2); WAIT 0, 1 or "0,1" (default both)
#   PUNCTUAL_BIN=/path/to/punctual perf/drills/failover.sh   # use that binary, build nothing
#   FAILOVER_OUT=/some/dir perf/drills/failover.sh 1 1       # keep the outputs there
#
# Each run starts, on loopback and free ports, in its own directory: a Redis master, one
# replica and three sentinels (quorum 2, down-after 1 s), then `punctual serve --shards 2
# --redis redis+sentinel://…/punctual-drill [--redis-wait-replicas 1]`. It registers timers at
# a steady rate from keep-alive connections (PUT and batch POST, every key new, due 1-15 s
# later), SIGKILLs the master after 5 s, timestamps the sentinels' +switch-master, measures
# when punctual first writes to the new master and when 2xx answers resume, and, with
# WAIT 1, restarts the old master 3 s after the switch so that it can come back as the new
# master's replica (until then no write can be acknowledged: 503 store_unavailable after 2 s,
# with Retry-After). Load continues 10 s after acks resume; after every deadline has passed
# it reads the fired streams and the pending records from the new master and reports, per run:
# acknowledged timers, acknowledged timers lost, duplicates delivered, 503s, time to the
# first write on the new master, time until acks resume. perf/drills/failover.py holds the
# method and the knobs (environment variables: RATE, WARMUP_S, RESTART_AFTER_S, …).
#
# Exit status: 0 all checks passed; 1 a check failed: with WAIT 1 an acknowledged timer was
# lost, or in any mode punctual wrote to the new master more than 5 s after +switch-master,
# acks never resumed, a timer fired early or stayed pending, a request hung, a 503 lacked
# Retry-After (see the FAIL lines); 2 the drill could not run. With WAIT 0 a lost
# acknowledged timer is possible (async replication) and only reported.
# Needs: python3 (standard library only), redis-server 6.2+ (it runs the sentinels too, with
# --sentinel), cargo unless PUNCTUAL_BIN is set. About 1 minute per run; 2 free cores help:
# Redis, the sentinels, punctual and the load generator share the host.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-${FAILOVER_RUNS:-2}}
WAIT=${2:-${FAILOVER_WAIT:-0,1}}
if [[ -z "${PUNCTUAL_BIN:-}" ]]; then
    cargo build --release --bin punctual
    PUNCTUAL_BIN=target/release/punctual
fi
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }
command -v "${REDIS_SERVER:-redis-server}" >/dev/null || { echo "redis-server is needed" >&2; exit 2; }
args=(--bin "$PUNCTUAL_BIN" --runs "$RUNS" --wait "$WAIT")
if [[ -n "${FAILOVER_OUT:-}" ]]; then
    args+=(--out "$FAILOVER_OUT")
fi
exec python3 perf/drills/failover.py "${args[@]}"
