#!/usr/bin/env bash
# Recurring schedules across steps of the system clock: four schedules every second (catch-up
# all, latest and skip on a period; all on a 6-field cron in Europe/Paris) on `punctual serve`
# with the journal under libfaketime; the server's clock stepped forward, back twice as far,
# and forward to the real time. Checks: none early by the stepped clock, each occurrence once,
# fired in order and never again after the step back, and each catch-up policy's answer to the
# forward step. perf/drills/schedule_clock.py holds the details.
#
#   perf/drills/schedule_clock.sh [--step-s 10]
#   PUNCTUAL_BIN=/path/to/punctual perf/drills/schedule_clock.sh   # use that binary, build nothing
#   FAKETIME_LIB=/path/libfaketimeMT.so.1                           # else the Debian package's
#
# Exit status: 0 all checks passed, 1 a check failed, 2 it could not run.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib="${FAKETIME_LIB:-/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1}"
[[ -r "$lib" ]] || { echo "libfaketimeMT.so.1 not found: apt-get install faketime libfaketime (or set FAKETIME_LIB)" >&2; exit 2; }
if [[ -z "${PUNCTUAL_BIN:-}" ]]; then
    cargo build --release --bin punctual
    PUNCTUAL_BIN=target/release/punctual
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/punctual-schedule-clock.XXXXXX")"
exec python3 perf/drills/schedule_clock.py --bin "$PUNCTUAL_BIN" --faketime-lib "$lib" --workdir "$work" "$@"
