#!/usr/bin/env bash
# Cluster drill: punctual nodes on a Redis Cluster (3 masters, 1 replica each, WAIT 1) under a
# mixed load, through a kill -9 of a node and its restart, a SIGSTOP past its leases, a fourth
# node's join, a SIGTERM, and a kill -9 of a Redis master.
#
#   perf/drills/cluster.sh [RUNS]                          # RUNS runs (default 1), about 2 minutes each
#   PUNCTUAL_BIN=/path/to/punctual perf/drills/cluster.sh  # use that binary, build nothing
#   CLUSTER_OUT=/some/dir perf/drills/cluster.sh           # keep the outputs there
#
# Each run starts its own cluster and nodes on free loopback ports, sends batch POSTs, PUTs,
# re-PUTs and DELETEs to the nodes a load balancer would pick, and after every deadline reads
# the fired streams and pending records back. It prints, per event, how many partitions moved
# and how long until every node had loaded exactly its rendezvous share, and the lateness of
# the timers due meanwhile as a distribution. perf/drills/cluster.py holds the method, the
# checks and the knobs (RATE, LOAD_THREADS, GAP_S, PAUSE_S, …).
#
# Exit status: 0 all checks passed; 1 a check failed (acknowledged timer lost, fired early, a
# replaced or cancelled version fired, a killed node's timer later than TTL + 1 s, a join or
# planned leave not settled within 5 s, a request hung, a SIGTERM not clean: see the FAIL
# lines); 2 the drill could not run. Needs python3 (standard library only), redis-server and
# redis-cli 7 with cluster mode, cargo unless PUNCTUAL_BIN is set.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-${CLUSTER_RUNS:-1}}
if [[ -z "${PUNCTUAL_BIN:-}" ]]; then
    cargo build --release --bin punctual
    PUNCTUAL_BIN=target/release/punctual
fi
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }
command -v "${REDIS_SERVER:-redis-server}" >/dev/null || { echo "redis-server is needed" >&2; exit 2; }
command -v redis-cli >/dev/null || { echo "redis-cli is needed" >&2; exit 2; }
args=(--bin "$PUNCTUAL_BIN" --runs "$RUNS")
if [[ -n "${CLUSTER_OUT:-}" ]]; then
    args+=(--out "$CLUSTER_OUT")
fi
exec python3 perf/drills/cluster.py "${args[@]}"
