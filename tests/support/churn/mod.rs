//! The churn workload, shared by `tests/serve_churn.rs` (correctness) and `benches/churn.rs`
//! (lateness figures): register many timers in batches from a few keep-alive connections,
//! then cancel and reschedule random ones from more connections, while the early ones
//! already fire.
//!
//! # What the client was told: the model
//!
//! Every answer is folded into a [`Model`]: per (tenant, key) the versions that were
//! acknowledged and what became of each ([`Fate`]):
//!
//! | answer | meaning for the model |
//! |---|---|
//! | schedule `201` | a new version, due; nothing was pending, so an earlier due version already fired |
//! | schedule `200` | a new version, due; the previous one was pending and is now `Replaced` |
//! | `DELETE` `204` | the latest version is `Cancelled` |
//! | `DELETE` `404` | nothing pending: the latest version (if due) already fired |
//! | `503`, or a failed exchange | not acknowledged: the key becomes *uncertain* |
//!
//! The churn ops on one key all go through one connection, in order, so the model of every
//! key is exact. [`check`] then holds the fired streams against it: each due version of a
//! certain key exactly once, with its deadline and payload; no cancelled or replaced version;
//! and, for every entry, uncertain keys included, never early and at most [`LATE_BOUND_US`]
//! late.
//!
//! | file | owns |
//! |---|---|
//! | `plan.rs` | the shape of a run ([`Spec`]) and its requests, drawn from a seed ([`Plan`]) |
//! | `model.rs` | the answers ([`Answer`]), the [`Client`] a system under test implements, the [`Model`] |
//! | `drive.rs` | sending a plan over connections ([`run`]), and punctual's HTTP client ([`Http`]) |
//! | `check.rs` | reading the streams ([`collect`]) and holding them against the model ([`check`]) |
//!
//! Included with `#[path = ".../support/churn/mod.rs"]` next to `keepalive.rs` and
//! `redis_server.rs`, as modules `churn`, `keepalive` and `redis_server` of the same crate.

// Each test or bench that includes this uses part of it.
#![allow(dead_code, unused_imports)]

mod check;
mod drive;
mod model;
mod plan;

pub use check::{check, collect, Check, Seen, LATE_BOUND_US};
pub use drive::{run, Http, Outcome};
pub use model::{Answer, Client, Fate, History, Model, Sched};
pub use plan::{ChurnOp, Item, Plan, Round, Spec};

use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_REALTIME in µs since the Unix epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The `q` quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[i64], q: f64) -> Option<i64> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[((last as f64 * q).round() as usize).min(last)])
}

/// The sum over every series of a Prometheus counter or gauge in `text`.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        if let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}
