//! Recurring schedules on nodes that share a Redis Cluster (`serve --advertise`): each node
//! holds the schedules of the partitions it owns, so a listing and the `max_schedules` count
//! ask every other live node for its own, as the timers' listing does (`list.rs`).
//!
//! - `GET /v1/schedules/{tenant}` asks every other live node for the same page at once (the
//!   request goes forwarded, so each answers from its own partitions) and merges the pages by
//!   key: each node's first `limit` are all it can give to the first `limit` of the whole.
//! - A creation counts the schedules every node holds, up to the room left under the quota:
//!   this node's through its shards, each other's by its listing, a page of 1,000 at a time.
//!
//! A node that does not answer fails the request (`503 peer_unavailable`): a listing or a
//! count without it would be short. While a partition moves between nodes its schedules may be
//! missed by a listing taken at that moment, or counted by both; creations racing on two nodes
//! at the edge of the quota are not counted by each other, so they may pass it by one each.
//!
//! Cost: one forwarded `GET` per other node per listing; per creation, one per 1,000 schedules
//! the other nodes hold (none on a lone node).

use super::error::ApiError;
use super::list::{ask, Asks};
use super::state::App;
use hyper::header::HeaderValue;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The most a page asked of another node for a count holds.
const COUNT_PAGE: usize = 1_000;

#[derive(Serialize, Deserialize)]
pub(super) struct ListItem {
    pub(super) key: String,
    pub(super) version: u64,
    pub(super) paused: bool,
    pub(super) sequence: u64,
}

#[derive(Serialize, Deserialize)]
pub(super) struct ListView {
    pub(super) schedules: Vec<ListItem>,
    pub(super) next: Option<String>,
}

impl App {
    /// The other live nodes, on a node among others (none elsewhere), and each of them asked
    /// for `GET path` at once.
    pub(super) fn ask_peers(
        &self,
        path: &str,
        auth: Option<&HeaderValue>,
    ) -> (Vec<Arc<str>>, Asks) {
        let others = self.peers_live();
        let asks = ask(&self.peers, &others, path, auth);
        (others, asks)
    }

    /// How many schedules of `tenant` the other live nodes hold, counted up to `room`: each
    /// node's listing, followed page by page.
    pub(super) async fn count_on_peers(
        &self,
        tenant: &str,
        room: usize,
        auth: Option<&HeaderValue>,
    ) -> Result<usize, ApiError> {
        let others = self.peers_live();
        let mut held = 0usize;
        for peer in &others {
            let mut after: Option<String> = None;
            while held < room {
                let path = match &after {
                    None => format!("/v1/schedules/{tenant}?limit={COUNT_PAGE}"),
                    Some(k) => format!("/v1/schedules/{tenant}?limit={COUNT_PAGE}&after={k}"),
                };
                let mut asks = ask(&self.peers, std::slice::from_ref(peer), &path, auth);
                let Some(one) = asks.pop() else { break };
                let page = page_of(peer, one.await?)?;
                held += page.schedules.len();
                match page.next {
                    Some(k) => after = Some(k),
                    None => break,
                }
            }
        }
        Ok(held.min(room))
    }

    /// The other live nodes, on a node among others; none elsewhere.
    fn peers_live(&self) -> Vec<Arc<str>> {
        self.shared
            .node
            .as_ref()
            .map(|n| n.routing.current().others())
            .unwrap_or_default()
    }
}

/// `mine` (this node's page) merged by key with the pages `others` answered to `asks`: the
/// first `limit`, and the key to go on after when any node has more.
pub(super) async fn merged(
    mut mine: ListView,
    limit: usize,
    others: &[Arc<str>],
    asks: Asks,
) -> Result<ListView, ApiError> {
    for (peer, ask) in others.iter().zip(asks) {
        let theirs = page_of(peer, ask.await?)?;
        let more = mine.next.is_some() || theirs.next.is_some();
        mine.schedules.extend(theirs.schedules);
        mine.schedules.sort_by(|a, b| a.key.cmp(&b.key));
        // A schedule met on two nodes (its partition moving): the later write.
        mine.schedules.dedup_by(|a, b| {
            let same = a.key == b.key;
            if same && a.version > b.version {
                std::mem::swap(a, b);
            }
            same
        });
        mine.next = (more || mine.schedules.len() > limit)
            .then(|| {
                mine.schedules
                    .get(limit.min(mine.schedules.len()).saturating_sub(1))
            })
            .flatten()
            .map(|i| i.key.clone());
        mine.schedules.truncate(limit);
    }
    Ok(mine)
}

/// A peer's answer to a schedules listing, read; what is not one fails the request.
fn page_of(peer: &str, answer: super::forward::Answer) -> Result<ListView, ApiError> {
    let unusable = |why: String| {
        ApiError::PeerUnavailable(format!(
            "the node {peer} did not give its schedules ({why}); the answer needs every node's"
        ))
    };
    if answer.status != StatusCode::OK {
        return Err(unusable(format!("it answered {}", answer.status)));
    }
    serde_json::from_slice(&answer.body).map_err(|e| unusable(e.to_string()))
}
