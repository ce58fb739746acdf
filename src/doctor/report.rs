//! The doctor's result types and its two renderings: the human report and `--json`.
//!
//! Owns: [`Status`], [`Check`] (one finding), [`Report`] (all findings plus the context
//! they were taken in) and the exit-status rule. The checks themselves live in the
//! sibling modules; nothing here reads the host.

use serde::Serialize;
use std::fmt::Write as _;

/// How a check came out.
///
/// - `Fail`: punctual will not start here, or cannot keep its promise (UTC deadlines met
///   with sub-millisecond lateness). Any `Fail` makes `punctual doctor` exit 1.
/// - `Warn`: punctual runs, but loses latency or robustness; or the doctor could not
///   tell (a file missing or unreadable), which it says in `found`.
/// - `Pass`: nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    /// The four-letter tag printed in the human report.
    pub fn tag(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// The group a check belongs to; the report prints one section per group, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    Clock,
    ShardCores,
    Memory,
    IoUring,
    TimeSync,
    Process,
    Redis,
}

impl Group {
    pub const ALL: [Group; 7] = [
        Group::Clock,
        Group::ShardCores,
        Group::Memory,
        Group::IoUring,
        Group::TimeSync,
        Group::Process,
        Group::Redis,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Group::Clock => "Clock",
            Group::ShardCores => "Shard cores",
            Group::Memory => "Memory",
            Group::IoUring => "io_uring",
            Group::TimeSync => "Time synchronisation",
            Group::Process => "Process",
            Group::Redis => "Redis",
        }
    }
}

/// One finding: what was checked, how it came out, what was seen, why it matters and,
/// unless it passed, the exact fix.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable identifier, `group.name` (for example `clock.tsc`); scripts match on it.
    pub id: &'static str,
    pub group: Group,
    pub status: Status,
    /// What the doctor saw, with the file it read.
    pub found: String,
    /// Why this matters for punctual.
    pub why: String,
    /// The exact change to make; `None` when the check passed.
    pub fix: Option<String>,
}

impl Check {
    pub fn pass(id: &'static str, group: Group, found: String, why: &str) -> Check {
        Check {
            id,
            group,
            status: Status::Pass,
            found,
            why: why.to_owned(),
            fix: None,
        }
    }

    pub fn warn(id: &'static str, group: Group, found: String, why: &str, fix: String) -> Check {
        Check {
            id,
            group,
            status: Status::Warn,
            found,
            why: why.to_owned(),
            fix: Some(fix),
        }
    }

    pub fn fail(id: &'static str, group: Group, found: String, why: &str, fix: String) -> Check {
        Check {
            id,
            group,
            status: Status::Fail,
            found,
            why: why.to_owned(),
            fix: Some(fix),
        }
    }
}

/// Counts per status.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Summary {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
}

/// Everything one run of the doctor found, and the context it ran in.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `true` when no check failed (the exit status is then 0).
    pub ok: bool,
    /// The root directory the files were read under (`/` on a live host).
    pub root: String,
    /// The shard cores checked, as a CPU list (`2-5`).
    pub cores: String,
    /// Whether `cores` came from `--cores` (else: every core the process may use, as serve).
    pub cores_given: bool,
    /// The shard count the memory checks assumed.
    pub shards: usize,
    pub summary: Summary,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn new(
        root: String,
        cores: String,
        cores_given: bool,
        shards: usize,
        checks: Vec<Check>,
    ) -> Report {
        let mut summary = Summary::default();
        for check in &checks {
            match check.status {
                Status::Pass => summary.pass += 1,
                Status::Warn => summary.warn += 1,
                Status::Fail => summary.fail += 1,
            }
        }
        Report {
            ok: summary.fail == 0,
            root,
            cores,
            cores_given,
            shards,
            summary,
            checks,
        }
    }

    /// The process exit status: 0 when nothing failed, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        if self.ok {
            0
        } else {
            1
        }
    }

    /// The `--json` rendering: one JSON object, pretty-printed.
    pub fn to_json(&self) -> String {
        // Serialising plain strings, numbers and enums cannot fail; fall back to a
        // minimal object rather than panic if a future field ever could.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| {
            serde_json::json!({"ok": false, "error": e.to_string()}).to_string()
        })
    }

    /// The human rendering: one section per group; every check shows what was found and
    /// why it matters, and every check that did not pass shows its fix.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let cores_from = if self.cores_given {
            "--cores"
        } else {
            "every core this process may use; pass --cores"
        };
        let _ = writeln!(
            out,
            "punctual doctor: host preflight (root {}, shard cores {} [{}], {} shard{})",
            self.root,
            if self.cores.is_empty() {
                "none"
            } else {
                &self.cores
            },
            cores_from,
            self.shards,
            if self.shards == 1 { "" } else { "s" },
        );
        for group in Group::ALL {
            let mut checks = self.checks.iter().filter(|c| c.group == group).peekable();
            if checks.peek().is_none() {
                continue;
            }
            let _ = writeln!(out, "\n{}", group.title());
            for check in checks {
                let head = format!("  {}  {:<20} ", check.status.tag(), check.id);
                wrap_into(&mut out, &head, &" ".repeat(head.len()), &check.found);
                wrap_into(&mut out, "        why: ", "             ", &check.why);
                if let Some(fix) = &check.fix {
                    for (i, line) in fix.lines().enumerate() {
                        let lead = if i == 0 {
                            "        fix: "
                        } else {
                            "             "
                        };
                        wrap_into(&mut out, lead, "             ", line);
                    }
                }
            }
        }
        let _ = writeln!(
            out,
            "\n{} pass, {} warn, {} fail: {}",
            self.summary.pass,
            self.summary.warn,
            self.summary.fail,
            if self.ok {
                "ready (exit 0)"
            } else {
                "not ready (exit 1)"
            }
        );
        out
    }
}

/// The width the human report wraps its lines at.
const WIDTH: usize = 100;

/// Appends `text` word-wrapped at [`WIDTH`]: the first line after `first`, the rest after
/// `rest`. A word longer than the line (a path, a command) is never broken.
fn wrap_into(out: &mut String, first: &str, rest: &str, text: &str) {
    let mut line = first.to_owned();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = rest.to_owned();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
