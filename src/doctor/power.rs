//! Power-management checks on the shard cores: cpufreq governor and deep C-states.
//!
//! Owns `cores.governor` (`/sys/devices/system/cpu/cpuN/cpufreq/scaling_governor`) and
//! `cores.cstates` (`/sys/devices/system/cpu/cpuN/cpuidle/stateK/{name,latency,disable}`).
//! A C-state counts as deep when its exit latency exceeds [`DEEP_CSTATE_LATENCY_US`].

use super::report::{Check, Group};
use super::Context;

/// Idle states that take longer than this to leave count as deep. C1 and C1E exit in a
/// few microseconds; C3 and deeper take tens to hundreds.
pub const DEEP_CSTATE_LATENCY_US: u64 = 10;

const WHY_GOVERNOR: &str = "a parked shard core drops to a low frequency under any governor other \
    than `performance`; when the deadline comes it runs the fire path slowly and ramps up \
    over milliseconds, which shows as lateness and as jitter between fires.";

const WHY_CSTATES: &str = "a parked shard core sleeps in the deepest idle state allowed; leaving \
    a deep C-state takes tens to hundreds of microseconds, which adds to lateness unless the \
    spin window (--spin-us) covers it, and a deep sleep can also flush the core's caches.";

pub fn checks(ctx: &Context) -> Vec<Check> {
    vec![governor(ctx), cstates(ctx)]
}

fn cpu_dir(cpu: u32) -> String {
    format!("/sys/devices/system/cpu/cpu{cpu}")
}

fn governor(ctx: &Context) -> Check {
    const ID: &str = "cores.governor";
    let fix = format!(
        "`tuning/apply.sh --cores {0}` (writes `performance` to cpuN/cpufreq/scaling_governor), or \
         `cpupower -c {0} frequency-set -g performance`; in the BIOS choose the maximum-performance profile",
        ctx.cores
    );
    let mut other = Vec::new();
    let mut unknown = Vec::new();
    for cpu in ctx.cores.iter() {
        match ctx
            .host
            .read_value(&format!("{}/cpufreq/scaling_governor", cpu_dir(cpu)))
        {
            Ok(gov) if gov == "performance" => {}
            Ok(gov) => other.push(format!("cpu{cpu}={gov}")),
            Err(_) => unknown.push(cpu),
        }
    }
    if !other.is_empty() {
        let found = format!("governor is not `performance` on {}", other.join(", "));
        return Check::warn(ID, Group::ShardCores, found, WHY_GOVERNOR, fix);
    }
    if !unknown.is_empty() {
        let list: Vec<String> = unknown.iter().map(|c| format!("cpu{c}")).collect();
        let found = format!(
            "no cpufreq governor exposed for {} (no cpufreq driver: the frequency is set by firmware or the hypervisor)",
            list.join(", ")
        );
        let fix = "set the BIOS/UEFI power profile to maximum performance; in a VM, set the host's governor \
                   for the pinned physical cores"
            .to_owned();
        return Check::warn(ID, Group::ShardCores, found, WHY_GOVERNOR, fix);
    }
    Check::pass(
        ID,
        Group::ShardCores,
        format!("governor is `performance` on {}", ctx.cores),
        WHY_GOVERNOR,
    )
}

/// One idle state of one CPU that is deep and enabled.
struct DeepState {
    cpu: u32,
    name: String,
    /// `None` when the `latency` file was unreadable.
    latency_us: Option<u64>,
}

impl DeepState {
    fn describe(&self) -> String {
        match self.latency_us {
            Some(us) => format!("cpu{} {} ({us} us)", self.cpu, self.name),
            None => format!("cpu{} {} (latency unknown)", self.cpu, self.name),
        }
    }
}

fn cstates(ctx: &Context) -> Check {
    const ID: &str = "cores.cstates";
    let fix = format!(
        "now: `tuning/apply.sh --cores {}` (writes 1 to cpuN/cpuidle/stateK/disable for states over \
         {DEEP_CSTATE_LATENCY_US} us), or `cpupower -c {} idle-set -D {DEEP_CSTATE_LATENCY_US}`; across reboots: \
         kernel command line `intel_idle.max_cstate=1 processor.max_cstate=1` (this applies to every core)",
        ctx.cores, ctx.cores
    );
    let mut deep = Vec::new();
    let mut no_driver = Vec::new();
    let mut unknown = Vec::new();
    for cpu in ctx.cores.iter() {
        let dir = format!("{}/cpuidle", cpu_dir(cpu));
        match ctx.host.list_dir(&dir) {
            Ok(states) => deep.extend(deep_states(ctx, cpu, &dir, &states)),
            Err(_) if ctx.host.exists(&cpu_dir(cpu)) => no_driver.push(cpu),
            Err(_) => unknown.push(cpu),
        }
    }
    if !deep.is_empty() {
        let mut listed: Vec<String> = deep.iter().take(8).map(DeepState::describe).collect();
        if deep.len() > 8 {
            listed.push(format!("and {} more", deep.len() - 8));
        }
        let found = format!(
            "deep C-states enabled on shard cores: {}",
            listed.join(", ")
        );
        return Check::warn(ID, Group::ShardCores, found, WHY_CSTATES, fix);
    }
    if !unknown.is_empty() {
        let found = format!("unknown: /sys/devices/system/cpu/cpuN missing for CPUs {unknown:?}");
        return Check::warn(ID, Group::ShardCores, found, WHY_CSTATES, fix);
    }
    let found = if no_driver.len() == ctx.cores.len() {
        "no cpuidle states exposed on the shard cores (no cpuidle driver: idle is HLT, C1)"
            .to_owned()
    } else {
        format!(
            "no idle state deeper than {DEEP_CSTATE_LATENCY_US} us is enabled on {}",
            ctx.cores
        )
    };
    Check::pass(ID, Group::ShardCores, found, WHY_CSTATES)
}

fn deep_states(ctx: &Context, cpu: u32, dir: &str, states: &[String]) -> Vec<DeepState> {
    let mut deep = Vec::new();
    for state in states.iter().filter(|s| s.starts_with("state")) {
        let read = |file: &str| ctx.host.read_value(&format!("{dir}/{state}/{file}"));
        let disabled = read("disable").map(|v| v == "1").unwrap_or(false);
        // An unreadable latency is treated as deep: better a false warning than a missed one.
        let latency_us = read("latency").ok().and_then(|v| v.parse::<u64>().ok());
        if !disabled && latency_us.is_none_or(|us| us > DEEP_CSTATE_LATENCY_US) {
            let name = read("name").unwrap_or_else(|_| state.clone());
            deep.push(DeepState {
                cpu,
                name,
                latency_us,
            });
        }
    }
    deep
}
