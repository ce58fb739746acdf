#!/usr/bin/env bash
# Crash drill: SIGKILL in the middle of deliveries, restart on the same port, and hold what came
# out (webhooks, Redis streams, dead letters, /metrics) against what the clients were told.
#
#   perf/drills/crash.sh [SECONDS]                    # the journal store with webhooks (default)
#   perf/drills/crash.sh --store redis [SECONDS]      # the Redis store (its own redis-server)
#   perf/drills/crash.sh --page-horizon-s 1 [SECONDS] # the journal, paging what is due >1 s ahead
#   PUNCTUAL_BIN=/path/to/punctual perf/drills/crash.sh 40   # use that binary, build nothing
#
# Starts its own `punctual serve` (2 shards, a free loopback port, four tenants: signed
# webhooks, a receiver that fails half the attempts, one that refuses every delivery so that
# timers become dead letters, and with Redis one without callbacks), sends a mix of PUT,
# re-PUT, DELETE, batch POST and dead-letter discards and re-drives from 20 keep-alive
# connections, and SIGKILLs the server every 2-5 s, restarting it on the same port. Then it
# checks: nothing early, nothing acknowledged lost, nothing cancelled or replaced delivered
# afterwards, versions only grow, dead letters and pending timers under one key both kept,
# signatures verify, /metrics readable, SIGTERM exits 0. perf/drills/crash.py holds the details.
#
# Exit status: 0 all checks passed, 1 a check failed (listed at the end of the output),
# 2 the drill could not run. Needs python3 (standard library only), redis-server for
# --store redis, cargo unless PUNCTUAL_BIN is set.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ -z "${PUNCTUAL_BIN:-}" ]]; then
    cargo build --release --bin punctual
    PUNCTUAL_BIN=target/release/punctual
fi
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }
exec python3 perf/drills/crash.py --bin "$PUNCTUAL_BIN" "$@"
