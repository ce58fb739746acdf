//! The history's entries in memory: per tenant, one [`Entry`] per fired (key, version), in
//! the order they were first recorded, each numbered (its `seq`, which pages are cursored
//! by), with an index by key. Bounded by the retention and the per-tenant cap (`mod.rs`).

use super::event::{Attempt, Event, Outcome, ATTEMPTS_KEPT};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// What became of one fire of a timer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub key: Box<str>,
    pub version: u64,
    pub fire_at_us: u64,
    pub fired_at_us: u64,
    pub lateness_us: u64,
    pub outcome: Outcome,
    pub attempts: Vec<Attempt>,
    /// Its last event's time: it is kept for the retention after that.
    #[serde(skip)]
    pub last_us: u64,
}

/// A page of entries, newest first, and the cursor of the next when more follow.
#[derive(Debug, Default)]
pub struct Page {
    pub entries: Vec<Entry>,
    pub next: Option<u64>,
}

#[derive(Default)]
struct TenantLog {
    by_seq: BTreeMap<u64, Entry>,
    /// Each key's entries' `seq`s, ascending.
    by_key: HashMap<Box<str>, Vec<u64>>,
}

impl TenantLog {
    fn find(&mut self, key: &str, version: u64) -> Option<&mut Entry> {
        let seqs = self.by_key.get(key)?;
        let seq = *seqs
            .iter()
            .rev()
            .find(|s| self.by_seq.get(s).is_some_and(|e| e.version == version))?;
        self.by_seq.get_mut(&seq)
    }

    fn insert(&mut self, seq: u64, e: Entry) {
        match self.by_key.get_mut(&*e.key) {
            Some(v) => v.push(seq),
            None => {
                self.by_key.insert(e.key.clone(), vec![seq]);
            }
        }
        self.by_seq.insert(seq, e);
    }

    /// Removes the oldest entry.
    fn pop_oldest(&mut self) {
        let Some((seq, e)) = self.by_seq.pop_first() else {
            return;
        };
        if let Some(v) = self.by_key.get_mut(&*e.key) {
            v.retain(|s| *s != seq);
            if v.is_empty() {
                self.by_key.remove(&*e.key);
            }
        }
    }
}

/// Every tenant's entries.
pub struct Index {
    tenants: HashMap<Box<str>, TenantLog>,
    next_seq: u64,
    retention_us: u64,
    cap: usize,
}

impl Index {
    /// Entries kept for `retention_us` after their last event, at most `cap` per tenant.
    pub fn new(retention_us: u64, cap: usize) -> Index {
        Index {
            tenants: HashMap::new(),
            next_seq: 1,
            retention_us,
            cap: cap.max(1),
        }
    }

    /// Applies one event: a fire makes an entry (or is a repeat of one already there, after
    /// a restart), an attempt joins its fire's entry (made from it when the fire is not in
    /// the history: a re-driven dead letter of an older fire).
    pub fn apply(&mut self, e: Event) {
        let t = match self.tenants.get_mut(&*e.tenant) {
            Some(t) => t,
            None => self.tenants.entry(e.tenant.clone()).or_default(),
        };
        if let Some(entry) = t.find(&e.key, e.version) {
            entry.last_us = entry.last_us.max(e.at_us);
            if let Some(a) = e.attempt {
                if entry.attempts.len() >= ATTEMPTS_KEPT {
                    entry.attempts.remove(0);
                }
                entry.attempts.push(a);
                entry.outcome = e.outcome;
            }
            return;
        }
        // An attempt without its fire in the history: the fire's time is not known, its
        // deadline stands for it.
        let fired_at_us = match &e.attempt {
            Some(_) => e.fire_at_us,
            None => e.at_us,
        };
        let entry = Entry {
            key: e.key,
            version: e.version,
            fire_at_us: e.fire_at_us,
            fired_at_us,
            lateness_us: fired_at_us.saturating_sub(e.fire_at_us),
            outcome: e.outcome,
            attempts: e.attempt.into_iter().collect(),
            last_us: e.at_us,
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        t.insert(seq, entry);
        while t.by_seq.len() > self.cap {
            t.pop_oldest();
        }
    }

    /// Drops the entries past the retention at `now_us`, oldest first: each tenant's run of
    /// oldest entries that are past it (an older entry still in its retention, one whose
    /// delivery goes on, holds the newer ones back until it goes; a read never shows them).
    pub fn trim(&mut self, now_us: u64) {
        let cutoff = now_us.saturating_sub(self.retention_us);
        self.tenants.retain(|_, t| {
            while t
                .by_seq
                .first_key_value()
                .is_some_and(|(_, e)| e.last_us < cutoff)
            {
                t.pop_oldest();
            }
            !t.by_seq.is_empty()
        });
    }

    /// Up to `limit` of `tenant`'s entries (only `key`'s, if given), newest first, older
    /// than the cursor `after` when given; entries past the retention at `now_us` are left
    /// out.
    pub fn page(
        &self,
        tenant: &str,
        key: Option<&str>,
        after: Option<u64>,
        limit: usize,
        now_us: u64,
    ) -> Page {
        let Some(t) = self.tenants.get(tenant) else {
            return Page::default();
        };
        let cutoff = now_us.saturating_sub(self.retention_us);
        let before = after.unwrap_or(u64::MAX);
        let mut it: Box<dyn Iterator<Item = (u64, &Entry)>> = match key {
            Some(k) => match t.by_key.get(k) {
                Some(seqs) => Box::new(
                    seqs.iter()
                        .rev()
                        .filter(|s| **s < before)
                        .filter_map(|s| Some((*s, t.by_seq.get(s)?))),
                ),
                None => Box::new(std::iter::empty()),
            },
            None => Box::new(t.by_seq.range(..before).rev().map(|(s, e)| (*s, e))),
        };
        let mut page = Page::default();
        let mut last = None;
        for (seq, e) in it.by_ref().filter(|(_, e)| e.last_us >= cutoff) {
            if page.entries.len() == limit {
                page.next = last;
                break;
            }
            page.entries.push(e.clone());
            last = Some(seq);
        }
        page
    }

    /// Every entry, oldest first per tenant (the log's rewrite).
    pub fn each(&self, mut f: impl FnMut(&str, &Entry)) {
        for (tenant, t) in &self.tenants {
            for e in t.by_seq.values() {
                f(tenant, e);
            }
        }
    }

    /// Entries held, all tenants together.
    pub fn len(&self) -> usize {
        self.tenants.values().map(|t| t.by_seq.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.tenants.is_empty()
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
