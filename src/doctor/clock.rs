//! Clock checks: is the TSC a clock punctual can read for UTC microseconds?
//!
//! Owns `clock.tsc` (the `constant_tsc`, `nonstop_tsc` and `rdtscp` flags in
//! `/proc/cpuinfo`), `clock.clocksource` (the kernel's current clocksource) and
//! `clock.hypervisor` (a VM, and whether it exposes an invariant TSC).
//!
//! punctual's clock reads the TSC with RDTSCP and maps it to UTC, re-anchoring every
//! 100 ms. That needs a TSC that ticks at one rate in every P- and C-state
//! (`constant_tsc` + `nonstop_tsc`, together "invariant TSC"). Without it the engine falls
//! back to `clock_gettime(CLOCK_REALTIME)`, which is correct but slower, and slower
//! still when the kernel's clocksource is not the TSC (a trap into the kernel per read).

use super::host::Host;
use super::report::{Check, Group};

const WHY_TSC: &str = "punctual reads time with RDTSCP on every shard loop and maps it to UTC; \
    only an invariant TSC (constant_tsc + nonstop_tsc) ticks at one rate through frequency \
    changes and deep sleep. Without it punctual falls back to clock_gettime(CLOCK_REALTIME), \
    which costs more per read and adds jitter.";

const WHY_CLOCKSOURCE: &str = "the anchors punctual takes every 100 ms pair the TSC with \
    CLOCK_REALTIME; when the kernel's clocksource is the TSC that read is a cheap vDSO call \
    and both clocks share one oscillator. Any other clocksource (hpet, acpi_pm, kvm-clock \
    on some hosts) makes clock_gettime slower and, when the kernel marked the TSC unstable, \
    says the TSC itself cannot be trusted.";

const WHY_HYPERVISOR: &str = "in a VM the guest TSC is what the hypervisor shows it; unless the \
    VM exposes invariant TSC (KVM/libvirt `invtsc`) and its vCPUs are pinned, the TSC can \
    change rate or jump (for example on live migration), and vCPU preemption by the host \
    adds lateness that no guest setting can remove.";

/// The flags that every processor in `/proc/cpuinfo` lists (the intersection), or why
/// they could not be read.
pub fn cpu_flags(host: &Host) -> Result<Vec<String>, String> {
    let text = host.read("/proc/cpuinfo").map_err(|e| e.to_string())?;
    let mut common: Option<Vec<String>> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.trim() != "flags" {
            continue;
        }
        let flags: Vec<String> = value.split_whitespace().map(str::to_owned).collect();
        common = Some(match common {
            None => flags,
            Some(prev) => prev.into_iter().filter(|f| flags.contains(f)).collect(),
        });
    }
    common.ok_or_else(|| "/proc/cpuinfo: no `flags` line (not an x86 host, or garbage)".to_owned())
}

pub fn checks(host: &Host) -> Vec<Check> {
    let flags = cpu_flags(host);
    vec![tsc(&flags), clocksource(host), hypervisor(&flags)]
}

fn has(flags: &[String], name: &str) -> bool {
    flags.iter().any(|f| f == name)
}

fn tsc(flags: &Result<Vec<String>, String>) -> Check {
    const ID: &str = "clock.tsc";
    let flags = match flags {
        Ok(flags) => flags,
        Err(e) => {
            return Check::warn(
                ID,
                Group::Clock,
                format!("unknown: {e}"),
                WHY_TSC,
                "run the doctor on the host itself, where /proc/cpuinfo is readable".to_owned(),
            )
        }
    };
    let wanted = ["constant_tsc", "nonstop_tsc", "rdtscp"];
    let missing: Vec<&str> = wanted.iter().copied().filter(|f| !has(flags, f)).collect();
    if missing.is_empty() {
        return Check::pass(
            ID,
            Group::Clock,
            "invariant TSC: constant_tsc, nonstop_tsc and rdtscp present".to_owned(),
            WHY_TSC,
        );
    }
    let fix = if has(flags, "hypervisor") {
        "expose invariant TSC to the VM: libvirt `<cpu mode='host-passthrough'><feature policy='require' name='invtsc'/></cpu>` \
         or QEMU `-cpu host,+invtsc` (this rules out live migration; see tuning/README.md)"
    } else {
        "use a CPU with invariant TSC (every x86-64 server CPU since Intel Nehalem / AMD Zen has it); \
         check that the BIOS does not hide it, or accept the clock_gettime fallback"
    };
    Check::warn(
        ID,
        Group::Clock,
        format!("/proc/cpuinfo lacks {}", missing.join(", ")),
        WHY_TSC,
        fix.to_owned(),
    )
}

fn clocksource(host: &Host) -> Check {
    const ID: &str = "clock.clocksource";
    const DIR: &str = "/sys/devices/system/clocksource/clocksource0";
    let current = match host.read_value(&format!("{DIR}/current_clocksource")) {
        Ok(current) => current,
        Err(e) => {
            return Check::warn(
                ID,
                Group::Clock,
                format!("unknown: {e}"),
                WHY_CLOCKSOURCE,
                "mount sysfs (it is missing or hidden in this container) and re-run".to_owned(),
            )
        }
    };
    let available = host
        .read_value(&format!("{DIR}/available_clocksource"))
        .unwrap_or_default();
    if current == "tsc" {
        return Check::pass(
            ID,
            Group::Clock,
            "current clocksource is tsc".to_owned(),
            WHY_CLOCKSOURCE,
        );
    }
    let tsc_available = available.split_whitespace().any(|s| s == "tsc");
    let fix = if tsc_available {
        format!(
            "switch now: `echo tsc > {DIR}/current_clocksource`; keep it across reboots with the kernel \
             command line `clocksource=tsc` (add `tsc=reliable` only on hosts with invariant TSC)"
        )
    } else {
        "the kernel has marked the TSC unstable (see `dmesg | grep -i tsc`): on bare metal check the BIOS \
         (disable TSC-resetting power features), in a VM expose invtsc; then boot with `clocksource=tsc`"
            .to_owned()
    };
    let found = if available.is_empty() {
        format!("current clocksource is {current}")
    } else {
        format!("current clocksource is {current} (available: {available})")
    };
    Check::warn(ID, Group::Clock, found, WHY_CLOCKSOURCE, fix)
}

fn hypervisor(flags: &Result<Vec<String>, String>) -> Check {
    const ID: &str = "clock.hypervisor";
    let flags = match flags {
        Ok(flags) => flags,
        Err(e) => {
            return Check::warn(
                ID,
                Group::Clock,
                format!("unknown: {e}"),
                WHY_HYPERVISOR,
                "run the doctor on the host itself, where /proc/cpuinfo is readable".to_owned(),
            )
        }
    };
    if !has(flags, "hypervisor") {
        return Check::pass(
            ID,
            Group::Clock,
            "bare metal (no `hypervisor` flag)".to_owned(),
            WHY_HYPERVISOR,
        );
    }
    if has(flags, "constant_tsc") && has(flags, "nonstop_tsc") {
        return Check::pass(
            ID,
            Group::Clock,
            "VM with invariant TSC exposed (constant_tsc, nonstop_tsc); keep its vCPUs pinned and live migration off"
                .to_owned(),
            WHY_HYPERVISOR,
        );
    }
    Check::warn(
        ID,
        Group::Clock,
        "VM (`hypervisor` flag) without invariant TSC (nonstop_tsc or constant_tsc missing)".to_owned(),
        WHY_HYPERVISOR,
        "pin the vCPUs (libvirt `<cputune><vcpupin vcpu='N' cpuset='M'/>`) and expose invtsc \
         (`<feature policy='require' name='invtsc'/>`, QEMU `-cpu host,+invtsc`); on a cloud, use a \
         dedicated host or bare-metal instance type"
            .to_owned(),
    )
}
