//! IRQ-affinity check: may device interrupts land on a shard core?
//!
//! Owns `cores.irq`: every `/proc/irq/N/smp_affinity_list` is compared with the shard
//! cores; names come from `/proc/interrupts` when it is readable.

use std::collections::HashMap;

use super::cpulist::CpuSet;
use super::report::{Check, Group};
use super::Context;

const WHY_IRQ: &str = "an interrupt handled on a shard core (a NIC queue, a disk, a timer) \
    preempts the shard for microseconds to milliseconds, and its softirq work can follow; \
    a fire that falls due meanwhile is late by that much.";

/// How many offending IRQs the report names before it summarises.
const SHOWN: usize = 10;

pub fn checks(ctx: &Context) -> Vec<Check> {
    vec![irq_affinity(ctx)]
}

fn irq_affinity(ctx: &Context) -> Check {
    const ID: &str = "cores.irq";
    let housekeeping = ctx
        .online
        .as_ref()
        .map(|o| o.difference(&ctx.cores))
        .unwrap_or_default();
    let hk = if housekeeping.is_empty() {
        "HOUSEKEEPING".to_owned()
    } else {
        housekeeping.to_string()
    };
    let fix = format!(
        "`tuning/apply.sh --cores {cores}` (writes {hk} to each /proc/irq/N/smp_affinity_list), or per IRQ \
         `echo {hk} > /proc/irq/N/smp_affinity_list`; keep irqbalance off the shard cores with \
         IRQBALANCE_BANNED_CPULIST={cores} in /etc/default/irqbalance; at boot: `irqaffinity={hk}` and \
         `isolcpus=managed_irq,...` for driver-managed queues",
        cores = ctx.cores
    );
    let irqs = match ctx.host.list_dir("/proc/irq") {
        Ok(names) => names,
        Err(e) => return Check::warn(ID, Group::ShardCores, format!("unknown: {e}"), WHY_IRQ, fix),
    };
    let names = irq_names(ctx);
    let mut total = 0;
    let mut offending = Vec::new();
    let mut unreadable = 0;
    for irq in irqs
        .iter()
        .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
    {
        total += 1;
        let affinity = ctx
            .host
            .read(&format!("/proc/irq/{irq}/smp_affinity_list"))
            .map_err(|e| e.to_string())
            .and_then(|text| CpuSet::parse(&text));
        match affinity {
            Ok(cpus) => {
                let overlap = cpus.intersection(&ctx.cores);
                if !overlap.is_empty() {
                    let name = names
                        .get(irq.as_str())
                        .map(|n| format!(" {n}"))
                        .unwrap_or_default();
                    offending.push(format!("{irq}{name} -> {cpus}"));
                }
            }
            Err(_) => unreadable += 1,
        }
    }
    if total == 0 {
        return Check::warn(
            ID,
            Group::ShardCores,
            "unknown: /proc/irq lists no IRQs".to_owned(),
            WHY_IRQ,
            fix,
        );
    }
    let unreadable_note = if unreadable > 0 {
        format!(" ({unreadable} smp_affinity_list files unreadable)")
    } else {
        String::new()
    };
    if offending.is_empty() {
        let found = format!(
            "none of {total} IRQs may run on shard cores {}{unreadable_note}",
            ctx.cores
        );
        return Check::pass(ID, Group::ShardCores, found, WHY_IRQ);
    }
    let count = offending.len();
    let mut shown: Vec<String> = offending.into_iter().take(SHOWN).collect();
    if count > SHOWN {
        shown.push(format!("and {} more", count - SHOWN));
    }
    let found = format!(
        "{count} of {total} IRQs may run on shard cores {}: {}{unreadable_note}",
        ctx.cores,
        shown.join(", ")
    );
    Check::warn(ID, Group::ShardCores, found, WHY_IRQ, fix)
}

/// IRQ number to device name, from the last column of `/proc/interrupts`; empty when
/// the file cannot be read (names only decorate the report).
fn irq_names(ctx: &Context) -> HashMap<String, String> {
    let Ok(text) = ctx.host.read("/proc/interrupts") else {
        return HashMap::new();
    };
    text.lines()
        .filter_map(|line| {
            let (irq, rest) = line.trim_start().split_once(':')?;
            if !irq.chars().all(|c| c.is_ascii_digit()) || irq.is_empty() {
                return None;
            }
            let name = rest.split_whitespace().last()?;
            Some((irq.to_owned(), name.to_owned()))
        })
        .collect()
}
