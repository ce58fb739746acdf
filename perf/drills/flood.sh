#!/usr/bin/env bash
# Flood drill: "the time wheel runs out of memory".
#
#   perf/drills/flood.sh [SECONDS]          # default 60 s of load, then the checks (about 3 min in all)
#   PUNCTUAL_BIN=/path/to/punctual perf/drills/flood.sh 60   # use that binary, build nothing
#
# Starts its own `punctual serve` (journal store in a temporary --data-dir, 2 shards, a free
# loopback port, --shard-capacity 200000, tenant "flood" with max_pending 50000 and tenant
# "calm" with its own quota), floods it from 32 keep-alive connections past flood's quota and
# past the shards' capacity, while 4 other connections keep scheduling short timers for
# "calm". It then checks that every refusal was a 429/503 with an error code and Retry-After,
# that calm was served and its timers delivered (to a webhook receiver the drill runs), that
# the server's RSS stayed under the bound docs/OPERATING.md gives for the configured capacity, and,
# after a SIGKILL and a restart on the same data directory, that every acknowledged timer is
# still pending with its acknowledged version. perf/drills/flood.py holds the details, and
# the environment variables that change the sizes.
#
# Exit status: 0 all checks passed, 1 a check failed (listed at the end of the output),
# 2 the drill could not run (no binary, the server did not start).
# Needs: python3 (standard library only), cargo unless PUNCTUAL_BIN is set, Linux /proc.
# Use a host that has 2 free cores; the load generator shares them with the server.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_OF_LOAD=${1:-60}
if [[ -z "${PUNCTUAL_BIN:-}" ]]; then
    cargo build --release --bin punctual
    PUNCTUAL_BIN=target/release/punctual
fi
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }
exec python3 perf/drills/flood.py --bin "$PUNCTUAL_BIN" "$SECONDS_OF_LOAD"
