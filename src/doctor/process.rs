//! Process checks: the settings a process inherits from whatever starts it.
//!
//! Owns `process.timerslack` (`/proc/self/timerslack_ns`). On a live host this is the
//! doctor's own value, which a service started the same way (same shell, same systemd
//! unit settings) inherits; run the doctor from the unit's `ExecStartPre=` to see the
//! service's own.

use super::host::Host;
use super::report::{Check, Group};

/// The kernel's default timer slack; more than this means something raised it.
pub const DEFAULT_SLACK_NS: u64 = 50_000;

const WHY_SLACK: &str = "the kernel may delay a sleeping thread's wake-up by its timer slack \
    (50 us by default) to batch wake-ups. punctual sets 1 ns on each shard thread \
    (PR_SET_TIMERSLACK), so the inherited value reaches only its other threads, and the \
    shards too if that call is refused (a seccomp filter); a slack raised above the default \
    (a power-saving profile, a unit's TimerSlackNSec) says the environment works against wake-up precision.";

pub fn checks(host: &Host) -> Vec<Check> {
    vec![timer_slack(host)]
}

fn timer_slack(host: &Host) -> Check {
    const ID: &str = "process.timerslack";
    const FILE: &str = "/proc/self/timerslack_ns";
    let fix = "set `TimerSlackNSec=1` in the unit (see tuning/punctual.service) and drop whatever \
               raised it (a tuned/power profile, a parent process's prctl); real-time threads \
               (CPUSchedulingPolicy=fifo) have no slack"
        .to_owned();
    let value = match host.read_value(FILE) {
        Ok(value) => value,
        Err(e) => return Check::warn(ID, Group::Process, format!("unknown: {e}"), WHY_SLACK, fix),
    };
    match value.parse::<u64>() {
        Ok(ns) if ns <= DEFAULT_SLACK_NS => Check::pass(
            ID,
            Group::Process,
            format!("inherited timer slack is {ns} ns ({FILE}); shard threads set their own 1 ns"),
            WHY_SLACK,
        ),
        Ok(ns) => Check::warn(
            ID,
            Group::Process,
            format!("inherited timer slack is {ns} ns ({FILE}), above the kernel's default {DEFAULT_SLACK_NS} ns"),
            WHY_SLACK,
            fix,
        ),
        Err(_) => Check::warn(ID, Group::Process, format!("unknown: {FILE} holds {value:?}"), WHY_SLACK, fix),
    }
}
