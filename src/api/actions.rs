//! Bulk actions (`bulk.rs`), every tenant's, all shards together: each one's progress, and
//! the bound on how many a tenant keeps ([`KEEP`]: a new one forgets the tenant's oldest
//! finished action; with [`KEEP`] still running, a new one is refused).

use super::error::ApiError;
use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Actions each tenant keeps, running or finished.
pub const KEEP: usize = 64;

/// Every tenant's bulk actions, all shards together, and their counters for `/metrics`.
pub struct Actions {
    /// The process's start, in milliseconds since the epoch: the first part of every id.
    start: u64,
    next: AtomicU64,
    tenants: Mutex<HashMap<String, VecDeque<Arc<Action>>>>,
    /// Bulk actions started.
    pub started: Counter,
    /// Timers cancelled by bulk actions.
    pub cancelled: Counter,
}

/// One bulk cancel and its progress.
pub(super) struct Action {
    pub(super) id: String,
    pub(super) matched: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) done: AtomicBool,
    /// Why it stopped before the end, if it did.
    pub(super) error: Mutex<Option<String>>,
}

/// What `GET /v1/actions/{tenant}/{id}` answers.
#[derive(Serialize)]
pub(super) struct Progress<'a> {
    id: &'a str,
    state: &'static str,
    matched: u64,
    cancelled: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// A lock that a panic elsewhere does not poison for good: the data under it stays whole
/// (each change is one push, pop or store).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for Actions {
    fn default() -> Self {
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Actions {
            start,
            next: AtomicU64::new(1),
            tenants: Mutex::default(),
            started: Counter::default(),
            cancelled: Counter::default(),
        }
    }
}

impl Actions {
    /// A new action of `tenant`, kept among its last [`KEEP`]; refused when that many
    /// still run.
    pub(super) fn begin(&self, tenant: &str) -> Result<Arc<Action>, ApiError> {
        let mut tenants = lock(&self.tenants);
        let kept = tenants.entry(tenant.to_string()).or_default();
        if kept.len() >= KEEP {
            let Some(oldest) = kept.iter().position(|a| a.done.load(Ordering::Acquire)) else {
                return Err(ApiError::Overloaded(format!(
                    "tenant {tenant:?} has {KEEP} bulk actions running; wait for one to finish"
                )));
            };
            kept.remove(oldest);
        }
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let action = Arc::new(Action {
            id: format!("{:x}-{seq}", self.start),
            matched: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            done: AtomicBool::new(false),
            error: Mutex::new(None),
        });
        kept.push_back(action.clone());
        self.started.inc();
        Ok(action)
    }

    pub(super) fn find(&self, tenant: &str, id: &str) -> Option<Arc<Action>> {
        lock(&self.tenants)
            .get(tenant)?
            .iter()
            .find(|a| a.id == id)
            .cloned()
    }
}

impl Action {
    pub(super) fn progress(&self) -> Progress<'_> {
        let done = self.done.load(Ordering::Acquire);
        Progress {
            id: &self.id,
            state: if done { "done" } else { "running" },
            matched: self.matched.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            error: lock(&self.error).clone(),
        }
    }
}

#[cfg(test)]
#[path = "actions_tests.rs"]
mod tests;
