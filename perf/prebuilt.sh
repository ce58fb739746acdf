#!/usr/bin/env bash
# The whole-host measurements, from binaries built elsewhere, for a bigger host that has no Rust
# toolchain (and no network): the jitter bench, shard scaling and single PUTs over HTTP, the
# open loop at 20,000 and 50,000 PUTs/s, and the cluster drill (3 Redis masters, a replica each);
# on request, tens of millions of far-future timers on the journal (the pending bench).
#
#   perf/prebuilt.sh pack DIR        # here: builds, then copies the binaries, redis-server,
#                                    # redis-cli and their libraries into DIR
#   perf/prebuilt.sh run DIR OUT     # there, from the repository's root: runs everything,
#                                    # one log per part in OUT
#
# Each part runs under its own time limit, so one that hangs or fails leaves the others' figures.
# JITTER_ARGS (e.g. --quick), SCALE (the HTTP bench's PUNCTUAL_BENCH_SCALE, default 0.5) and
# OPENLOOP_S (default 10) shorten a trial run. PARTS picks the parts, in order (default
# "jitter scale openloop cluster"; "pending" runs `benches/pending.rs` with PENDING_TIMERS,
# default 100,000,000, on PENDING_SHARDS shards, default 2; its data under
# target/pending-bench). The bench binaries start `punctual` from the
# absolute path it had when they were built (cargo's CARGO_BIN_EXE_punctual), so `run` puts it
# back at that path. Needs python3 (standard library) on the bigger host for the cluster drill.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: perf/prebuilt.sh pack DIR | run DIR OUT}
dir=${2:?usage: perf/prebuilt.sh pack DIR | run DIR OUT}

pack() {
    mkdir -p "$dir/lib"
    cargo build --release --locked --bin punctual --example put_openloop
    local benches
    benches=$(cargo bench --locked --no-run --bench jitter --bench http --bench pending --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["bench"]:
        print(m["target"]["name"], m["executable"])')
    while read -r name exe; do
        cp "$exe" "$dir/$name"
    done <<<"$benches"
    cp target/release/punctual target/release/examples/put_openloop "$dir/"
    readlink -f target/release/punctual >"$dir/punctual.path"
    # redis-server is a link to redis-check-rdb, which picks its mode by its own name.
    cp "$(readlink -f "$(command -v redis-server)")" "$dir/redis-server"
    cp "$(readlink -f "$(command -v redis-cli)")" "$dir/redis-cli"
    ldd "$dir/redis-server" "$dir/redis-cli" | awk '/=> \// {print $3}' | sort -u |
        grep -v -E '/(libc|libm|libpthread|libdl|librt)\.so' | xargs -I{} cp -L {} "$dir/lib/"
    strip "$dir"/jitter "$dir"/http "$dir"/pending "$dir"/punctual "$dir"/put_openloop
    du -sh "$dir"
}

part() {
    local name=$1 limit=$2
    shift 2
    echo "== $name ($(date -u +%H:%M:%S) UTC, limit ${limit}s, load $(cut -d' ' -f1-3 /proc/loadavg))"
    timeout -k 5 "$limit" "$@" >"$out/$name.txt" 2>&1 || echo "   $name ended with status $?"
    tail -n 40 "$out/$name.txt"
}

run() {
    out=${3:?usage: perf/prebuilt.sh run DIR OUT}
    mkdir -p "$out" "$(dirname "$(cat "$dir/punctual.path")")"
    cp "$dir/punctual" "$(cat "$dir/punctual.path")"
    # The drills and benches start redis-server and redis-cli by name.
    PATH=$(readlink -f "$dir"):$PATH
    LD_LIBRARY_PATH=$(readlink -f "$dir/lib")
    export PATH LD_LIBRARY_PATH
    {
        echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(uname -r)"
        grep -E 'MemTotal' /proc/meminfo
        redis-server --version
    } | tee "$out/host.txt"
    for name in ${PARTS:-jitter scale openloop cluster}; do
        case $name in
        # shellcheck disable=SC2086
        jitter) part jitter 240 "$dir/jitter" ${JITTER_ARGS:-} ;;
        scale) PUNCTUAL_BENCH_SCALE=${SCALE:-0.5} part scale 90 "$dir/http" scale ;;
        openloop) part openloop 60 bash -c "
            \"$dir/punctual\" serve --listen 127.0.0.1:7599 --shards 2 --store memory 2>/dev/null & pid=\$!
            for _ in \$(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/7599) 2>/dev/null && break; sleep 0.1; done
            for rate in 20000 50000 80000; do
                echo \"== open loop: \$rate PUTs/s, 64 connections\"
                \"$dir/put_openloop\" --addr 127.0.0.1:7599 --rate \$rate --connections 64 --seconds \${OPENLOOP_S:-10}
            done
            kill -TERM \$pid; wait \$pid" ;;
        cluster) PUNCTUAL_BIN=$(readlink -f "$dir/punctual") part cluster 170 perf/drills/cluster.sh 1 ;;
        # The pending bench's data goes under target/pending-bench, on the disk, not under OUT.
        pending) part pending "${PENDING_LIMIT:-570}" \
            "$dir/pending" --timers "${PENDING_TIMERS:-100000000}" --shards "${PENDING_SHARDS:-2}" ;;
        *)
            echo "unknown part: $name" >&2
            exit 2
            ;;
        esac
    done
}

case $mode in
pack) pack ;;
run) run "$@" ;;
*)
    echo "usage: perf/prebuilt.sh pack DIR | run DIR OUT" >&2
    exit 2
    ;;
esac
