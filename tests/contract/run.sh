#!/usr/bin/env bash
# The HTTP contract checked by a tester no one here wrote: schemathesis drives the release
# binary from docs/openapi.yaml (every check, its examples, its boundaries, random valid and
# invalid requests, and request sequences along the document's links), twice: on the default
# store (the journal) with every tenant open, and with a tenants configuration (a token, a
# rate limit, a quota, and a default callback to a receiver that answers 410, so that timers
# become dead letters). 0 failures expected. Both run the journal with `fsync = "everysec"`:
# this is no disk test, and on a busy disk an fdatasync slower than the store's acknowledgement
# timeout makes a PUT `503 store_unavailable` (seen once, seed 7, beside a parallel build),
# which schemathesis rightly counts as a server error.
#
# Usage: tests/contract/run.sh [SEED] [MAX_EXAMPLES]
#   SEED          schemathesis's random seed (default 1, as CI runs it; any other to explore)
#   MAX_EXAMPLES  test cases per operation and phase (default 40)
# Needs the release binary (cargo build --release) and schemathesis in target/test-venv
# (scripts/test --setup installs it); PUNCTUAL_BIN and ST name others.
set -euo pipefail
cd "$(dirname "$0")/../.."
SEED=${1:-1}
EXAMPLES=${2:-40}
BIN=${PUNCTUAL_BIN:-target/release/punctual}
ST=${ST:-target/test-venv/bin/st}
HERE=tests/contract
TOKEN=contract-0123456789abcdef0123456789
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release first" >&2; exit 1; }
[ -x "$ST" ] || { echo "no $ST: scripts/test --setup installs schemathesis" >&2; exit 1; }
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run NAME [serve flags...]: one server, one schemathesis run against it.
run() {
  local name=$1; shift
  local port; port=$(free_port)
  "$BIN" serve --listen "127.0.0.1:$port" --shards 2 --pinning none --spin-us 0 \
    --data-dir "$work/$name-data" "$@" >"$work/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.1
  done
  echo "== schemathesis, $name: seed $SEED, $EXAMPLES examples per operation"
  local rc=0
  SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$HERE" "$ST" --config-file "$ST_CONFIG" \
    run docs/openapi.yaml --url "http://127.0.0.1:$port" --checks all \
    --phases examples,coverage,fuzzing,stateful --seed "$SEED" --max-examples "$EXAMPLES" \
    --generation-database none --no-color --workers 2 --request-timeout 15 \
    -H "Authorization: Bearer $TOKEN" || rc=$?
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  if [ "$rc" -ne 0 ]; then
    echo "schemathesis found failures against the $name server (its log: the last lines)" >&2
    tail -20 "$work/$name.log" >&2
  fi
  return "$rc"
}

# The tenants run's callbacks go to a receiver that answers 410 Gone: each delivery fails for
# good at once, and its timer becomes a dead letter for the dead-letter routes to list,
# re-drive and discard.
rport=$(free_port)
python3 - "$rport" >"$work/receiver.log" 2>&1 <<'PY' &
import http.server, sys
class Gone(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(410)
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Gone).serve_forever()
PY
receiver=$!
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; kill "$receiver" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

status=0
ST_CONFIG="$HERE/schemathesis.toml"
run "default store" --store journal --fsync everysec || status=1
# Tenants the document's examples name (`shop`) meet a token, a rate limit, a quota and a
# default callback; generated tenant names are served too (`open_tenants`), so that generated
# requests reach past admission.
cat >"$work/tenants.toml" <<TOML
metrics_token = "$TOKEN"
open_tenants = true
callback_allow = ["http://127.0.0.1:$rport/"]
[tenants.shop]
callback_url = "http://127.0.0.1:$rport/hook"
token = "$TOKEN"
max_requests_per_s = 200
burst = 200
max_pending = 300
TOML
run "tenants" --store journal --fsync everysec --config "$work/tenants.toml" || status=1
exit "$status"
