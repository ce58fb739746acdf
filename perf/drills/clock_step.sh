#!/usr/bin/env bash
# Clock-step drill: steps and slews the wall clock of a live `punctual serve` and checks, from
# outside, that no timer fires early by the stepped clock, none twice, none lost, and that the
# server counts and logs the steps.
#
# What it does
#   1. Builds punctual (cargo build --release --bin punctual), unless PUNCTUAL_BIN names a
#      binary to use instead.
#   2. Starts `punctual serve` with 2 shards and the journal store in a temporary directory,
#      on a free loopback port, under libfaketime (LD_PRELOAD): CLOCK_REALTIME inside the
#      server is the real clock plus an offset read from a file on every call, while
#      CLOCK_MONOTONIC and the TSC run on untouched. callback_allow names a webhook receiver
#      that the drill runs itself.
#   3. Registers 3,000 timers with callbacks (batch POSTs and single PUTs, some replaced by a
#      later PUT), over 8 tenants, due over 20 s.
#   4. While they fire: steps the server's clock back 2 s, later forward 2 s, then slews it
#      forward and back as many small steps under the 50 ms step threshold (5 ms every
#      100 ms, 40 each way).
#   5. Judges every delivery by the stepped clock (the receiver's real clock plus the offset in
#      force), counts repeats by Idempotency-Key, and checks that every acknowledged timer was
#      delivered; checks punctual_clock_steps, punctual_clock_set_backs and
#      punctual_clock_offset_seconds in /metrics, and the "system clock stepped" log lines.
#   6. Prints a summary and exits 0 when every assertion holds, 1 when one fails, 2 when the
#      drill could not run (no libfaketime, the server did not start, a host too busy to
#      register the timers before the first deadline, ...).
#
# Requirements
#   - Linux, python3 (standard library only).
#   - libfaketime: Debian/Ubuntu `apt-get install faketime libfaketime` (0.9.10 tested); the
#     drill uses the multi-threaded library libfaketimeMT.so.1. Set FAKETIME_LIB to its path if
#     it is not in a standard place.
#   - No root needed; the drill picks free loopback ports. The host's clock is never touched.
#
# Usage
#   perf/drills/clock_step.sh                          # build, then run with the defaults
#   PUNCTUAL_BIN=/path/to/punctual perf/drills/clock_step.sh
#   perf/drills/clock_step.sh --timers 5000 --spread-s 30 --strict
#   perf/drills/clock_step.sh --help                   # every knob of the drill
#
# Environment
#   PUNCTUAL_BIN   the binary to run; when unset, the script builds target/release/punctual.
#   FAKETIME_LIB   libfaketimeMT.so.1 to preload (default: found under /usr/lib*).
#   DRILL_DIR      work directory (default: a new one under ${TMPDIR:-/tmp}); it keeps the
#                  server's log, its config, the journal and the offset file for inspection.
#
# Reading the result
#   "early" counts deliveries that arrived before their deadline by the stepped clock and are
#   not explained by a backward change just before them; it must be 0. Most likely cause: the
#   server extrapolating a fast clock rate it measured (the forward slew) after the clock
#   slowed down again, which the summary lists by phase.
#   "step window" counts deliveries that were early by the offset at their arrival but on
#   time by an offset in force shortly before (default 150 ms): a step made by libfaketime is
#   invisible to the kernel, so the server's cancel-on-set timerfd does not fire and each
#   shard learns of the step only at its next 100 ms anchor, as src/clock/mod.rs documents for
#   steps that no SetWatch reports. A real clock_settime is reported at once. They are
#   reported, not failed; --strict fails on them too.
#   Lateness is measured by the stepped clock: the forward step makes up to its own size of
#   lateness for the timers it made due at once; the summary also gives it without them.
#   The work directory keeps server.log, punctual.toml, faketime.rc and deliveries.csv (every
#   delivery with its deadline, arrival, offset, verdict and clock phase).
#
# Caveats
#   - Shards are not pinned by default (--pinning none), for shared hosts; pass
#     --pinning auto to pin them as in production.
#   - libfaketime's clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) fails with EINVAL when
#     FAKETIME_DONT_FAKE_MONOTONIC=1 (0.9.10). punctual runs fine under these settings, but
#     other programs may not (Python's time.sleep raises EINVAL).
#   - A process killed under libfaketime may leave /dev/shm/faketime_shm_<pid> and
#     /dev/shm/sem.faketime_sem_<pid>; the drill removes the server's.

set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

die() { echo "clock_step.sh: $*" >&2; exit 2; }

command -v python3 >/dev/null || die "python3 is required"

case "${1:-}" in
  -h|--help)
    sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
    exec python3 "$here/clock_step.py" --help
    ;;
esac

# libfaketime: the multi-threaded variant, since punctual runs one thread per shard and more.
lib="${FAKETIME_LIB:-}"
if [[ -z "$lib" ]]; then
  for candidate in \
      /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 \
      /usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1 \
      /usr/lib64/faketime/libfaketimeMT.so.1 \
      /usr/lib/faketime/libfaketimeMT.so.1 \
      /usr/local/lib/faketime/libfaketimeMT.so.1; do
    if [[ -r "$candidate" ]]; then lib="$candidate"; break; fi
  done
fi
[[ -n "$lib" && -r "$lib" ]] || die "libfaketimeMT.so.1 not found: apt-get install faketime libfaketime (or set FAKETIME_LIB)"

# The binary: the caller's, or a fresh release build.
if [[ -n "${PUNCTUAL_BIN:-}" ]]; then
  bin="$PUNCTUAL_BIN"
else
  echo "clock_step.sh: cargo build --release --bin punctual" >&2
  (cd "$root" && cargo build --release --bin punctual)
  bin="$root/target/release/punctual"
fi
[[ -x "$bin" ]] || die "not an executable: $bin"

work="${DRILL_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/punctual-clock-step.XXXXXX")}"
mkdir -p "$work"

python3 "$here/clock_step.py" --bin "$bin" --faketime-lib "$lib" --workdir "$work" "$@"
