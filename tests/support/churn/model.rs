//! What the service answered, and what that means for each (tenant, key): the model the
//! streams are checked against (the table is in the module above).

use super::plan::Item;
use std::collections::HashMap;

/// What the service answered to one schedule or cancel.
#[derive(Clone, Debug)]
pub enum Answer {
    /// A 2xx to a schedule: `replaced` for 200 (a pending one was replaced), not for 201.
    Scheduled {
        version: u64,
        fire_at_us: u64,
        replaced: bool,
    },
    /// `204` to a cancel.
    Cancelled,
    /// `404` to a cancel.
    NotFound,
    /// `503`: not acknowledged; the write may or may not have happened.
    Unavailable,
    /// The exchange failed (connection lost, timeout): not acknowledged either.
    Lost(String),
    /// Anything the contract does not allow here.
    Unexpected(String),
}

/// One connection to the system under test.
pub trait Client {
    fn register(&mut self, tenant: &str, items: &[Item]) -> Vec<Answer>;
    fn cancel(&mut self, tenant: &str, key: &str) -> Answer;
    fn put(&mut self, tenant: &str, item: &Item) -> Answer;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Must fire exactly once.
    Due,
    Cancelled,
    Replaced,
}

#[derive(Clone, Debug)]
pub struct Sched {
    pub version: u64,
    pub fire_at_us: u64,
    pub payload: String,
    pub fate: Fate,
}

#[derive(Clone, Debug, Default)]
pub struct History {
    pub scheds: Vec<Sched>,
    /// An answer was not an acknowledgement: exactly-once is not checkable for this key.
    pub uncertain: bool,
}

#[derive(Debug, Default)]
pub struct Model {
    pub keys: HashMap<(String, String), History>,
    /// Answers that contradict the model (a 200 with nothing pending, a 204 twice, …).
    pub violations: Vec<String>,
    pub acknowledged: usize,
    pub unavailable: usize,
    pub lost: Vec<String>,
}

impl Model {
    fn history(&mut self, tenant: &str, key: &str) -> &mut History {
        self.keys
            .entry((tenant.to_string(), key.to_string()))
            .or_default()
    }

    fn not_acknowledged(&mut self, tenant: &str, key: &str, op: &str, answer: &Answer) {
        match answer {
            Answer::Unavailable => self.unavailable += 1,
            Answer::Lost(why) => self.lost.push(format!("{op} {tenant}/{key}: {why}")),
            other => self
                .violations
                .push(format!("{op} {tenant}/{key}: {other:?}")),
        }
        self.history(tenant, key).uncertain = true;
    }

    pub fn schedule(&mut self, tenant: &str, item: &Item, answer: &Answer) {
        let &Answer::Scheduled {
            version,
            fire_at_us,
            replaced,
        } = answer
        else {
            return self.not_acknowledged(tenant, &item.key, "schedule", answer);
        };
        self.acknowledged += 1;
        let h = self.history(tenant, &item.key);
        let pending = h.scheds.last_mut().filter(|s| s.fate == Fate::Due);
        let violation = match (replaced, pending) {
            (true, Some(last)) => {
                last.fate = Fate::Replaced;
                None
            }
            (true, None) if !h.uncertain => Some("answered 200 (replaced), nothing was pending"),
            // 201 after a due version: that one fired before this arrived.
            _ => None,
        };
        h.scheds.push(Sched {
            version,
            fire_at_us,
            payload: item.payload.clone(),
            fate: Fate::Due,
        });
        if let Some(v) = violation {
            let msg = format!("schedule {tenant}/{} v{version}: {v}", item.key);
            self.violations.push(msg);
        }
    }

    pub fn cancel(&mut self, tenant: &str, key: &str, answer: &Answer) {
        match answer {
            Answer::Cancelled => {
                let h = self.history(tenant, key);
                let consistent = match h.scheds.last_mut() {
                    Some(last) if last.fate == Fate::Due => {
                        last.fate = Fate::Cancelled;
                        true
                    }
                    _ => h.uncertain,
                };
                if !consistent {
                    self.violations
                        .push(format!("DELETE {tenant}/{key}: 204, nothing was pending"));
                }
            }
            // Nothing pending: a due latest version fired already and must be in the stream.
            Answer::NotFound => {}
            other => self.not_acknowledged(tenant, key, "DELETE", other),
        }
    }

    /// The latest deadline the client was told of.
    pub fn last_deadline_us(&self) -> u64 {
        self.keys
            .values()
            .flat_map(|h| h.scheds.iter().map(|s| s.fire_at_us))
            .max()
            .unwrap_or(0)
    }

    /// (tenant, key, version) of every timer that must fire exactly once.
    pub fn due(&self) -> impl Iterator<Item = (&str, &str, &Sched)> {
        self.keys
            .iter()
            .filter(|(_, h)| !h.uncertain)
            .flat_map(|((t, k), h)| h.scheds.iter().map(move |s| (t.as_str(), k.as_str(), s)))
            .filter(|(_, _, s)| s.fate == Fate::Due)
    }

    pub fn uncertain_keys(&self) -> usize {
        self.keys.values().filter(|h| h.uncertain).count()
    }
}
