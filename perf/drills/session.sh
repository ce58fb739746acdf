#!/usr/bin/env bash
# A user's session: conditional writes, debounce, listing by prefix, a bulk cancel, a recurring
# schedule and a pull queue, as three tenants with tokens (two with signed webhooks, one with a
# queue and a consumer) on the journal, the server SIGKILLed every 3-6 s (the first time in the
# bulk cancel's first moments) and restarted on the same port. Then it checks: nothing early,
# every acknowledged create-only and compare-and-set version delivered, each debounced key fired
# while written and its last payload delivered, no bulk-cancelled timer fired or listed, each
# listing whole, each token refused on the other tenant, the schedule's occurrences one a second
# with none missing or repeated, every queued timer received and none again after its ack,
# SIGTERM exits 0. perf/drills/session.py holds the details.
#
#   perf/drills/session.sh [SECONDS]                       # 30 s of load by default
#   PUNCTUAL_BIN=/path/to/punctual perf/drills/session.sh  # use that binary, build nothing
#
# Exit status: 0 all checks passed, 1 a check failed (listed at the end), 2 it could not run.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ -z "${PUNCTUAL_BIN:-}" ]]; then
    cargo build --release --bin punctual
    PUNCTUAL_BIN=target/release/punctual
fi
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }
exec python3 perf/drills/session.py --bin "$PUNCTUAL_BIN" "$@"
