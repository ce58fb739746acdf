#!/usr/bin/env bash
# Load measurement of `punctual serve` (2 shards) with wrk (Debian package) and the open-loop
# generator `perf/probes/put_openloop.rs`.
# Usage: perf/load/run.sh [duration, default 10s] [store, default memory]
# Starts its own server on 127.0.0.1:7599, runs: peak keep-alive PUTs (closed loop, wrk),
# open-loop PUTs at 20,000/s and 50,000/s (latency from each request's due time, so a stall
# is not hidden by coordinated omission), batch POSTs; prints the reports and the pending count.
# The default store is memory: the figures are the HTTP path's and the shards'; with
# `journal` or `redis`, every 2xx also waits for the store's write.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-10s}
STORE=${2:-memory}
ADDR=127.0.0.1:7599
DATA=$(mktemp -d)
command -v wrk >/dev/null || { echo "wrk is not installed: apt-get install -y wrk" >&2; exit 1; }
cargo build --release --quiet --bin punctual --example put_openloop
target/release/punctual serve --listen "$ADDR" --shards 2 --store "$STORE" --data-dir "$DATA" 2>/tmp/punctual-load.log &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do curl -sf "http://$ADDR/healthz" >/dev/null && break; sleep 0.1; done
echo "== host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== peak: keep-alive PUTs"
wrk -t2 -c64 -d"$DUR" --latency -s perf/load/put.lua "http://$ADDR"
SECS=${DUR%s}
for rate in 20000 50000; do
  echo "== open loop: $rate PUTs/s, 64 connections"
  target/release/examples/put_openloop --addr "$ADDR" --rate "$rate" --connections 64 --seconds "$SECS"
done
echo "== batch POSTs, 1,000 timers each"
wrk -t2 -c8 -d"$DUR" --latency -s perf/load/batch.lua "http://$ADDR"
echo "== pending timers after the runs"
curl -s "http://$ADDR/metrics" | grep '^punctual_timers_pending'
