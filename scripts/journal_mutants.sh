#!/usr/bin/env bash
# Sync mutants of the journal: removes the fsync (or directory fsync) of one call site at a
# time, as if its line were deleted, and runs the crash matrix's power cuts in every fsync mode
# (PUNCTUAL_CRASH_MATRIX=power) with the everysec test beside it. A removed sync the tests do not
# notice prints SURVIVED. Test builds only (`store::journal::io::Site`); no rebuild per mutant.
#
#   scripts/journal_mutants.sh            # every call site a clean run syncs from
#   scripts/journal_mutants.sh FILE:LINE  # that one
#   scripts/journal_mutants.sh A:1,B:2    # both removed together
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cargo test --lib --no-run 2>&1 | grep -o 'target/debug/deps/punctual-[0-9a-f]*' | tail -1)
filter=store::journal::crash
sites=$(mktemp)
if [ $# -gt 0 ]; then
  printf '%s\n' "$@" > "$sites"
else
  PUNCTUAL_MUTANT_SITES="$sites" PUNCTUAL_CRASH_MATRIX=power timeout 1800 "$bin" "$filter" -q >/dev/null \
    || { echo "the clean run fails: fix it first"; exit 1; }
fi
caught=0 survived=0
for site in $(sort -u "$sites"); do
  start=$(date +%s)
  if PUNCTUAL_MUTANT_SKIP="$site" PUNCTUAL_CRASH_MATRIX=power timeout 1800 "$bin" "$filter" -q >/dev/null 2>&1; then
    echo "SURVIVED  $site  ($(( $(date +%s) - start )) s)"; survived=$((survived + 1))
  else
    echo "caught    $site  ($(( $(date +%s) - start )) s)"; caught=$((caught + 1))
  fi
done
echo "sync mutants: ${caught} caught, ${survived} survived"
