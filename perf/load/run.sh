#!/usr/bin/env bash
# Load measurement of `punctual serve` (in-memory store, 2 shards) with wrk (Debian package).
# Usage: perf/load/run.sh [duration, default 10s]
# Starts its own server on 127.0.0.1:7599, runs: peak keep-alive PUTs, PUTs paced to about
# half of that, batch POSTs; prints wrk's reports and the server's own request metrics.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-10s}
ADDR=127.0.0.1:7599
command -v wrk >/dev/null || { echo "wrk is not installed: apt-get install -y wrk" >&2; exit 1; }
cargo build --release --quiet
target/release/punctual serve --listen "$ADDR" --shards 2 2>/tmp/punctual-load.log &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://$ADDR/healthz" >/dev/null && break; sleep 0.1; done
echo "== host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== peak: keep-alive PUTs"
wrk -t2 -c64 -d"$DUR" --latency -s perf/load/put.lua "http://$ADDR"
echo "== paced: 100 connections, 2 ms pause each (at most 50,000 requests/s)"
PUNCTUAL_DELAY_MS=2 wrk -t2 -c100 -d"$DUR" --latency -s perf/load/put.lua "http://$ADDR"
echo "== batch POSTs, 1,000 timers each"
wrk -t2 -c8 -d"$DUR" --latency -s perf/load/batch.lua "http://$ADDR"
echo "== pending timers after the runs"
curl -s "http://$ADDR/metrics" | grep '^punctual_timers_pending'
