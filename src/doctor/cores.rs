//! Shard-core checks: do the cores exist, and are they isolated from the rest of the system?
//!
//! Owns `cores.available` (every `--cores` CPU is online and in the process's affinity
//! mask, which serve requires) and `cores.isolation`
//! (`isolcpus=`, `nohz_full=` and `rcu_nocbs=` on the kernel command line cover the shard
//! cores, and at least one core is left for housekeeping). The parsing of those three
//! kernel parameters lives here too; `tuning/apply.sh` prints the same line.

use super::cpulist::CpuSet;
use super::report::{Check, Group};
use super::Context;

const WHY_ONLINE: &str = "each shard pins itself to one of these cores; serve refuses to start \
    when a core in --cores is offline or outside the CPU affinity it inherits (on a host \
    booted with isolcpus, processes start with only the housekeeping cores).";

const WHY_ISOLATION: &str = "a shard parks until just before its next deadline and then spins; \
    any other thread, kernel worker, RCU callback or scheduler tick that lands on its core \
    delays the fire by its run time (tens of microseconds to milliseconds). isolcpus keeps \
    other tasks off, nohz_full stops the tick while one task runs, rcu_nocbs moves RCU \
    callbacks to housekeeping cores.";

/// The three isolation parameters, in the order the report names them.
const PARAMS: [&str; 3] = ["isolcpus", "nohz_full", "rcu_nocbs"];

/// The kernel command line that isolates `cores`, leaving `housekeeping` for the rest.
pub fn isolation_cmdline(cores: &CpuSet, housekeeping: &CpuSet) -> String {
    let mut line =
        format!("isolcpus=managed_irq,domain,{cores} nohz_full={cores} rcu_nocbs={cores}");
    if !housekeeping.is_empty() {
        line.push_str(&format!(" irqaffinity={housekeeping}"));
    }
    line
}

/// The CPUs named by a kernel command-line parameter's value. `isolcpus` may start with
/// flags (`nohz`, `domain`, `managed_irq`) before its list; `all` means every online CPU.
pub fn kernel_param_cpus(value: &str, online: Option<&CpuSet>) -> Result<CpuSet, String> {
    let list: Vec<&str> = value
        .split(',')
        .filter(|token| !matches!(*token, "nohz" | "domain" | "managed_irq"))
        .collect();
    if list == ["all"] {
        return online
            .cloned()
            .ok_or_else(|| "`all` but the online CPUs are unknown".to_owned());
    }
    CpuSet::parse(&list.join(","))
}

pub fn checks(ctx: &Context) -> Vec<Check> {
    vec![available(ctx), isolation(ctx)]
}

fn available(ctx: &Context) -> Check {
    const ID: &str = "cores.available";
    let Some(online) = &ctx.online else {
        return Check::warn(
            ID,
            Group::ShardCores,
            format!("unknown: {}", ctx.online_error),
            WHY_ONLINE,
            "mount sysfs (it is missing or hidden in this container) and re-run".to_owned(),
        );
    };
    if ctx.cores.is_empty() {
        return Check::fail(
            ID,
            Group::ShardCores,
            "no shard cores to check (--cores is empty)".to_owned(),
            WHY_ONLINE,
            format!("pass --cores with a CPU list taken from the online CPUs {online}"),
        );
    }
    let offline = ctx.cores.difference(online);
    if !offline.is_empty() {
        return Check::fail(
            ID,
            Group::ShardCores,
            format!("--cores {} names CPUs {offline} that are not online (online: {online})", ctx.cores),
            WHY_ONLINE,
            format!("pick --cores from the online CPUs {online}, or bring the CPUs online: `echo 1 > /sys/devices/system/cpu/cpuN/online`"),
        );
    }
    if let Some(allowed) = &ctx.allowed {
        let outside = ctx.cores.difference(allowed);
        if !outside.is_empty() {
            return Check::fail(
                ID,
                Group::ShardCores,
                format!(
                    "shard cores {outside} are outside this process's CPU affinity {allowed} (/proc/self/status Cpus_allowed_list)",
                ),
                WHY_ONLINE,
                format!(
                    "start serve with an affinity that includes the shard cores and a housekeeping core: \
                     systemd `CPUAffinity=` (see tuning/punctual.service), or `taskset -c <housekeeping>,{} punctual serve ...`",
                    ctx.cores
                ),
            );
        }
    }
    let found = match (ctx.cores_given, &ctx.allowed) {
        (true, Some(allowed)) => format!(
            "shard cores {} are online and within this process's affinity {allowed}",
            ctx.cores
        ),
        (true, None) => format!(
            "shard cores {} are online (online: {online}; affinity unknown)",
            ctx.cores
        ),
        (false, _) => format!(
            "no --cores: serve's default puts one shard on each core it may use ({})",
            ctx.cores
        ),
    };
    Check::pass(ID, Group::ShardCores, found, WHY_ONLINE)
}

fn isolation(ctx: &Context) -> Check {
    const ID: &str = "cores.isolation";
    let housekeeping = ctx
        .online
        .as_ref()
        .map(|o| o.difference(&ctx.cores))
        .unwrap_or_default();
    let fix_line = isolation_cmdline(&ctx.cores, &housekeeping);
    let fix = format!(
        "add to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then `update-grub` and reboot):\n\
         {fix_line}\n(`tuning/apply.sh --cores {}` prints this line)",
        ctx.cores
    );
    if ctx.online.is_some() && housekeeping.is_empty() {
        let advice = "leave at least one core for the kernel, IRQs and other processes: pass \
            --cores with all but core 0 (for example) and isolate those";
        return Check::warn(
            ID,
            Group::ShardCores,
            format!("the shard cores {} are all the online cores: no housekeeping core is left to isolate them from", ctx.cores),
            WHY_ISOLATION,
            advice.to_owned(),
        );
    }
    let cmdline = match ctx.host.read("/proc/cmdline") {
        Ok(text) => text,
        Err(e) => {
            return Check::warn(
                ID,
                Group::ShardCores,
                format!("unknown: {e}"),
                WHY_ISOLATION,
                fix,
            )
        }
    };
    let mut gaps = Vec::new();
    for param in PARAMS {
        // The last occurrence wins, as in the kernel.
        let value = cmdline
            .split_whitespace()
            .rev()
            .filter_map(|arg| arg.split_once('='))
            .filter(|(key, _)| *key == param)
            .map(|(_, value)| value)
            .next();
        match value.map(|v| kernel_param_cpus(v, ctx.online.as_ref())) {
            None => gaps.push(format!("no {param}=")),
            Some(Err(e)) => gaps.push(format!("{param}= unreadable ({e})")),
            Some(Ok(cpus)) => {
                let missing = ctx.cores.difference(&cpus);
                if !missing.is_empty() {
                    gaps.push(format!("{param}={cpus} misses {missing}"));
                }
            }
        }
    }
    if gaps.is_empty() {
        let found = format!(
            "/proc/cmdline isolates {} with isolcpus, nohz_full and rcu_nocbs",
            ctx.cores
        );
        return Check::pass(ID, Group::ShardCores, found, WHY_ISOLATION);
    }
    let found = format!(
        "shard cores {} not fully isolated in /proc/cmdline: {}",
        ctx.cores,
        gaps.join("; ")
    );
    Check::warn(ID, Group::ShardCores, found, WHY_ISOLATION, fix)
}

#[cfg(test)]
#[path = "cores_tests.rs"]
mod tests;
