#!/usr/bin/env bash
# Soak test of the real `punctual serve`: steady mixed load for DURATION, sampled every 10 s,
# then a verdict on memory, file descriptors, lateness, request latency and errors.
#
# Usage: perf/soak.sh DURATION [journal|redis] [OUT_DIR]
#   DURATION   90s, 30m, 1h, 1h30m, or a number of seconds
#   journal    (default) the journal store in a fresh temporary --data-dir, fsync always
#   redis      the Redis store on a redis-server this script starts on a free port with a
#              temporary directory (no persistence) and stops at the end; a Redis already
#              running on this host is never used
#   OUT_DIR    default perf/out/soak-<store>-<UTC timestamp>/
#
# Environment:
#   PUNCTUAL_BIN=/path    use this binary instead of `cargo build --release --bin punctual`
#                         and target/release/punctual
#   SOAK_RATE=2000        operations per second, open loop, all connections together
#   SOAK_CONNS=64         keep-alive connections
#   SOAK_BATCH=20         timers per batch POST
#   SOAK_MIX=50,25,20,5   weights of new PUT, reschedule PUT, DELETE, batch POST
#   SOAK_SAMPLE=10        seconds between samples
#   SOAK_SHARDS=2         shards
#   SOAK_PORT=            HTTP port (default: a free one)
#   SOAK_SERVE_ARGS="--pinning none --spin-us 0"
#                         extra `punctual serve` flags; the default suits a shared host (no
#                         pinning, no spinning); on a dedicated host try "--pinning auto"
#   SOAK_VERBOSE=1        print every sample as it is taken
#
# The server runs with the flags above only: PUNCTUAL_* configuration variables of the
# caller's environment are removed so that they cannot change the run.
#
# What it does: starts the server (2 shards, its own port), waits for /healthz, runs
# perf/soak.py (open-loop load from several keep-alive connections: new timers, reschedules,
# cancels and batch POSTs, timers due in 1-30 s so that timers fire all the time), samples
# RSS, fds, threads, pending timers, fire-lateness p99 (from the /metrics histogram deltas,
# interpolated inside the bucket), client-side request p99 (from each request's due time, so
# coordinated omission cannot hide a stall), ops/s and errors. After DURATION it stops the
# load, samples until every timer has fired (at most 60 s), checks that the fired count equals
# the creations minus the cancels the client saw acknowledged, stops the server with SIGTERM
# and expects exit status 0.
#
# Output in OUT_DIR: samples.csv (one row per sample; columns explained in perf/soak.py),
# soak.svg (the plot), summary.json, verdict.txt, errors.log, server.log (and redis.log).
#
# Exit status: 0 clean; 1 request errors or a fired count that does not add up; 2 the server
# died, failed to start or did not exit cleanly; 64 bad usage.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 64; }
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || usage
DURATION=$1
STORE=${2:-journal}
case $STORE in journal|redis) ;; *) echo "soak: store must be journal or redis, not '$STORE'" >&2; exit 64 ;; esac

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
command -v python3 >/dev/null || { echo "soak: python3 is needed" >&2; exit 64; }
python3 -B -c 'import sys; sys.path.insert(0, sys.argv[1]); import soak; soak.parse_duration(sys.argv[2])' \
    "$HERE" "$DURATION" 2>/dev/null \
    || { echo "soak: bad DURATION '$DURATION' (e.g. 90s, 30m, 1h)" >&2; exit 64; }

OUT=${3:-$ROOT/perf/out/soak-$STORE-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [[ -n ${PUNCTUAL_BIN:-} ]]; then
    BIN=$PUNCTUAL_BIN
else
    (cd "$ROOT" && cargo build --release --bin punctual)
    BIN=$ROOT/target/release/punctual
fi
[[ -x $BIN ]] || { echo "soak: $BIN is not an executable" >&2; exit 2; }

SHARDS=${SOAK_SHARDS:-2}
SERVE_ARGS=${SOAK_SERVE_ARGS:---pinning none --spin-us 0}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Exit 0 when process $1 itself holds a listening TCP socket on 127.0.0.1:$2: whatever
# answers on the port must be the process this script started, never a leftover.
owns_port() {
    python3 - "$1" "$2" <<'EOF'
import os, sys
pid, port = sys.argv[1], int(sys.argv[2])
inodes = set()
with open("/proc/net/tcp") as f:
    for line in list(f)[1:]:
        p = line.split()
        if p[3] == "0A" and int(p[1].split(":")[1], 16) == port:
            inodes.add(p[9])
fds = f"/proc/{pid}/fd"
links = {os.readlink(os.path.join(fds, n)) for n in os.listdir(fds)}
sys.exit(0 if any(f"socket:[{i}]" in links for i in inodes) else 1)
EOF
}

TMP=$(mktemp -d /tmp/punctual-soak.XXXXXX)
SERVER_PID= REDIS_PID=
cleanup() {
    local rc=$?
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 150); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ -n $REDIS_PID ]] && kill -0 "$REDIS_PID" 2>/dev/null; then
        kill -TERM "$REDIS_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$REDIS_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

STORE_ARGS=()
AUX=()
if [[ $STORE == redis ]]; then
    command -v redis-server >/dev/null || { echo "soak: redis-server is not installed" >&2; exit 2; }
    RPORT=$(free_port)
    mkdir -p "$TMP/redis"
    redis-server --bind 127.0.0.1 --port "$RPORT" --dir "$TMP/redis" --save '' \
        --appendonly no --daemonize no --logfile "$OUT/redis.log" &
    REDIS_PID=$!
    ok=
    for _ in $(seq 100); do
        if python3 - "$RPORT" <<'EOF' 2>/dev/null; then ok=1; break; fi
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
s.sendall(b"PING\r\n")
sys.exit(0 if s.recv(64).startswith(b"+PONG") else 1)
EOF
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n $ok ]] && owns_port "$REDIS_PID" "$RPORT" \
        || { echo "soak: our redis-server did not start on port $RPORT (see $OUT/redis.log)" >&2; exit 2; }
    STORE_ARGS=(--store redis --redis "redis://127.0.0.1:$RPORT/")
    AUX=(--aux-pid "$REDIS_PID")
else
    STORE_ARGS=(--store journal --data-dir "$TMP/data")
fi

PORT=${SOAK_PORT:-$(free_port)}
UNSET=()
while read -r v; do UNSET+=(-u "$v"); done < <(compgen -e | grep '^PUNCTUAL_' || true)
# shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
env "${UNSET[@]}" "$BIN" serve --listen "127.0.0.1:$PORT" --shards "$SHARDS" "${STORE_ARGS[@]}" \
    $SERVE_ARGS 2>"$OUT/server.log" &
SERVER_PID=$!
echo "soak: $BIN (pid $SERVER_PID) on 127.0.0.1:$PORT, $SHARDS shards, store $STORE, ${SERVE_ARGS}; output in $OUT" >&2

up=
for _ in $(seq 300); do
    if python3 - "$PORT" <<'EOF' 2>/dev/null; then up=1; break; fi
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=1)
c.request("GET", "/healthz")
sys.exit(0 if c.getresponse().status == 200 else 1)
EOF
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
if [[ -n $up ]] && ! owns_port "$SERVER_PID" "$PORT"; then
    echo "soak: port $PORT is answered by another process, not the server this script started" >&2
    up=
fi
if [[ -z $up ]]; then
    echo "soak: the server did not become healthy; its log:" >&2
    tail -20 "$OUT/server.log" >&2
    exit 2
fi

RUN_RC=0
python3 "$HERE/soak.py" run --url "http://127.0.0.1:$PORT" --pid "$SERVER_PID" "${AUX[@]}" \
    --duration "$DURATION" --out "$OUT" --store "$STORE" --shards "$SHARDS" \
    --rate "${SOAK_RATE:-2000}" --conns "${SOAK_CONNS:-64}" --batch "${SOAK_BATCH:-20}" \
    --mix "${SOAK_MIX:-50,25,20,5}" --sample "${SOAK_SAMPLE:-10}" \
    ${SOAK_VERBOSE:+--verbose} || RUN_RC=$?

# Stop the server as an operator would, and keep its exit status.
SERVER_RC=
if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
fi
if wait "$SERVER_PID"; then SERVER_RC=0; else SERVER_RC=$?; fi
SERVER_PID=

python3 "$HERE/soak_plot.py" "$OUT/samples.csv" --out "$OUT/soak.svg" \
    --title "punctual soak: store $STORE, $SHARDS shards, ${SOAK_RATE:-2000} ops/s target, $DURATION" \
    || echo "soak: plotting failed" >&2

VERDICT_RC=0
python3 "$HERE/soak.py" verdict --out "$OUT" --server-exit "$SERVER_RC" \
    --server-log "$OUT/server.log" || VERDICT_RC=$?
echo "soak: samples $OUT/samples.csv, plot $OUT/soak.svg" >&2
if (( VERDICT_RC == 0 && RUN_RC != 0 )); then VERDICT_RC=$RUN_RC; fi
exit "$VERDICT_RC"
