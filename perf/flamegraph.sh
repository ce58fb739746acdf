#!/usr/bin/env bash
# perf/flamegraph.sh: record a CPU flamegraph of a running punctual server or of a command.
#
#   perf/flamegraph.sh --pid PID [--seconds N] [options]     a running server
#   perf/flamegraph.sh [options] -- COMMAND [ARGS...]        a bench or any command
#
# Options:
#   --out FILE.svg        where the flamegraph goes (default: flamegraph.svg); the folded
#                         stacks are kept beside it as FILE.folded (for inferno-diff-folded)
#   --seconds N           how long to record a --pid (default: 10)
#   --freq HZ             samples per second per CPU (default: 999)
#   --call-graph MODE     fp (default; build with -C force-frame-pointers=yes) or dwarf
#   --title TEXT          the flamegraph's title
#
# It samples the software event cpu-clock (hardware counters are often missing in VMs)
# with perf record -g, folds the stacks with inferno-collapse-perf and draws them with
# inferno-flamegraph; inferno is installed with `cargo install inferno` when missing
# (set PUNCTUAL_NO_INSTALL=1 to forbid that). PERF names the perf binary (default: perf).
#
# It never writes an SVG that does not come from real samples. Exit status: 0 done,
# 2 usage, 3 perf missing or unable to record, 4 inferno missing, 5 nothing recorded or
# rendering failed.

set -euo pipefail

PERF="${PERF:-perf}"
out="flamegraph.svg" seconds=10 freq=999 call_graph=fp title="" pid=""
cmd=()

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
fail() { local code="$1"; shift; printf 'flamegraph.sh: %s\n' "$@" >&2; exit "$code"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --pid) [ $# -ge 2 ] || fail 2 "--pid needs a process id"; pid="$2"; shift 2 ;;
        --seconds) [ $# -ge 2 ] || fail 2 "--seconds needs a number"; seconds="$2"; shift 2 ;;
        --freq) [ $# -ge 2 ] || fail 2 "--freq needs a number"; freq="$2"; shift 2 ;;
        --call-graph) [ $# -ge 2 ] || fail 2 "--call-graph needs fp or dwarf"; call_graph="$2"; shift 2 ;;
        --out|-o) [ $# -ge 2 ] || fail 2 "--out needs a file name"; out="$2"; shift 2 ;;
        --title) [ $# -ge 2 ] || fail 2 "--title needs a text"; title="$2"; shift 2 ;;
        -h|--help) usage 0 ;;
        --) shift; cmd=("$@"); break ;;
        *) echo "flamegraph.sh: unknown argument: $1" >&2; usage ;;
    esac
done

if [ -n "$pid" ] && [ ${#cmd[@]} -gt 0 ]; then fail 2 "give either --pid or -- COMMAND, not both"; fi
if [ -z "$pid" ] && [ ${#cmd[@]} -eq 0 ]; then fail 2 "nothing to record: give --pid PID or -- COMMAND [ARGS...]"; fi
[[ "$seconds" =~ ^[0-9]+([.][0-9]+)?$ ]] || fail 2 "--seconds must be a number, not '$seconds'"
[[ "$freq" =~ ^[0-9]+$ ]] || fail 2 "--freq must be a whole number, not '$freq'"
case "$call_graph" in fp|dwarf) ;; *) fail 2 "--call-graph must be fp or dwarf, not '$call_graph'" ;; esac
if [ -n "$pid" ]; then
    [[ "$pid" =~ ^[0-9]+$ ]] && [ -d "/proc/$pid" ] || fail 2 "no process with pid '$pid'"
fi
case "$out" in *.svg) ;; *) fail 2 "--out must end in .svg, not '$out'" ;; esac
folded="${out%.svg}.folded"

work=$(mktemp -d "${TMPDIR:-/tmp}/punctual-flamegraph.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 1. perf must exist and be allowed to record here.
if ! command -v "$PERF" >/dev/null 2>&1; then
    fail 3 "perf is not installed ('$PERF' not found), so no flamegraph can be recorded." \
        "Install it: Debian 'apt install linux-perf', Ubuntu 'apt install linux-tools-\$(uname -r)', Fedora/RHEL 'dnf install perf'. No flamegraph was written."
fi
if ! "$PERF" record -e cpu-clock -g -o "$work/probe.data" -- true > "$work/probe.log" 2>&1; then
    paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo '?')
    fail 3 "perf is installed but cannot record on this machine (perf record -e cpu-clock failed):" \
        "$(tail -n 5 "$work/probe.log" | sed 's/^/    /')" \
        "kernel.perf_event_paranoid is $paranoid: as root, 'sysctl -w kernel.perf_event_paranoid=1' (or -1) allows it;" \
        "in a container, perf needs CAP_PERFMON (or CAP_SYS_ADMIN) and a seccomp profile that allows perf_event_open." \
        "No flamegraph was written."
fi

# 2. inferno draws the graph; install it once if it is missing.
find_tool() {
    if command -v "$1" >/dev/null 2>&1; then command -v "$1"
    elif [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/$1" ]; then echo "${CARGO_HOME:-$HOME/.cargo}/bin/$1"
    else return 1; fi
}
if ! find_tool inferno-flamegraph >/dev/null || ! find_tool inferno-collapse-perf >/dev/null; then
    if [ "${PUNCTUAL_NO_INSTALL:-0}" = 1 ] || ! command -v cargo >/dev/null 2>&1; then
        fail 4 "inferno (inferno-collapse-perf, inferno-flamegraph) is not installed." \
            "Install it with 'cargo install inferno' and re-run. No flamegraph was written."
    fi
    echo "flamegraph.sh: installing inferno with 'cargo install inferno --locked' (once)..." >&2
    cargo install inferno --locked >&2 || fail 4 "'cargo install inferno' failed; no flamegraph was written."
fi
collapse=$(find_tool inferno-collapse-perf) || fail 4 "inferno-collapse-perf not found after installing inferno"
flamegraph=$(find_tool inferno-flamegraph) || fail 4 "inferno-flamegraph not found after installing inferno"

# 3. Record.
call_graph_args=(-g)
# shellcheck disable=SC2054  # "dwarf,16384" is one argument: mode and stack dump size
[ "$call_graph" = dwarf ] && call_graph_args=(--call-graph dwarf,16384)
if [ -n "$pid" ]; then
    echo "flamegraph.sh: recording pid $pid for $seconds s at $freq Hz (cpu-clock, $call_graph stacks)" >&2
    [ -n "$title" ] || title="punctual pid $pid, $seconds s, cpu-clock $freq Hz"
    "$PERF" record -e cpu-clock -F "$freq" "${call_graph_args[@]}" -p "$pid" -o "$work/perf.data" -- sleep "$seconds" \
        > "$work/record.log" 2>&1 || { cat "$work/record.log" >&2; fail 3 "perf record -p $pid failed; no flamegraph was written."; }
else
    echo "flamegraph.sh: recording: ${cmd[*]} (cpu-clock $freq Hz, $call_graph stacks)" >&2
    [ -n "$title" ] || title="${cmd[*]}"
    status=0
    "$PERF" record -e cpu-clock -F "$freq" "${call_graph_args[@]}" -o "$work/perf.data" -- "${cmd[@]}" 2> "$work/record.log" || status=$?
    if [ ! -s "$work/perf.data" ]; then
        cat "$work/record.log" >&2
        fail 3 "perf record wrote no data; no flamegraph was written."
    fi
    [ "$status" = 0 ] || echo "flamegraph.sh: note: the command exited with status $status; drawing what was sampled" >&2
fi

# 4. Fold and draw; the SVG appears only when there were samples and inferno succeeded.
"$PERF" script -i "$work/perf.data" > "$work/perf.script" 2> "$work/script.log" \
    || { cat "$work/script.log" >&2; fail 5 "perf script failed; no flamegraph was written."; }
"$collapse" < "$work/perf.script" > "$work/stacks.folded" \
    || fail 5 "inferno-collapse-perf failed; no flamegraph was written."
if [ ! -s "$work/stacks.folded" ]; then
    fail 5 "perf recorded no samples (was the process idle, or did the command exit at once?); no flamegraph was written."
fi
"$flamegraph" --title "$title" < "$work/stacks.folded" > "$work/graph.svg" \
    || fail 5 "inferno-flamegraph failed; no flamegraph was written."
[ -s "$work/graph.svg" ] || fail 5 "inferno-flamegraph drew nothing; no flamegraph was written."

mkdir -p "$(dirname "$out")"
cp "$work/stacks.folded" "$folded"
mv "$work/graph.svg" "$out"
# cpu-clock weights each sample by its period in nanoseconds.
sampled_ms=$(awk '{ n += $NF } END { printf "%d", n / 1000000 }' "$folded")
echo "flamegraph.sh: ${sampled_ms} ms of CPU time sampled -> $out (folded stacks: $folded)" >&2
