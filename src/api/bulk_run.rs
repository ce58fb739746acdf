//! The work of one bulk cancel (`bulk.rs`): list the prefix a page at a time and cancel each
//! listed timer at its owner by the version it was listed with.
//!
//! # On a node alone
//!
//! A page is this node's listing (`engine/list.rs`), and each cancel the op a
//! `DELETE ?if_version=V` sends to the shard.
//!
//! # On a node among others
//!
//! The node that took the request runs the whole action; no other node keeps any state of it.
//! A page is the fleet's: every live node is asked for the same page at once, as the listing
//! does (`list.rs`), and the pages merged by key; each listed timer is then cancelled where a
//! single `DELETE ?if_version=V` would go: here when this node owns its partition, else
//! forwarded to its owner (`forward.rs`), by the routing view read at the time of that cancel.
//!
//! Why this and not a sub-action on each node: a partition handed over while a node's
//! sub-action passes it would be listed by neither node, and nothing would know. Here, one
//! node decides, and a page counts only when the nodes' answers together say that every
//! partition was listed whole (each node's `punctual-covered`: the partitions its shards held
//! loaded at every step of its listing, their gates unchanged, `shard/gate.rs`). A page that
//! misses a partition (one in flight between two nodes, a node not answering) is asked again,
//! [`RETRY_WAIT`] growing to [`MAX_WAIT`] apart, for up to [`GIVE_UP`]; then the action stops
//! with an error naming the partitions. A cancel refused for a moment (the partition moving:
//! `503`, the owner's shard busy, the tenant's rate there: `429`, the owner not answering) is
//! sent again the same way, to whoever owns the partition by then. The version makes every
//! such cancel safe: one listed by a node that has since lost the partition, or sent to a
//! node that loaded it since, cancels only the timer that was listed, never a key put again.
//!
//! `cancelled` counts the cancels the action saw succeed: a cancel applied whose answer was
//! lost, and sent again, counts as matched only.

use super::actions::Action;
use super::error::ApiError;
use super::forward::{self, Peers};
use super::list::{ask, gather_page, Page};
use super::state::Servers;
use crate::engine::{Cancelled, Handle, ListQuery};
use crate::error::Error;
use bytes::Bytes;
use hyper::header::HeaderValue;
use hyper::{Method, StatusCode};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Timers listed per page of an action.
pub(super) const PAGE: usize = 1_000;
/// Cancels an action has sent and not yet seen answered.
const IN_FLIGHT: usize = 64;
/// The first wait before a refused step is asked again; each wait doubles up to [`MAX_WAIT`].
const RETRY_WAIT: Duration = Duration::from_millis(2);
const MAX_WAIT: Duration = Duration::from_millis(100);
/// How long one page or one cancel is asked again before the action stops: well past a
/// handoff (tens of milliseconds planned, a lease's TTL, 3 s by default, on a node's death).
const GIVE_UP: Duration = Duration::from_secs(30);

/// One bulk cancel under way, on the shard that took it.
pub(super) struct Run {
    pub(super) handle: Handle,
    pub(super) shared: Arc<Servers>,
    pub(super) peers: Rc<Peers>,
    pub(super) tenant: String,
    pub(super) prefix: String,
    /// The caller's `Authorization`, that each forwarded cancel carries as a forwarded
    /// `DELETE` does (the owner admits it again).
    pub(super) auth: Option<HeaderValue>,
    pub(super) action: Arc<Action>,
}

/// What one try of a step gave.
enum Try<T> {
    Done(T),
    /// Refused for a moment: ask again.
    Again(String),
    Failed(String),
}

impl Run {
    /// Lists the prefix page by page and cancels what each page lists, [`IN_FLIGHT`] at a
    /// time; `after`: the last key of the page before, if any. The error says why it stopped.
    pub(super) async fn cancel_all(
        self: Rc<Self>,
        mut after: Option<String>,
    ) -> Result<(), String> {
        loop {
            let page = retried(|| self.page(after.clone())).await?;
            let listed = u64::try_from(page.timers.len()).unwrap_or(u64::MAX);
            self.action.matched.fetch_add(listed, Ordering::Relaxed);
            for chunk in page.timers.chunks(IN_FLIGHT) {
                let tasks: Vec<_> = chunk
                    .iter()
                    .map(|t| {
                        let (run, key, version) = (self.clone(), t.key.clone(), t.version);
                        glommio::spawn_local(
                            async move { retried(|| run.cancel(&key, version)).await },
                        )
                    })
                    .collect();
                let mut failed = None;
                for task in tasks {
                    match task.await {
                        Ok(true) => {
                            self.action.cancelled.fetch_add(1, Ordering::Relaxed);
                            self.shared.actions.cancelled.inc();
                        }
                        Ok(false) => {}
                        Err(e) => failed = Some(e),
                    }
                }
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            *super::actions::lock(&self.action.after) = page.next.clone();
            self.shared.actions.save(&self.action).await;
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// One page after `after`: this node's alone, or the fleet's, whole.
    async fn page(&self, after: Option<String>) -> Try<Page> {
        let query = ListQuery {
            tenant: self.tenant.clone(),
            prefix: self.prefix.clone(),
            after: after.clone(),
            limit: PAGE,
            payloads: false,
        };
        let others = match &self.shared.node {
            Some(node) => node.routing.current().others(),
            None => Vec::new(),
        };
        let mut path = format!(
            "/v1/timers/{}?prefix={}&limit={PAGE}",
            self.tenant, self.prefix
        );
        if let Some(a) = &after {
            path = format!("{path}&after={a}");
        }
        let asks = ask(&self.peers, &others, &path, self.auth.as_ref());
        match gather_page(&self.handle, query, &others, asks).await {
            Ok((page, _)) if self.shared.node.is_none() => Try::Done(page),
            Ok((page, covered)) if covered.is_full() => Try::Done(page),
            Ok((_, covered)) => Try::Again(format!(
                "no node listed partitions {} whole",
                crate::nodes::report::ranges(&covered.missing())
            )),
            Err(e) if again(&e) => Try::Again(e.to_string()),
            Err(e) => Try::Failed(e.to_string()),
        }
    }

    /// Cancels `key` at `version` where its partition is owned now: whether it cancelled it
    /// (`false` when it fired, was cancelled or was put again since it was listed).
    async fn cancel(&self, key: &str, version: u64) -> Try<bool> {
        let view = self.shared.node.as_ref().map(|n| n.routing.current());
        let Some(peer) = forward::peer_of(view.as_deref(), &self.tenant, key) else {
            return match self
                .handle
                .cancel_if_async(&self.tenant, key, version)
                .await
            {
                Ok(Cancelled::Cancelled { .. }) => Try::Done(true),
                Ok(Cancelled::NotFound) | Err(Error::VersionMismatch { .. }) => Try::Done(false),
                Err(e) if transient(&e) => Try::Again(e.to_string()),
                Err(e) => Try::Failed(e.to_string()),
            };
        };
        let path = format!("/v1/timers/{}/{key}?if_version={version}", self.tenant);
        let out = forward::Outgoing {
            method: Method::DELETE,
            path: &path,
            auth: self.auth.as_ref(),
            body: Bytes::new(),
        };
        match self.peers.forward(&peer, out).await {
            Err(e) => Try::Again(e.to_string()),
            Ok(a) => match a.status {
                StatusCode::NO_CONTENT => Try::Done(true),
                StatusCode::NOT_FOUND | StatusCode::CONFLICT => Try::Done(false),
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
                    Try::Again(format!("the node {peer} answered {}", a.status))
                }
                s => Try::Failed(format!(
                    "the node {peer} answered {s} to a cancel of {key:?}: {}",
                    String::from_utf8_lossy(&a.body)
                )),
            },
        }
    }
}

/// Tries `step` until it is done or failed, or refused for longer than [`GIVE_UP`].
async fn retried<T, F, Fut>(mut step: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Try<T>>,
{
    let started = Instant::now();
    let mut wait = RETRY_WAIT;
    loop {
        match step().await {
            Try::Done(t) => return Ok(t),
            Try::Again(why) if started.elapsed() >= GIVE_UP => {
                return Err(format!(
                    "still refused after {} s: {why}",
                    GIVE_UP.as_secs()
                ))
            }
            Try::Again(_) => {
                glommio::timer::sleep(wait).await;
                wait = (wait * 2).min(MAX_WAIT);
            }
            Try::Failed(why) => return Err(why),
        }
    }
}

/// An answer that a moment later may not give: the shard's ring, or its store's queue, full;
/// on a node among others, a partition not held here (yet, or any longer).
pub(super) fn transient(e: &Error) -> bool {
    matches!(
        e,
        Error::RingFull { .. }
            | Error::RingShare { .. }
            | Error::StoreShare { .. }
            | Error::StoreUnavailable { .. }
            | Error::PartitionNotHeld { .. }
    )
}

/// A listing refused for a moment: a node busy, moving or not answering.
fn again(e: &ApiError) -> bool {
    matches!(
        e,
        ApiError::PeerUnavailable(_)
            | ApiError::StoreUnavailable { .. }
            | ApiError::Overloaded(_)
            | ApiError::RateLimited { .. }
    )
}
