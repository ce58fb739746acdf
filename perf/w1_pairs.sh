#!/usr/bin/env bash
# W1's lateness of two builds alternated, many pairs, with the floor beside each pair: the
# figure bench-compare takes once a pair, taken alone so that a tail of a few microseconds is
# not read from three samples.
#
#   perf/w1_pairs.sh N A_DIR B_DIR OUT
#
# A_DIR and B_DIR each hold a `jitter` bench binary (`scripts/bench-compare BASE` leaves them in
# target/bench-compare/base and .../head). Each pair runs `jitter --quick --only punctual-spin
# --workload W1` for both builds, A first in odd pairs and B first in even ones, then
# `floor-spin` once; OUT gets a line per run: build (A, B, F) p50 p99 p99.9 max in µs. The
# summary (medians, and B/A pair by pair) goes to stdout.
set -euo pipefail
n=${1:?usage: perf/w1_pairs.sh N A_DIR B_DIR OUT}
a=${2:?} b=${3:?} out=${4:?}
: >"$out"
run() {
    "$1/jitter" --quick --only "$2" --workload W1 2>/dev/null | grep '^{' |
        python3 -c 'import json, sys
for line in sys.stdin:
    d = json.loads(line)
    if d["system"] == sys.argv[1]:
        print(sys.argv[2], d["p50_us"], d["p99_us"], d["p999_us"], d["max_us"])' "$2" "$3" >>"$out"
}
for i in $(seq "$n"); do
    if [ $((i % 2)) = 1 ]; then
        run "$a" punctual-spin A && run "$b" punctual-spin B
    else
        run "$b" punctual-spin B && run "$a" punctual-spin A
    fi
    run "$a" floor-spin F
done
python3 - "$out" <<'PY'
import statistics as s, sys
rows = [l.split() for l in open(sys.argv[1])]
n = sum(1 for r in rows if r[0] == "A")
for k, name in [(1, "p50"), (2, "p99"), (3, "p99.9"), (4, "max")]:
    col = lambda who: [float(r[k]) for r in rows if r[0] == who]
    a, b, f = col("A"), col("B"), col("F")
    r = [y / x for x, y in zip(a, b)]
    print(f"{name}: median A {s.median(a):.1f} µs, B {s.median(b):.1f} µs, floor-spin {s.median(f):.1f} µs; "
          f"B/A per pair median {s.median(r):.3f}, B higher in {sum(x > 1 for x in r)} of {n}")
PY
