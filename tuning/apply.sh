#!/usr/bin/env bash
# tuning/apply.sh: apply punctual's runtime host tuning to the shard cores, and print
# the kernel command line for what needs a reboot. See tuning/README.md for the why.
#
#   tuning/apply.sh --cores LIST [--housekeeping LIST] [--dry-run]
#                   [--skip governor,cstates,irq,thp]
#
# Runtime changes (lost at reboot; run this from a oneshot unit to keep them):
#   governor  performance on each shard core        (cpuN/cpufreq/scaling_governor)
#   cstates   idle states over 10 us disabled on the shard cores (cpuN/cpuidle/stateK/disable)
#   irq       every IRQ that may run on a shard core moved to the housekeeping cores
#             (/proc/irq/N/smp_affinity_list, /proc/irq/default_smp_affinity)
#   thp       transparent huge pages set to madvise (/sys/kernel/mm/transparent_hugepage/enabled)
#
# --dry-run prints every change it would make and writes nothing.
# PUNCTUAL_SYSROOT (default: empty, meaning /) is prefixed to every /sys and /proc path,
# so the script can be run against a copy of those trees (the tests do).
#
# Exit status: 0 all applied (or nothing to do), 1 some writes failed, 2 usage error.

set -euo pipefail

ROOT="${PUNCTUAL_SYSROOT:-}"
ROOT="${ROOT%/}"
DEEP_CSTATE_LATENCY_US=10

usage() {
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit "${1:-2}"
}
die() { echo "apply.sh: $*" >&2; exit 2; }

cores_arg="" housekeeping_arg="" dry_run=0 skip=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cores) [ $# -ge 2 ] || die "--cores needs a CPU list"; cores_arg="$2"; shift 2 ;;
        --cores=*) cores_arg="${1#*=}"; shift ;;
        --housekeeping) [ $# -ge 2 ] || die "--housekeeping needs a CPU list"; housekeeping_arg="$2"; shift 2 ;;
        --housekeeping=*) housekeeping_arg="${1#*=}"; shift ;;
        --skip) [ $# -ge 2 ] || die "--skip needs a list"; skip="$2"; shift 2 ;;
        --skip=*) skip="${1#*=}"; shift ;;
        --dry-run|-n) dry_run=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "apply.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$cores_arg" ] || { echo "apply.sh: --cores LIST is required (the cores given to punctual serve --cores)" >&2; usage; }

# expand_list "0-3,8" -> "0 1 2 3 8"; dies on anything else.
expand_list() {
    local list="$1" part a b range parts=() found=()
    [[ "$list" =~ ^[0-9,-]+$ ]] || die "not a CPU list: '$list' (expected e.g. 2-5,8)"
    IFS=',' read -ra parts <<< "$list"
    for part in "${parts[@]}"; do
        [ -n "$part" ] || continue
        if [[ "$part" =~ ^([0-9]+)-([0-9]+)$ ]]; then
            a=$((10#${BASH_REMATCH[1]})) b=$((10#${BASH_REMATCH[2]}))
            [ "$a" -le "$b" ] && [ "$b" -lt 8192 ] || die "bad CPU range '$part' in '$list'"
            mapfile -t range < <(seq "$a" "$b")
            found+=("${range[@]}")
        elif [[ "$part" =~ ^[0-9]+$ ]]; then
            found+=($((10#$part)))
        else
            die "bad CPU list element '$part' in '$list'"
        fi
    done
    [ ${#found[@]} -gt 0 ] || return 0
    printf '%s\n' "${found[@]}" | sort -nu | tr '\n' ' '
}

# compact_list "0 1 2 3 8" -> "0-3,8"
compact_list() {
    local out="" start="" prev="" cpu
    for cpu in $1; do
        if [ -z "$start" ]; then start=$cpu prev=$cpu; continue; fi
        if [ "$cpu" -eq $((prev + 1)) ]; then prev=$cpu; continue; fi
        out+="${out:+,}$start$([ "$start" = "$prev" ] || echo "-$prev")"
        start=$cpu prev=$cpu
    done
    [ -z "$start" ] || out+="${out:+,}$start$([ "$start" = "$prev" ] || echo "-$prev")"
    echo "$out"
}

in_set() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
skipped() { case ",$skip," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# hex_mask "0 1" -> "3": the format of /proc/irq/default_smp_affinity (32-bit groups).
hex_mask() {
    local cpus="$1" max=0 cpu groups g val out=""
    for cpu in $cpus; do [ "$cpu" -gt "$max" ] && max=$cpu; done
    groups=$((max / 32 + 1))
    for ((g = groups - 1; g >= 0; g--)); do
        val=0
        for cpu in $cpus; do
            [ $((cpu / 32)) -eq "$g" ] && val=$((val | (1 << (cpu % 32))))
        done
        if [ -z "$out" ]; then out=$(printf '%x' "$val"); else out+=$(printf ',%08x' "$val"); fi
    done
    echo "$out"
}

failures=0
changes=0

# write_value PATH VALUE WHAT: the only place that writes. In --dry-run it only prints.
write_value() {
    local path="$1" value="$2" what="$3" old
    old=$(cat "$path" 2>/dev/null | tr -d '\n' || true)
    changes=$((changes + 1))
    if [ "$dry_run" = 1 ]; then
        echo "  would set $what: $old -> $value   ($path)"
        return 0
    fi
    if { printf '%s\n' "$value" > "$path"; } 2>/dev/null; then
        echo "  set $what: $old -> $value"
    else
        echo "  FAILED to set $what to $value ($path): the kernel refused the write" >&2
        failures=$((failures + 1))
        return 1
    fi
}

online_file="$ROOT/sys/devices/system/cpu/online"
[ -r "$online_file" ] || die "cannot read $online_file (is PUNCTUAL_SYSROOT right?)"
online=$(expand_list "$(tr -d ' \n' < "$online_file")")
cores=$(expand_list "$cores_arg")
[ -n "${cores// /}" ] || die "--cores '$cores_arg' names no CPU"
for cpu in $cores; do in_set "$cpu" "$online" || die "CPU $cpu in --cores is not online (online: $(compact_list "$online"))"; done
if [ -n "$housekeeping_arg" ]; then
    housekeeping=$(expand_list "$housekeeping_arg")
    for cpu in $housekeeping; do in_set "$cpu" "$cores" && die "CPU $cpu is both a shard core and a housekeeping core"; done
else
    housekeeping=""
    for cpu in $online; do in_set "$cpu" "$cores" || housekeeping+="$cpu "; done
fi
[ -n "${housekeeping// /}" ] || die "--cores $cores_arg leaves no housekeeping core: keep at least one core for the kernel, IRQs and other processes"
cores_list=$(compact_list "$cores")
hk_list=$(compact_list "$housekeeping")

if [ "$dry_run" = 0 ] && [ -z "$ROOT" ] && [ "$(id -u)" != 0 ]; then
    die "writing /sys and /proc needs root: run with sudo, or with --dry-run to see the changes"
fi

echo "punctual tuning: shard cores $cores_list, housekeeping cores $hk_list$([ "$dry_run" = 1 ] && echo ' (dry run: nothing is written)')"

if ! skipped governor; then
    echo "cpufreq governor -> performance on the shard cores"
    for cpu in $cores; do
        gov="$ROOT/sys/devices/system/cpu/cpu$cpu/cpufreq/scaling_governor"
        if [ ! -e "$gov" ]; then
            echo "  cpu$cpu: no cpufreq (firmware or hypervisor sets the frequency: use the BIOS performance profile)"
            continue
        fi
        avail=$(cat "$(dirname "$gov")/scaling_available_governors" 2>/dev/null || echo performance)
        if ! in_set performance "$avail"; then
            echo "  cpu$cpu: the driver offers no performance governor (has: $avail)"
        elif [ "$(cat "$gov" 2>/dev/null)" != performance ]; then
            write_value "$gov" performance "cpu$cpu governor" || true
        fi
    done
fi

if ! skipped cstates; then
    echo "idle states over ${DEEP_CSTATE_LATENCY_US} us -> disabled on the shard cores"
    for cpu in $cores; do
        for state in "$ROOT/sys/devices/system/cpu/cpu$cpu/cpuidle"/state*; do
            [ -e "$state/disable" ] || continue
            latency=$(cat "$state/latency" 2>/dev/null || echo 0)
            [[ "$latency" =~ ^[0-9]+$ ]] || continue
            if [ "$latency" -gt "$DEEP_CSTATE_LATENCY_US" ] && [ "$(cat "$state/disable")" != 1 ]; then
                write_value "$state/disable" 1 "cpu$cpu $(cat "$state/name" 2>/dev/null || basename "$state") ($latency us) disable" || true
            fi
        done
    done
fi

if ! skipped irq; then
    echo "IRQ affinity -> housekeeping cores $hk_list"
    for dir in "$ROOT/proc/irq"/[0-9]*; do
        file="$dir/smp_affinity_list"
        [ -e "$file" ] || continue
        current=$(tr -d ' \n' < "$file" 2>/dev/null || true)
        [[ "$current" =~ ^[0-9,-]+$ ]] || continue
        overlap=0
        for cpu in $(expand_list "$current"); do in_set "$cpu" "$cores" && overlap=1 && break; done
        [ "$overlap" = 1 ] || continue
        write_value "$file" "$hk_list" "IRQ $(basename "$dir") affinity" \
            || echo "  (IRQ $(basename "$dir") is probably driver-managed: boot with isolcpus=managed_irq,... instead)" >&2
    done
    default="$ROOT/proc/irq/default_smp_affinity"
    mask=$(hex_mask "$housekeeping")
    # Compare without leading zero groups: the kernel prints "3" where we may write "00000003".
    # shellcheck disable=SC2001
    if [ -e "$default" ] && [ "$(tr -d '\n' < "$default" | sed 's/^[0,]*//')" != "$(echo "$mask" | sed 's/^[0,]*//')" ]; then
        write_value "$default" "$mask" "default IRQ affinity mask" || true
    fi
    for comm in "$ROOT/proc"/[0-9]*/comm; do
        if [ "$(cat "$comm" 2>/dev/null)" = irqbalance ]; then
            echo "  irqbalance is running and will move IRQs back: set IRQBALANCE_BANNED_CPULIST=$cores_list"
            echo "  in /etc/default/irqbalance (or /etc/sysconfig/irqbalance) and restart it"
            break
        fi
    done
fi

if ! skipped thp; then
    echo "transparent huge pages -> madvise"
    thp="$ROOT/sys/kernel/mm/transparent_hugepage/enabled"
    if [ ! -e "$thp" ]; then
        echo "  no $thp: kernel without THP, nothing to do"
    elif ! grep -Eq '\[(madvise|never)\]|^(madvise|never)$' "$thp"; then
        write_value "$thp" madvise "THP enabled" || true
    fi
fi

cat <<MSG

Reboot-only changes: add to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub,
then update-grub or grub2-mkconfig -o /boot/grub2/grub.cfg, and reboot):

  isolcpus=managed_irq,domain,$cores_list nohz_full=$cores_list rcu_nocbs=$cores_list irqaffinity=$hk_list transparent_hugepage=madvise

Optional, read tuning/README.md first:
  intel_idle.max_cstate=1 processor.max_cstate=1   caps C-states on every core (power cost)
  clocksource=tsc tsc=reliable                     only where 'punctual doctor' shows an invariant TSC

Start the service with the same cores: punctual serve --cores $cores_list
(tuning/punctual.service: CPUAffinity, LimitMEMLOCK, TimerSlackNSec; 'punctual doctor --cores $cores_list' checks it all).
MSG

if [ "$dry_run" = 1 ]; then
    echo "dry run: $changes change(s) would be made; nothing was written."
elif [ "$failures" -gt 0 ]; then
    echo "$changes change(s) attempted, $failures failed (see above)." >&2
    exit 1
else
    echo "$changes change(s) applied."
fi
