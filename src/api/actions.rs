//! Bulk actions (`bulk.rs`), every tenant's, all shards together: each one's progress, and
//! the bound on how many a tenant keeps ([`KEEP`]: a new one forgets the tenant's oldest
//! finished action; with [`KEEP`] still running, a new one is refused). With the journal each
//! action is also recorded on disk (`action_records.rs`), and those a restart cut short are
//! known again after it, as `interrupted`.

use super::action_records::{order, ActionRecord, Records};
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
    /// Where each action is recorded (the journal's data directory); `None`: memory only.
    records: Option<Records>,
    /// Bulk actions started.
    pub started: Counter,
    /// Timers cancelled by bulk actions.
    pub cancelled: Counter,
}

/// One bulk cancel and its progress.
pub(super) struct Action {
    pub(super) id: String,
    pub(super) tenant: String,
    pub(super) prefix: String,
    /// The last key of the last page whose cancels were all answered.
    pub(super) after: Mutex<Option<String>>,
    /// Recorded running before a restart: it ended there.
    pub(super) interrupted: bool,
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
            records: None,
            started: Counter::default(),
            cancelled: Counter::default(),
        }
    }
}

impl Actions {
    /// Actions recorded under `records`: those recorded before (each tenant's last [`KEEP`],
    /// the others' records removed), finished, a running one as interrupted.
    pub(super) fn recorded(records: Records) -> Actions {
        let mut actions = Actions::default();
        let mut tenants: HashMap<String, VecDeque<Arc<Action>>> = HashMap::new();
        for r in records.recover() {
            // Past any id recorded, even one of a clock that went back since.
            actions.start = actions.start.max(order(&r.id).0.saturating_add(1));
            let kept = tenants.entry(r.tenant.clone()).or_default();
            if kept.len() >= KEEP {
                if let Some(oldest) = kept.pop_front() {
                    records.remove(&oldest.id);
                }
            }
            kept.push_back(Arc::new(Action {
                interrupted: r.state == "interrupted",
                matched: AtomicU64::new(r.matched),
                cancelled: AtomicU64::new(r.cancelled),
                done: AtomicBool::new(true),
                error: Mutex::new(r.error),
                after: Mutex::new(r.after),
                id: r.id,
                tenant: r.tenant,
                prefix: r.prefix,
            }));
        }
        actions.tenants = Mutex::new(tenants);
        actions.records = Some(records);
        actions
    }

    /// A new action of `tenant` over `prefix`, kept among its last [`KEEP`]; refused when
    /// that many still run.
    pub(super) fn begin(&self, tenant: &str, prefix: &str) -> Result<Arc<Action>, ApiError> {
        let mut tenants = lock(&self.tenants);
        let kept = tenants.entry(tenant.to_string()).or_default();
        if kept.len() >= KEEP {
            let Some(oldest) = kept.iter().position(|a| a.done.load(Ordering::Acquire)) else {
                return Err(ApiError::Overloaded(format!(
                    "tenant {tenant:?} has {KEEP} bulk actions running; wait for one to finish"
                )));
            };
            if let (Some(gone), Some(records)) = (kept.remove(oldest), &self.records) {
                records.remove(&gone.id);
            }
        }
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let action = Arc::new(Action {
            id: format!("{:x}-{seq}", self.start),
            tenant: tenant.to_string(),
            prefix: prefix.to_string(),
            after: Mutex::new(None),
            interrupted: false,
            matched: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            done: AtomicBool::new(false),
            error: Mutex::new(None),
        });
        kept.push_back(action.clone());
        self.started.inc();
        Ok(action)
    }

    /// Records `action` as it is now, durably, off the shard's thread (with the journal; a
    /// write that fails is logged: the action goes on, in memory).
    pub(super) async fn save(&self, action: &Action) {
        let Some(records) = self.records.clone() else {
            return;
        };
        let record = action.record();
        let id = record.id.clone();
        let written = glommio::executor()
            .spawn_blocking(move || records.write(&record))
            .await;
        if let Err(e) = written {
            tracing::warn!(id, error = %e, "a bulk action's record could not be written");
        }
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
    fn state(&self) -> &'static str {
        match (self.interrupted, self.done.load(Ordering::Acquire)) {
            (true, _) => "interrupted",
            (false, true) => "done",
            (false, false) => "running",
        }
    }

    /// What is recorded of it now.
    fn record(&self) -> ActionRecord {
        ActionRecord {
            tenant: self.tenant.clone(),
            id: self.id.clone(),
            prefix: self.prefix.clone(),
            after: lock(&self.after).clone(),
            matched: self.matched.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            state: self.state().to_string(),
            error: lock(&self.error).clone(),
        }
    }

    pub(super) fn progress(&self) -> Progress<'_> {
        Progress {
            id: &self.id,
            state: self.state(),
            matched: self.matched.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            error: lock(&self.error).clone(),
        }
    }
}

#[cfg(test)]
#[path = "actions_tests.rs"]
mod tests;
