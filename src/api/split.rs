//! A batch split by owner: on a node among others, the items whose partition another node
//! owns are sent to it as one sub-batch per owner, all at once, while the local items are
//! applied here; the answers are merged back in the items' order.
//!
//! # What this part owns
//!
//! Which items go where ([`split`]: the local positions, and per owner its items' positions in
//! order), the sub-batch sent to an owner ([`send`]), the reading of its answer into one
//! result per item, and their placing at the items' positions ([`place`]).
//!
//! # Invariants
//!
//! - Every item gets exactly one result, at its own position: the items of one owner keep
//!   their relative order in its sub-batch (so two items of one key, which have one owner,
//!   are applied in the batch's order), and [`place`] puts each answer where its item was.
//! - An item is reported applied only if its owner answered so: a result is relayed as the
//!   owner gave it; a sub-batch that got no answer (not reached, too many forwards, past the
//!   deadline), or one whose answer does not hold one result per item, answers each of its
//!   items `503 peer_unavailable`; one the owner refused whole (401, 429, 413…) answers each
//!   item with the owner's status and error.
//! - Items whose key cannot be read here stay local: this node answers their error as the
//!   owner would.
//!
//! # Cost model
//!
//! Only on a node among others, and only for a request that did not come forwarded: one
//! extra parse of each item for its key (a slice at a time, `cooperate`), its partition, and
//! a look at the routing view. Per owner: one sub-batch body (the items' JSON copied once)
//! and one forward (`forward.rs`), all owners' in flight together.

use super::array::read_array;
use super::error::ApiError;
use super::forward::{self, Outgoing, Peers};
use super::respond::{encode_array_of, raw_bytes, BatchItem};
use crate::error::{validate_name, NameKind};
use crate::nodes::routing::Routing;
use hyper::header::HeaderValue;
use hyper::{Method, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::rc::Rc;
use std::sync::Arc;

/// What a batch needs to send items on: the routing view (none on a node alone or for a
/// batch that came forwarded) and the caller's `Authorization`, passed on as it came.
pub struct Owners {
    pub view: Option<Arc<Routing>>,
    pub auth: Option<HeaderValue>,
}

impl Owners {
    /// The node to send `item` to, and the item's key, when its key can be read and another
    /// node owns it.
    pub fn peer_of(&self, tenant: &str, item: &RawValue) -> Option<(Arc<str>, String)> {
        #[derive(Deserialize)]
        struct Keyed<'a> {
            #[serde(borrow)]
            key: std::borrow::Cow<'a, str>,
        }
        let view = self.view.as_deref()?;
        let keyed: Keyed = serde_json::from_str(item.get()).ok()?;
        validate_name(NameKind::Key, &keyed.key).ok()?;
        let peer = forward::peer_of(Some(view), tenant, &keyed.key)?;
        Some((peer, keyed.key.into_owned()))
    }
}

/// The items grouped by where they go.
#[derive(Debug, PartialEq, Eq)]
pub struct Split<O> {
    /// Positions of the items answered here, increasing.
    pub local: Vec<usize>,
    /// Per owner (in the order of its first item), its items' positions, increasing.
    pub remote: Vec<(O, Vec<usize>)>,
}

/// Groups positions by owner (`None`: here).
pub fn split<O: PartialEq>(owners: Vec<Option<O>>) -> Split<O> {
    let mut out = Split {
        local: Vec::new(),
        remote: Vec::new(),
    };
    for (i, owner) in owners.into_iter().enumerate() {
        match owner {
            None => out.local.push(i),
            Some(o) => match out.remote.iter_mut().find(|(x, _)| *x == o) {
                Some((_, positions)) => positions.push(i),
                None => out.remote.push((o, vec![i])),
            },
        }
    }
    out
}

/// Puts `answers` at `positions` of `out`, in order; positions out of range are skipped.
pub fn place<T>(out: &mut [T], positions: &[usize], answers: impl IntoIterator<Item = T>) {
    for (&i, a) in positions.iter().zip(answers) {
        if let Some(slot) = out.get_mut(i) {
            *slot = a;
        }
    }
}

/// Sends `items` (with their keys, for the results of a failure) to `peer` as one sub-batch
/// of `tenant`, on a task of this shard's: one result per item, in order. The sub-batch is
/// encoded, and its results read, an item at a time with looks at the slice (up to 16 MiB of
/// items, and about 100 bytes of result each).
pub async fn send(
    peers: Rc<Peers>,
    peer: Arc<str>,
    tenant: &str,
    auth: Option<HeaderValue>,
    items: &[&RawValue],
    keys: Vec<Option<String>>,
) -> glommio::Task<Vec<BatchItem>> {
    let path = format!("/v1/timers/{tenant}");
    let bytes = raw_bytes(items.iter().copied());
    let body = encode_array_of("timers", items, bytes).await;
    glommio::spawn_local(async move {
        let body = match body {
            Ok(b) => b,
            Err(e) => return failed(keys, &ApiError::Internal(format!("sub-batch: {e}"))),
        };
        let out = Outgoing {
            method: Method::POST,
            path: &path,
            auth: auth.as_ref(),
            body: body.into(),
        };
        match peers.forward(&peer, out).await {
            Ok(answer) => results(answer.status, &answer.body, keys, &peer).await,
            Err(e) => failed(keys, &ApiError::from(e)),
        }
    })
}

/// The results of a sub-batch of `keys.len()` items from its owner's answer.
async fn results(
    status: StatusCode,
    body: &[u8],
    keys: Vec<Option<String>>,
    peer: &str,
) -> Vec<BatchItem> {
    #[derive(Deserialize)]
    struct Refused {
        error: Box<RawValue>,
    }
    if status == StatusCode::OK {
        let mut out = Vec::with_capacity(keys.len());
        let read = read_array(body, "results", |r| {
            out.push(BatchItem::Relayed(r));
            Ok(())
        })
        .await;
        if read.is_ok() && out.len() == keys.len() {
            return out;
        }
        return failed(
            keys,
            &ApiError::PeerUnavailable(format!(
                "the node {peer} that owns this partition did not answer one result per item"
            )),
        );
    }
    match serde_json::from_slice::<Refused>(body) {
        Ok(r) => keys
            .into_iter()
            .map(|key| BatchItem::RelayedError {
                key,
                status: status.as_u16(),
                error: r.error.clone(),
            })
            .collect(),
        Err(_) => failed(
            keys,
            &ApiError::PeerUnavailable(format!(
                "the node {peer} that owns this partition answered {status} without an error body"
            )),
        ),
    }
}

fn failed(keys: Vec<Option<String>>, e: &ApiError) -> Vec<BatchItem> {
    keys.into_iter().map(|k| BatchItem::failed(k, e)).collect()
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
