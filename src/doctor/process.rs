//! Process checks: the settings a process inherits from whatever starts it.
//!
//! Owns `process.timerslack` (`/proc/self/timerslack_ns`). On a live host this is the
//! doctor's own value, which a service started the same way (same shell, same systemd
//! unit settings) inherits; run the doctor from the unit's `ExecStartPre=` to see the
//! service's own.

use super::host::Host;
use super::report::{Check, Group};

/// Slack at or below this is treated as none.
pub const MAX_SLACK_NS: u64 = 1_000;

const WHY_SLACK: &str = "the kernel may delay a sleeping thread's wake-up by its timer slack \
    (50 us by default) to batch wake-ups; a shard that parks until its next deadline wakes \
    that much later, which the spin window must then absorb (with --spin-us 0 it is lateness).";

pub fn checks(host: &Host) -> Vec<Check> {
    vec![timer_slack(host)]
}

fn timer_slack(host: &Host) -> Check {
    const ID: &str = "process.timerslack";
    const FILE: &str = "/proc/self/timerslack_ns";
    let fix =
        "systemd: `TimerSlackNSec=1` in the unit (see tuning/punctual.service); real-time threads \
               (CPUSchedulingPolicy=fifo) have no slack"
            .to_owned();
    let value = match host.read_value(FILE) {
        Ok(value) => value,
        Err(e) => return Check::warn(ID, Group::Process, format!("unknown: {e}"), WHY_SLACK, fix),
    };
    match value.parse::<u64>() {
        Ok(ns) if ns <= MAX_SLACK_NS => Check::pass(
            ID,
            Group::Process,
            format!("timer slack is {ns} ns ({FILE})"),
            WHY_SLACK,
        ),
        Ok(ns) => Check::warn(
            ID,
            Group::Process,
            format!("timer slack is {ns} ns ({FILE})"),
            WHY_SLACK,
            fix,
        ),
        Err(_) => Check::warn(
            ID,
            Group::Process,
            format!("unknown: {FILE} holds {value:?}"),
            WHY_SLACK,
            fix,
        ),
    }
}
