//! io_uring checks: can glommio create its rings on this kernel?
//!
//! Owns `io_uring.kernel` (`/proc/sys/kernel/osrelease` at least 5.8, glommio's floor)
//! and `io_uring.enabled` (`/proc/sys/kernel/io_uring_disabled`, the 6.6 knob).
//! Not checked: a seccomp filter that blocks the io_uring system calls (recent Docker
//! default profiles do); that shows only when serve starts.

use super::host::Host;
use super::report::{Check, Group};

/// glommio needs io_uring features from Linux 5.8.
pub const MIN_KERNEL: (u32, u32) = (5, 8);

const WHY_KERNEL: &str = "every shard runs a glommio executor, and glommio drives all I/O and its \
    timers through io_uring features that arrived in Linux 5.8; on an older kernel no shard starts.";

const WHY_ENABLED: &str = "glommio creates three io_uring rings per shard; with io_uring disabled \
    (kernel.io_uring_disabled = 2), or restricted to privileged processes and one group (= 1), \
    serve cannot start its shards.";

/// `(major, minor)` from a kernel release such as `6.1.0-18-amd64`.
pub fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

pub fn checks(host: &Host) -> Vec<Check> {
    let release = host.read_value("/proc/sys/kernel/osrelease");
    let version = release.as_ref().ok().and_then(|r| parse_release(r));
    vec![kernel(&release, version), enabled(host, version)]
}

fn kernel(release: &Result<String, super::host::ReadError>, version: Option<(u32, u32)>) -> Check {
    const ID: &str = "io_uring.kernel";
    let fix = "upgrade to Linux 5.8 or later (6.1 LTS or newer recommended)".to_owned();
    match (release, version) {
        (Err(e), _) => Check::warn(ID, Group::IoUring, format!("unknown: {e}"), WHY_KERNEL, fix),
        (Ok(r), None) => Check::warn(
            ID,
            Group::IoUring,
            format!("unknown: cannot read a version from /proc/sys/kernel/osrelease {r:?}"),
            WHY_KERNEL,
            fix,
        ),
        (Ok(r), Some(v)) if v < MIN_KERNEL => Check::fail(
            ID,
            Group::IoUring,
            format!("kernel {r} is older than {}.{}", MIN_KERNEL.0, MIN_KERNEL.1),
            WHY_KERNEL,
            fix,
        ),
        (Ok(r), Some(_)) => Check::pass(ID, Group::IoUring, format!("kernel {r}"), WHY_KERNEL),
    }
}

fn enabled(host: &Host, version: Option<(u32, u32)>) -> Check {
    const ID: &str = "io_uring.enabled";
    const FILE: &str = "/proc/sys/kernel/io_uring_disabled";
    let fix = format!(
        "`sysctl -w kernel.io_uring_disabled=0`, and keep it in /etc/sysctl.d/60-punctual.conf; or (= 1) run \
         serve in the group named by /proc/sys/kernel/io_uring_group ({FILE})"
    );
    let value = match host.read_value(FILE) {
        Ok(value) => value,
        Err(e) => {
            // The knob is new in 6.6: its absence on an older kernel means "enabled".
            return match version {
                Some(v) if v < (6, 6) && v >= MIN_KERNEL => Check::pass(
                    ID,
                    Group::IoUring,
                    "no io_uring_disabled knob (kernel before 6.6): io_uring is enabled".to_owned(),
                    WHY_ENABLED,
                ),
                _ => Check::warn(
                    ID,
                    Group::IoUring,
                    format!("unknown: {e}"),
                    WHY_ENABLED,
                    fix,
                ),
            };
        }
    };
    match value.as_str() {
        "0" => Check::pass(
            ID,
            Group::IoUring,
            "kernel.io_uring_disabled = 0: io_uring enabled".to_owned(),
            WHY_ENABLED,
        ),
        "1" => {
            let group = host
                .read_value("/proc/sys/kernel/io_uring_group")
                .unwrap_or_else(|_| "?".to_owned());
            let found = format!(
                "kernel.io_uring_disabled = 1: only CAP_SYS_ADMIN and group id {group} may create rings"
            );
            Check::warn(ID, Group::IoUring, found, WHY_ENABLED, fix)
        }
        "2" => Check::fail(
            ID,
            Group::IoUring,
            "kernel.io_uring_disabled = 2: io_uring is disabled for every process".to_owned(),
            WHY_ENABLED,
            fix,
        ),
        other => Check::warn(
            ID,
            Group::IoUring,
            format!("unknown: {FILE} holds {other:?}"),
            WHY_ENABLED,
            fix,
        ),
    }
}

#[cfg(test)]
#[path = "io_uring_tests.rs"]
mod tests;
