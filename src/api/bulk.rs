//! Bulk cancel: `DELETE /v1/timers/{tenant}?prefix=P[&all=true]` starts an action that
//! cancels the tenant's pending timers whose key starts with `P` and answers `202 {"id"}` at
//! once; `GET /v1/actions/{tenant}/{id}` gives its progress,
//! `{"id", "state": "running" | "done", "matched", "cancelled"[, "error"]}`.
//!
//! The action is a task of its own on the shard thread that took the request (`bulk_run.rs`).
//! It lists the prefix a page at a time, through the listing's bounded steps over each shard's
//! slab (`engine/list.rs`, `shard/list.rs`), so it never holds a shard for longer than one
//! step, and cancels each listed timer by the version it was listed with, as a
//! `DELETE ?if_version=V` does: each cancel is as durable as a single `DELETE`, and a key put
//! again after its page was read keeps its new timer. Pages follow one another by key
//! (`after` the last key of the page before), so every key pending under the prefix before
//! the `202` and not put again is cancelled; a key put meanwhile beyond the page being
//! cancelled is cancelled too. `matched` counts the timers listed, `cancelled` those the
//! action cancelled (a listed timer that fired or was put again meanwhile is matched, not
//! cancelled).
//!
//! On a node among others the action covers the whole fleet: its pages are the fleet's
//! listing, whole across a partition handoff, and each cancel goes to the partition's owner
//! as a forwarded `DELETE ?if_version=V` does (`bulk_run.rs` says how, and why so). Its
//! progress is kept by the node that took it: `GET` it there.
//!
//! With the journal, each action is recorded under the data directory, at its start (before
//! the `202`), after each page and at its end (`action_records.rs`): one that a restart cut
//! short is answered after it as `"state": "interrupted"`, with what it had done by its last
//! page; it is not resumed. With another store actions live in this process's memory only: a
//! restart forgets them (what they cancelled stays cancelled; `GET` answers `404 not_found`,
//! "unknown action"). An id carries the process's start so that none is ever given twice. Each tenant keeps its last [`KEEP`]
//! actions: a new one makes room by forgetting the tenant's oldest finished action; with
//! [`KEEP`] still running, a new one is refused `503 overloaded`.

use super::actions::{lock, KEEP};
use super::bulk_run::Run;
use super::error::ApiError;
use super::list::prefix_of;
use super::respond::{self, Resp};
use super::routes::get_only;
use super::state::App;
use super::unread::RequestBody;
use hyper::header::AUTHORIZATION;
use hyper::{Request, StatusCode};
use std::rc::Rc;
use std::sync::atomic::Ordering;

impl App {
    /// `DELETE /v1/timers/{tenant}?prefix=P[&all=true]` (admission checked by the caller).
    pub(super) async fn bulk_cancel(
        &self,
        tenant: &str,
        req: &Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        let prefix = bulk_query(req.uri().query())?;
        let action = self.shared.actions.begin(tenant, &prefix)?;
        // Recorded before the `202`: a restart from here on reports it.
        self.shared.actions.save(&action).await;
        let body = serde_json::json!({ "id": action.id });
        let run = Rc::new(Run {
            handle: self.handle.clone(),
            shared: self.shared.clone(),
            peers: self.peers.clone(),
            tenant: tenant.to_string(),
            prefix,
            auth: req.headers().get(AUTHORIZATION).cloned(),
            action,
        });
        glommio::spawn_local(async move {
            let action = run.action.clone();
            if let Err(e) = run.clone().cancel_all(None).await {
                *lock(&action.error) = Some(e);
            }
            action.done.store(true, Ordering::Release);
            run.shared.actions.save(&action).await;
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
