//! The fired streams held against the model: what arrived, what is missing, what arrived
//! twice or should not have, and how late.

use super::model::{Fate, Model};
use super::plan::Spec;
use crate::redis_server::StreamEntry;
use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

/// Fired more than this after its deadline (µs) is a bug, not a missed timing target.
pub const LATE_BOUND_US: i64 = 500_000;

/// Reads every tenant's stream until each due version of the model is there, or `give_up`.
pub fn collect(
    con: &mut redis::Connection,
    spec: &Spec,
    model: &Model,
    give_up: Instant,
) -> Vec<(String, Vec<StreamEntry>)> {
    let mut wanted: HashMap<(&str, &str, u64), ()> = HashMap::new();
    for (t, k, s) in model.due() {
        wanted.insert((t, k, s.version), ());
    }
    loop {
        let streams: Vec<(String, Vec<StreamEntry>)> = spec
            .tenants()
            .into_iter()
            .map(|t| {
                let entries = crate::redis_server::read_stream(con, &t);
                (t, entries)
            })
            .collect();
        let found = streams
            .iter()
            .flat_map(|(t, es)| es.iter().map(move |e| (t, e)))
            .filter(|(t, e)| wanted.contains_key(&(t.as_str(), e.key.as_str(), e.version)))
            .count();
        if found >= wanted.len() || Instant::now() >= give_up {
            return streams;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One stream entry, named for a report.
#[derive(Clone, Debug)]
pub struct Seen {
    pub tenant: String,
    pub key: String,
    pub version: u64,
    pub fire_at_us: u64,
    /// `fired_at_us − fire_at_us`.
    pub late_us: i64,
    pub why: String,
}

/// The streams held against the model.
#[derive(Debug, Default)]
pub struct Check {
    pub due: usize,
    pub entries: usize,
    pub uncertain_keys: usize,
    /// Due versions of certain keys that never arrived.
    pub missing: Vec<Seen>,
    /// Versions that arrived more than once.
    pub duplicates: Vec<Seen>,
    /// Cancelled or replaced versions that arrived.
    pub forbidden: Vec<Seen>,
    /// Versions (or keys) the client was never told of, on certain keys.
    pub unknown: Vec<Seen>,
    /// Deadline or payload different from what was acknowledged.
    pub wrong_record: Vec<Seen>,
    pub early: Vec<Seen>,
    /// More than [`LATE_BOUND_US`] late.
    pub late: Vec<Seen>,
    /// `fired_at_us − fire_at_us` of every entry, sorted.
    pub lateness_us: Vec<i64>,
    /// Stream id (Redis's ms clock when the entry was written) − deadline, worst, in ms.
    pub worst_written_late_ms: i64,
}

pub fn check(model: &Model, streams: &[(String, Vec<StreamEntry>)]) -> Check {
    let mut c = Check {
        uncertain_keys: model.uncertain_keys(),
        worst_written_late_ms: i64::MIN,
        ..Check::default()
    };
    let mut counts: HashMap<(&str, &str, u64), usize> = HashMap::new();
    for (tenant, entries) in streams {
        for e in entries {
            c.entries += 1;
            let late_us = e.fired_at_us as i64 - e.fire_at_us as i64;
            c.lateness_us.push(late_us);
            let written = e.id_ms as i64 - (e.fire_at_us / 1000) as i64;
            c.worst_written_late_ms = c.worst_written_late_ms.max(written);
            let seen = |why: String| Seen {
                tenant: tenant.clone(),
                key: e.key.clone(),
                version: e.version,
                fire_at_us: e.fire_at_us,
                late_us,
                why,
            };
            if late_us < 0 {
                c.early.push(seen(format!("fired {} µs early", -late_us)));
            } else if late_us > LATE_BOUND_US {
                c.late
                    .push(seen(format!("fired {} ms late", late_us / 1000)));
            }
            let Some(h) = model.keys.get(&(tenant.clone(), e.key.clone())) else {
                c.unknown
                    .push(seen("a key the client never scheduled".into()));
                continue;
            };
            let Some(s) = h.scheds.iter().find(|s| s.version == e.version) else {
                if !h.uncertain {
                    c.unknown.push(seen("a version never acknowledged".into()));
                }
                continue;
            };
            if s.fire_at_us != e.fire_at_us || !same_json(&s.payload, &e.payload) {
                c.wrong_record.push(seen(format!(
                    "acknowledged fire_at_us {} payload {}, stream has payload {}",
                    s.fire_at_us, s.payload, e.payload
                )));
            }
            if h.uncertain {
                continue;
            }
            match s.fate {
                Fate::Due => {
                    let n = counts.entry((tenant, &e.key, e.version)).or_insert(0);
                    *n += 1;
                    if *n == 2 {
                        c.duplicates.push(seen("arrived more than once".into()));
                    }
                }
                Fate::Cancelled => c.forbidden.push(seen("cancelled (204), yet fired".into())),
                Fate::Replaced => c.forbidden.push(seen("replaced (200), yet fired".into())),
            }
        }
    }
    for (t, k, s) in model.due() {
        c.due += 1;
        if !counts.contains_key(&(t, k, s.version)) {
            c.missing.push(Seen {
                tenant: t.to_string(),
                key: k.to_string(),
                version: s.version,
                fire_at_us: s.fire_at_us,
                late_us: 0,
                why: "acknowledged, never cancelled or replaced, never arrived".into(),
            });
        }
    }
    c.missing.sort_by_key(|s| s.fire_at_us);
    c.late.sort_by_key(|s| std::cmp::Reverse(s.late_us));
    c.lateness_us.sort_unstable();
    c
}

/// The payload as acknowledged and as the stream has it: the same JSON value.
fn same_json(sent: &str, got: &str) -> bool {
    sent == got
        || matches!(
            (
                serde_json::from_str::<serde_json::Value>(sent),
                serde_json::from_str::<serde_json::Value>(got),
            ),
            (Ok(a), Ok(b)) if a == b
        )
}
impl Check {
    /// Everything that breaks the contract; empty when the run is clean.
    pub fn failures(&self) -> Vec<(&'static str, &[Seen])> {
        [
            ("missing", &self.missing[..]),
            ("duplicate", &self.duplicates[..]),
            ("cancelled or replaced, yet fired", &self.forbidden[..]),
            ("unknown version", &self.unknown[..]),
            ("wrong deadline or payload", &self.wrong_record[..]),
            ("early", &self.early[..]),
            ("late > 500 ms", &self.late[..]),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect()
    }

    pub fn late_over(&self, us: i64) -> usize {
        self.lateness_us.iter().filter(|&&l| l > us).count()
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = |p| super::quantile(&self.lateness_us, p).unwrap_or(0);
        writeln!(
            f,
            "{} due, {} entries, {} uncertain keys; missing {}, duplicate {}, cancelled/replaced \
             yet fired {}, unknown {}, wrong record {}, early {}, late > 500 ms {}, late > 100 ms {}",
            self.due,
            self.entries,
            self.uncertain_keys,
            self.missing.len(),
            self.duplicates.len(),
            self.forbidden.len(),
            self.unknown.len(),
            self.wrong_record.len(),
            self.early.len(),
            self.late.len(),
            self.late_over(100_000),
        )?;
        writeln!(
            f,
            "fired_at − fire_at: p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs; worst stream-id \
             lateness {} ms",
            q(0.5),
            q(0.99),
            q(0.999),
            self.lateness_us.last().copied().unwrap_or(0),
            self.worst_written_late_ms,
        )?;
        let mut by_tenant: std::collections::BTreeMap<&str, usize> = Default::default();
        for (_, list) in self.failures() {
            for s in list {
                *by_tenant.entry(&s.tenant).or_insert(0) += 1;
            }
        }
        if !by_tenant.is_empty() {
            writeln!(f, "failures by tenant: {by_tenant:?}")?;
        }
        for (what, list) in self.failures() {
            writeln!(f, "{what}: {} (first ones)", list.len())?;
            for s in list.iter().take(5) {
                writeln!(
                    f,
                    "  {}/{} v{} fire_at_us {}: {}",
                    s.tenant, s.key, s.version, s.fire_at_us, s.why
                )?;
            }
        }
        Ok(())
    }
}
