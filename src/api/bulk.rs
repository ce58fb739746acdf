//! Bulk cancel: `DELETE /v1/timers/{tenant}?prefix=P[&all=true]` starts an action that
//! cancels the tenant's pending timers whose key starts with `P` and answers `202 {"id"}` at
//! once; `GET /v1/actions/{tenant}/{id}` gives its progress,
//! `{"id", "state": "running" | "done", "matched", "cancelled"[, "error"]}`.
//!
//! The action is a task of its own on the shard thread that took the request. It lists the
//! prefix a page at a time, through the listing's bounded steps over each shard's slab
//! (`engine/list.rs`, `shard/list.rs`), so it never holds a shard for longer than one step,
//! and cancels each listed timer by the version it was listed with, through the op a
//! `DELETE ?if_version=V` sends: each cancel is as durable as a single `DELETE`, and a key
//! put again after its page was read keeps its new timer. Pages follow one another by key
//! (`after` the last key of the page before), so every key pending under the prefix before
//! the `202` and not put again is cancelled; a key put meanwhile beyond the page being
//! cancelled is cancelled too. `matched` counts the timers listed, `cancelled` those the
//! action cancelled (a listed timer that fired or was put again meanwhile is matched, not
//! cancelled).
//!
//! Actions live in this process's memory: a restart forgets them (what they cancelled stays
//! cancelled; `GET` answers `404 not_found`, "unknown action"), and an id carries the
//! process's start so that none is ever given twice. Each tenant keeps its last [`KEEP`]
//! actions: a new one makes room by forgetting the tenant's oldest finished action; with
//! [`KEEP`] still running, a new one is refused `503 overloaded`.
//!
//! A bulk cancel covers the timers of this node: on a node among others it is refused
//! `501 not_implemented` rather than cancelling part of the tenant's timers.

use super::error::ApiError;
use super::list::prefix_of;
use super::respond::{self, Resp};
use super::routes::get_only;
use super::state::{App, Servers};
use super::unread::RequestBody;
use crate::engine::{Cancelled, Handle, ListQuery};
use crate::error::Error;
use hyper::{Request, StatusCode};
use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Actions each tenant keeps, running or finished.
pub const KEEP: usize = 64;
/// Timers listed per page of an action.
const PAGE: usize = 1_000;
/// Cancels an action has sent and not yet seen answered.
const IN_FLIGHT: usize = 64;

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
struct Action {
    id: String,
    matched: AtomicU64,
    cancelled: AtomicU64,
    done: AtomicBool,
    /// Why it stopped before the end, if it did.
    error: Mutex<Option<String>>,
}

/// What `GET /v1/actions/{tenant}/{id}` answers.
#[derive(Serialize)]
struct Progress<'a> {
    id: &'a str,
    state: &'static str,
    matched: u64,
    cancelled: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// A lock that a panic elsewhere does not poison for good: the data under it stays whole
/// (each change is one push, pop or store).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
    fn begin(&self, tenant: &str) -> Result<Arc<Action>, ApiError> {
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

    fn find(&self, tenant: &str, id: &str) -> Option<Arc<Action>> {
        lock(&self.tenants)
            .get(tenant)?
            .iter()
            .find(|a| a.id == id)
            .cloned()
    }
}

impl Action {
    fn progress(&self) -> Progress<'_> {
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

impl App {
    /// `DELETE /v1/timers/{tenant}?prefix=P[&all=true]` (admission checked by the caller).
    pub(super) fn bulk_cancel(
        &self,
        tenant: &str,
        req: &Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        let prefix = bulk_query(req.uri().query())?;
        if self.shared.node.is_some() {
            return Err(ApiError::NotImplemented(
                "a bulk cancel covers one node's timers; on a node among others, cancel by key"
                    .to_string(),
            ));
        }
        let action = self.shared.actions.begin(tenant)?;
        let body = serde_json::json!({ "id": action.id });
        let (handle, shared, tenant) =
            (self.handle.clone(), self.shared.clone(), tenant.to_string());
        glommio::spawn_local(async move {
            if let Err(e) = cancel_all(&handle, &shared, &tenant, &prefix, &action).await {
                *lock(&action.error) = Some(e.to_string());
            }
            action.done.store(true, Ordering::Release);
        })
        .detach();
        Ok(respond::json_of(StatusCode::ACCEPTED, &body))
    }

    /// `GET /v1/actions/{tenant}/{id}`.
    pub(super) fn action(
        &self,
        tenant: &str,
        id: &str,
        req: &Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        get_only(req)?;
        self.check(tenant, req)?;
        let action = self.shared.actions.find(tenant, id).ok_or_else(|| {
            ApiError::NotFound(format!(
                "unknown action {id:?} for tenant {tenant:?} (actions are forgotten on a restart, and past the tenant's last {KEEP})"
            ))
        })?;
        Ok(respond::json_of(StatusCode::OK, &action.progress()))
    }
}

/// Lists the prefix page by page and cancels what each page lists, [`IN_FLIGHT`] at a time.
async fn cancel_all(
    handle: &Handle,
    shared: &Servers,
    tenant: &str,
    prefix: &str,
    action: &Action,
) -> Result<(), Error> {
    let mut after = None;
    loop {
        let query = ListQuery {
            tenant: tenant.to_string(),
            prefix: prefix.to_string(),
            after: after.take(),
            limit: PAGE,
            payloads: false,
        };
        let page = handle.list_timers_async(query).await?;
        let listed = u64::try_from(page.timers.len()).unwrap_or(u64::MAX);
        action.matched.fetch_add(listed, Ordering::Relaxed);
        for chunk in page.timers.chunks(IN_FLIGHT) {
            // Each is sent as it is made; their answers are awaited after.
            let asks: Vec<_> = chunk
                .iter()
                .map(|t| handle.cancel_if_async(tenant, &t.key, t.version))
                .collect();
            for ask in asks {
                match ask.await {
                    Ok(Cancelled::Cancelled { .. }) => {
                        action.cancelled.fetch_add(1, Ordering::Relaxed);
                        shared.actions.cancelled.inc();
                    }
                    // Fired, cancelled or put again since it was listed.
                    Ok(Cancelled::NotFound) | Err(Error::VersionMismatch { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(()),
        }
    }
}

/// The prefix a bulk cancel names: `prefix=P` (not empty), or an empty one with `all=true`.
fn bulk_query(query: Option<&str>) -> Result<String, ApiError> {
    let (mut prefix, mut all) = (String::new(), false);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("prefix", v)) => prefix = prefix_of(v)?,
            Some(("all", "true")) => all = true,
            Some(("all", "false")) => all = false,
            Some(("all", v)) => {
                return Err(ApiError::InvalidField(format!(
                    "all must be true or false, not {v:?}"
                )))
            }
            _ => {
                return Err(ApiError::InvalidField(format!(
                    "unknown query parameter {pair:?}; expected prefix and all"
                )))
            }
        }
    }
    if prefix.is_empty() && !all {
        return Err(ApiError::InvalidField(
            "prefix is empty: to cancel every pending timer of the tenant, add all=true"
                .to_string(),
        ));
    }
    Ok(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bulk_query_needs_a_prefix_or_all_and_names_what_it_refuses() {
        assert_eq!(
            bulk_query(Some("prefix=order-88")),
            Ok("order-88".to_string())
        );
        assert_eq!(bulk_query(Some("all=true")), Ok(String::new()));
        assert_eq!(bulk_query(Some("prefix=&all=true")), Ok(String::new()));
        for (bad, names) in [
            ("", "all=true"),
            ("prefix=", "all=true"),
            ("prefix=&all=false", "all=true"),
            ("prefix=a/b", "prefix"),
            ("all=yes", "all"),
            ("limit=5", "limit"),
        ] {
            match bulk_query(Some(bad)) {
                Err(ApiError::InvalidField(m)) => assert!(m.contains(names), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_tenant_keeps_its_last_actions_and_refuses_past_that_many_running() {
        let actions = Actions::default();
        let first = actions.begin("t").expect("first");
        let mut rest = Vec::new();
        for _ in 1..KEEP {
            rest.push(actions.begin("t").expect("room"));
        }
        assert!(matches!(actions.begin("t"), Err(ApiError::Overloaded(_))));
        assert!(
            actions.begin("u").is_ok(),
            "another tenant has its own room"
        );
        first.done.store(true, Ordering::Release);
        let next = actions
            .begin("t")
            .expect("the oldest finished one makes room");
        assert!(actions.find("t", &first.id).is_none());
        assert!(actions.find("t", &next.id).is_some());
        assert!(
            actions.find("u", &next.id).is_none(),
            "ids are the tenant's"
        );
        assert_ne!(first.id, next.id);
    }
}
