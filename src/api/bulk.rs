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

use super::actions::{lock, Action, KEEP};
use super::error::ApiError;
use super::list::prefix_of;
use super::respond::{self, Resp};
use super::routes::get_only;
use super::state::{App, Servers};
use super::unread::RequestBody;
use crate::engine::{Cancelled, Handle, ListQuery, Listed};
use crate::error::Error;
use hyper::{Request, StatusCode};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Timers listed per page of an action.
const PAGE: usize = 1_000;
/// Cancels an action has sent and not yet seen answered.
const IN_FLIGHT: usize = 64;
/// Times a step refused by a busy shard is asked again, and the wait before each.
const RETRIES: u32 = 1_000;
const RETRY_WAIT: Duration = Duration::from_millis(2);

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
        let mut page = handle.list_timers_async(query.clone()).await;
        for _ in 0..RETRIES {
            match &page {
                Err(e) if transient(e) => {
                    glommio::timer::sleep(RETRY_WAIT).await;
                    page = handle.list_timers_async(query.clone()).await;
                }
                _ => break,
            }
        }
        let page = page?;
        let listed = u64::try_from(page.timers.len()).unwrap_or(u64::MAX);
        action.matched.fetch_add(listed, Ordering::Relaxed);
        for chunk in page.timers.chunks(IN_FLIGHT) {
            // Each is sent as it is made; their answers are awaited after.
            let asks: Vec<_> = chunk
                .iter()
                .map(|t| handle.cancel_if_async(tenant, &t.key, t.version))
                .collect();
            for (t, ask) in chunk.iter().zip(asks) {
                if cancelled(handle, tenant, t, ask.await).await? {
                    action.cancelled.fetch_add(1, Ordering::Relaxed);
                    shared.actions.cancelled.inc();
                }
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(()),
        }
    }
}

/// Whether the cancel of `t` that answered `answer` cancelled it: `false` when it fired, was
/// cancelled or was put again since it was listed. A shard too busy to take it (its ring or
/// its store's queue full) is asked again [`RETRIES`] times, [`RETRY_WAIT`] apart.
async fn cancelled(
    handle: &Handle,
    tenant: &str,
    t: &Listed,
    mut answer: Result<Cancelled, Error>,
) -> Result<bool, Error> {
    let mut tries = 0;
    loop {
        match answer {
            Ok(Cancelled::Cancelled { .. }) => return Ok(true),
            Ok(Cancelled::NotFound) | Err(Error::VersionMismatch { .. }) => return Ok(false),
            Err(e) if transient(&e) && tries < RETRIES => {
                tries += 1;
                glommio::timer::sleep(RETRY_WAIT).await;
                answer = handle.cancel_if_async(tenant, &t.key, t.version).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// An answer that a moment later may not give: the shard's ring, or its store's queue, full.
fn transient(e: &Error) -> bool {
    matches!(
        e,
        Error::RingFull { .. }
            | Error::RingShare { .. }
            | Error::StoreShare { .. }
            | Error::StoreUnavailable { .. }
    )
}

/// The prefix a bulk cancel names: `prefix=P` (not empty), or an empty one with `all=true`.
fn bulk_query(query: Option<&str>) -> Result<String, ApiError> {
    let (mut prefix, mut all) = (String::new(), false);
    for (name, v) in super::query::pairs(query, &["prefix", "all"])? {
        match (name, v) {
            ("prefix", v) => prefix = prefix_of(v)?,
            (_, "true") => all = true,
            (_, "false") => all = false,
            (_, v) => {
                return Err(ApiError::InvalidField(format!(
                    "all must be true or false, not {v:?}"
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
#[path = "bulk_tests.rs"]
mod tests;
