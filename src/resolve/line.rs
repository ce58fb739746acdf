//! One lane's waiting line: the host names queued for a thread, what each tenant holds of
//! the lane, and which lookup a free thread takes next. Everything here is under the
//! resolver's lock.
//!
//! # Who gets a thread
//!
//! A free thread takes the first queued lookup whose tenant may run one more:
//!
//! | the tenant runs | it may start another lookup when |
//! |---|---|
//! | none | a thread is free |
//! | 1 to `per_owner_running − 1` | more than `reserved` threads are free (those stay for tenants that run none) |
//! | `per_owner_running` | never (its others wait) |
//!
//! Lookups without a tenant (the store's lane) always may. The webhook lane keeps one thread
//! for tenants that run nothing: with 4 threads and 2 per tenant, two tenants whose names
//! black-hole hold 3 threads at most (2 + 1), and a third tenant's new name gets the fourth at
//! once. Only as many black-holed tenants as there are threads, each running one lookup, can
//! fill a lane; each then holds a thread for the C library's timeout (10 s), and the names
//! answered before go on being served from the cache (stale while revalidate).
//!
//! Walk-through, 4 threads, 2 per tenant, 1 reserved: `a` queues 3 names: the first takes a
//! thread (it ran none), the second one (3 free > 1), the third waits (its share). `b` queues
//! 2: the first takes a thread (it ran none), the second waits (1 free). `c` queues 1: it takes
//! the last thread. When `a`'s first lookup ends, 1 thread is free: `a`'s third and `b`'s
//! second still wait, until a tenant that runs none takes it or a second thread frees.
//!
//! # Bounds
//!
//! At most `queue` names wait, and one tenant has at most `per_owner` queued and running
//! together; past either, a lookup is refused (`Busy`) at once.

use std::collections::{HashMap, VecDeque};

/// How one lane is sized.
#[derive(Clone, Debug)]
pub struct LaneLimits {
    /// Resolver threads (lookups at once).
    pub threads: usize,
    /// Host names waiting for a thread.
    pub queue: usize,
    /// The most lookups one tenant has queued and running together.
    pub per_owner: usize,
    /// The most lookups of one tenant running at once (the others wait in the queue).
    pub per_owner_running: usize,
    /// Threads kept for tenants that run no lookup: a tenant that runs one starts another
    /// only while more than this many threads are free.
    pub reserved: usize,
}

/// A host name waiting for a thread, and the tenant whose share it uses.
pub(super) struct Queued {
    pub host: String,
    pub owner: Option<String>,
}

/// What one tenant holds of a lane.
#[derive(Default)]
struct Share {
    /// Queued and running.
    holds: usize,
    running: usize,
}

/// One lane's waiting line; see the module doc.
#[derive(Default)]
pub(super) struct Line {
    queue: VecDeque<Queued>,
    owners: HashMap<String, Share>,
    /// Lookups running on the lane's threads.
    running: usize,
}

impl Line {
    /// Host names waiting for a thread.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Lookups running.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Whether the line takes one more lookup of `owner`: room in the queue and in its share.
    pub fn admits(&self, owner: Option<&str>, limits: &LaneLimits) -> bool {
        let share = owner.and_then(|o| self.owners.get(o));
        self.queue.len() < limits.queue && share.is_none_or(|s| s.holds < limits.per_owner)
    }

    /// Queues `host` for `owner` (after [`Line::admits`]).
    pub fn push(&mut self, host: &str, owner: Option<String>) {
        if let Some(o) = &owner {
            self.owners.entry(o.clone()).or_default().holds += 1;
        }
        self.queue.push_back(Queued {
            host: host.to_string(),
            owner,
        });
    }

    /// For a free thread: the first queued lookup that may run now (see the module doc),
    /// counted as running.
    pub fn take(&mut self, limits: &LaneLimits) -> Option<Queued> {
        let free = limits.threads.saturating_sub(self.running);
        let owners = &self.owners;
        let i = self.queue.iter().position(|q| {
            let runs = q
                .owner
                .as_ref()
                .and_then(|o| owners.get(o))
                .map_or(0, |s| s.running);
            runs == 0 || (runs < limits.per_owner_running && free > limits.reserved)
        })?;
        let q = self.queue.remove(i)?;
        if let Some(s) = q.owner.as_ref().and_then(|o| self.owners.get_mut(o)) {
            s.running += 1;
        }
        self.running += 1;
        Some(q)
    }

    /// `q`'s lookup ended: its thread and its tenant's share are free again.
    pub fn done(&mut self, q: &Queued) {
        self.running = self.running.saturating_sub(1);
        let Some(o) = &q.owner else { return };
        if let Some(s) = self.owners.get_mut(o) {
            s.holds = s.holds.saturating_sub(1);
            s.running = s.running.saturating_sub(1);
            if s.holds == 0 {
                self.owners.remove(o);
            }
        }
    }
}

#[cfg(test)]
#[path = "line_tests.rs"]
mod tests;
