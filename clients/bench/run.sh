#!/usr/bin/env bash
# PUTs per second through each client and through raw HTTP in the same language (net/http,
# httpx, fetch), on one connection and on 16, against one release binary on the in-memory
# store (2 shards), so that the client's own overhead shows. Each variant runs SECONDS (3),
# three times, alternated; the JSON lines go to stdout and a table of medians to stderr: PUTs
# per second, and the benchmark process's CPU per PUT (µs), which a loaded host disturbs less.
#
#   clients/bench/run.sh [SECONDS]
#
# Needs what clients/test installs (run it once first).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-3}"
bin="${PUNCTUAL_BIN:-target/release/punctual}"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" serve --listen "127.0.0.1:$port" --store memory --shards 2 --pinning none --spin-us 0 >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
url="http://127.0.0.1:$port"
out=$(mktemp)
(cd clients/go && go run ./cmd/putbench "$url" "${seconds}s") | tee -a "$out"
(cd clients/python && .venv/bin/python3 examples/putbench.py "$url" "$seconds") | tee -a "$out"
(cd clients/typescript && npm run --silent build && node examples/putbench.mjs "$url" "$seconds") | tee -a "$out"
python3 - "$out" >&2 <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[(r["lang"], r["kind"], r["conns"])].append(r)
print("| client | PUT/s, 1 conn: client / raw | PUT/s, 16 conns: client / raw | CPU µs per PUT, 1 conn: client / raw | CPU µs per PUT, 16 conns: client / raw |")
print("|---|---|---|---|---|")
for lang in ("go", "python", "typescript"):
    cells = []
    for field, fmt in (("puts_per_s", "{:,.0f}"), ("cpu_us_per_put", "{:,.0f}")):
        for conns in (1, 16):
            c, r = (statistics.median(x[field] for x in runs[(lang, k, conns)]) for k in ("client", "raw"))
            cells.append(f"{fmt.format(c)} / {fmt.format(r)}")
    print(f"| {lang} | " + " | ".join(cells) + " |")
PY
rm -f "$out"
