#!/usr/bin/env bash
# Single PUTs on 2 shards (memory store), with the server's CPU and the client's apart:
#   1. open loop at each rate (perf/probes/put_openloop.rs, latency from each request's due time;
#      it prints its own CPU), with the server's CPU from /proc/PID/stat over the same run;
#   2. with perf installed (Debian: apt-get install -y linux-perf), a system-wide cpu-clock
#      profile of the wrk peak (wrk -t2 -c64, perf/load/put.lua), its samples split by thread
#      name, and for the server's shard threads the share under the socket send and receive
#      paths: on loopback a send also runs the receiving side's TCP input and wakes the reader;
#   3. with perf, a profile of the server alone during an open-loop run at the last rate.
# Usage: perf/load/split.sh [seconds, default 10] [rates, default "20000 50000"] [out dir]
# The server is the one of perf/load/run.sh: `punctual serve --shards 2 --store memory`, with
# the service's own pinning and spin. perf's data and reports are kept in the out dir.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-10}
RATES=${2:-"20000 50000"}
OUT=${3:-$(mktemp -d)}
ADDR=127.0.0.1:7599
mkdir -p "$OUT"
cargo build --release --quiet --bin punctual --example put_openloop
target/release/punctual serve --listen "$ADDR" --shards 2 --store memory 2>"$OUT/server.log" &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://$ADDR/healthz" >/dev/null && break; sleep 0.1; done
HZ=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
load() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg); cpu pressure $(head -1 /proc/pressure/cpu)"; }
echo "== host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(load)"
PROFILED=${RATES##* }
RECORDING=
HAVE_PERF=$(command -v perf >/dev/null && echo 1 || echo 0)
for rate in $RATES; do
  if [ "$HAVE_PERF" = 1 ] && [ "$rate" = "$PROFILED" ]; then
    perf record -q -e cpu-clock -F 999 -g -p "$PID" -o "$OUT/openloop-$rate.perf.data" -- sleep "$SECS" 2>/dev/null &
    RECORDING=$!
  fi
  echo "== open loop: $rate PUTs/s, 64 connections, $SECS s"
  before=$(ticks $PID)
  start=$(date +%s.%N)
  target/release/examples/put_openloop --addr "$ADDR" --rate "$rate" --connections 64 --seconds "$SECS"
  end=$(date +%s.%N)
  after=$(ticks $PID)
  awk -v b="$before" -v a="$after" -v hz="$HZ" -v t0="$start" -v t1="$end" -v n="$((rate * SECS))" \
    'BEGIN { c = (a - b) / hz; printf "server CPU %.2f s: %.0f%% of a core, %.2f µs per PUT\n", c, c / (t1 - t0) * 100, c * 1e6 / n }'
  echo "   $(load)"
done
[ -n "$RECORDING" ] && wait "$RECORDING"
if [ "$HAVE_PERF" = 0 ] || ! command -v wrk >/dev/null; then
  echo "perf or wrk is not installed: no profiles" >&2
  exit 0
fi
# Inclusive shares within the filtered threads, for the symbols that say whose work it is.
shares() {
  perf report -i "$1" --children --comms "$2" --percentage relative --sort sym --stdio -g none 2>/dev/null |
    grep -E '\] (__send|__libc_recv|__netif_receive_skb_one_core|tcp_v4_rcv|sock_def_readable|io_uring_submit|__do_sys_io_uring_enter|__x64_sys_membarrier|hyper::.*|punctual::api::routes::.*serve.*|punctual::shard::.*|glommio::sys::uring::Reactor::link_rings_and_sleep)$' |
    head -25 || true
}
echo "== the server alone at $PROFILED PUTs/s (perf record -p, cpu-clock), inclusive, share of its samples:"
shares "$OUT/openloop-$PROFILED.perf.data" punctual-shard-
echo "== profile of the wrk peak: perf record -e cpu-clock -F 999 -a -g, $SECS s"
perf record -q -e cpu-clock -F 999 -a -g -o "$OUT/put-peak.perf.data" -- \
  wrk -t2 -c64 -d"${SECS}s" -s perf/load/put.lua "http://$ADDR" >"$OUT/put-peak-wrk.txt" 2>/dev/null
grep -E 'Requests/sec|non-2xx' "$OUT/put-peak-wrk.txt" || true
echo "   $(load)"
echo "-- samples by thread, share of all:"
perf report -i "$OUT/put-peak.perf.data" --no-children --sort comm --stdio -g none 2>/dev/null |
  grep -vE '^#|^$' | head -8 || true
echo "-- the shard threads, inclusive, share of their samples:"
shares "$OUT/put-peak.perf.data" punctual-shard-
