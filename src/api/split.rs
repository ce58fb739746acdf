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
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the owners, split then place gives every item back at its own position,
        /// and each owner's items stay in order.
        #[test]
        fn split_then_place_keeps_the_items_order(owners in prop::collection::vec(prop::option::of(0u8..5), 0..200)) {
            let n = owners.len();
            let s = split(owners.clone());
            let mut out: Vec<Option<usize>> = vec![None; n];
            place(&mut out, &s.local, s.local.iter().map(|&i| Some(i)));
            for (owner, positions) in &s.remote {
                prop_assert!(positions.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(positions.iter().all(|&i| owners[i] == Some(*owner)));
                place(&mut out, positions, positions.iter().map(|&i| Some(i)));
            }
            prop_assert!(s.local.iter().all(|&i| owners[i].is_none()));
            let back: Vec<Option<usize>> = (0..n).map(Some).collect();
            prop_assert_eq!(out, back);
        }
    }

    #[test]
    fn owners_are_grouped_in_the_order_of_their_first_item() {
        let s = split(vec![Some("b"), None, Some("a"), Some("b"), None]);
        assert_eq!(
            s,
            Split {
                local: vec![1, 4],
                remote: vec![("b", vec![0, 3]), ("a", vec![2])],
            }
        );
    }

    fn json(items: &[BatchItem]) -> String {
        serde_json::to_string(items).expect("serialises")
    }

    #[test]
    fn an_owner_answer_is_relayed_item_by_item_and_nothing_else_passes_for_success() {
        crate::runtime::cooperate::on_executor(owner_answers());
    }

    async fn owner_answers() {
        let keys = || vec![Some("a".to_string()), Some("b".to_string())];
        let ok = br#"{"results":[{"key":"a","status":201,"fire_at_us":5,"version":1},{"key":"b","status":503,"error":{"code":"store_unavailable","message":"m"}}]}"#;
        assert_eq!(
            json(&results(StatusCode::OK, ok, keys(), "p:1").await),
            r#"[{"key":"a","status":201,"fire_at_us":5,"version":1},{"key":"b","status":503,"error":{"code":"store_unavailable","message":"m"}}]"#
        );
        // One result short: no item is taken as applied.
        let short = br#"{"results":[{"key":"a","status":201,"fire_at_us":5,"version":1}]}"#;
        let r = json(&results(StatusCode::OK, short, keys(), "p:1").await);
        assert_eq!(
            r.matches(r#""status":503,"error":{"code":"peer_unavailable""#)
                .count(),
            2,
            "{r}"
        );
        // Refused whole: each item carries the owner's status and error.
        let refused = br#"{"error":{"code":"rate_limited","message":"slow down"}}"#;
        assert_eq!(
            json(&results(StatusCode::TOO_MANY_REQUESTS, refused, keys(), "p:1").await),
            r#"[{"key":"a","status":429,"error":{"code":"rate_limited","message":"slow down"}},{"key":"b","status":429,"error":{"code":"rate_limited","message":"slow down"}}]"#
        );
        let r = json(&results(StatusCode::BAD_GATEWAY, b"<html>", keys(), "p:1").await);
        assert_eq!(r.matches("peer_unavailable").count(), 2, "{r}");
        // An answer of 200 that is not one result per item, whole: nothing passes.
        for bad in [
            &br#"{"results":[{"key":"a"},{"key":"b"}],"x":1}"#[..],
            br#"{"results":[{"key":"a"},{"key":"b"},]}"#,
            br#"{"results":[{"key":"a"},{"key":"b"}"#,
            br#"{"results":[{"key":"a"},{"key":"b"},{"key":"c"}]}"#,
            b"",
        ] {
            let r = json(&results(StatusCode::OK, bad, keys(), "p:1").await);
            assert_eq!(r.matches("peer_unavailable").count(), 2, "{r}");
        }
    }

    /// Prints what a sub-batch's two big steps took whole, as before: encoding 16 MB of items
    /// for the owner, and reading 10,000 results back; against the longest step of each now,
    /// with a 200 µs slice (the test binary runs on the system's allocator, not the
    /// service's: `perf/probes/buffer_growth.rs` shows what a growing buffer costs under it).
    ///
    /// `cargo test --release --lib sub_batch_figure -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn sub_batch_figure() {
        use crate::api::array::ArrayScan;
        use std::time::{Duration, Instant};
        #[derive(serde::Serialize)]
        struct Sub<'a> {
            timers: &'a [&'a RawValue],
        }
        #[derive(Deserialize)]
        struct Results {
            results: Vec<Box<RawValue>>,
        }
        let texts: Vec<String> = (0..10_000)
            .map(|i| {
                format!(
                    r#"{{"key":"order-{i:06}","delay_ms":1,"payload":"{}"}}"#,
                    "x".repeat(1_600)
                )
            })
            .collect();
        let items: Vec<&RawValue> = texts
            .iter()
            .map(|t| serde_json::from_str(t).expect("JSON"))
            .collect();
        let answer = format!(
            r#"{{"results":[{}]}}"#,
            (0..10_000)
                .map(|i| format!(r#"{{"key":"order-{i:06}","status":201,"version":{i},"fire_at_us":1700000000000000}}"#))
                .collect::<Vec<_>>()
                .join(",")
        );
        crate::runtime::cooperate::on_executor(async move {
            for round in 0..3 {
                let t = Instant::now();
                let whole = serde_json::to_vec(&Sub { timers: &items }).expect("JSON");
                let encode_whole = t.elapsed();
                crate::runtime::cooperate::longest_slice();
                let sliced = encode_array_of("timers", &items, raw_bytes(items.iter().copied()))
                    .await
                    .expect("JSON");
                let longest_encode = crate::runtime::cooperate::longest_slice();
                assert_eq!(sliced, whole);
                let t = Instant::now();
                let r: Results = serde_json::from_slice(answer.as_bytes()).expect("JSON");
                let read_whole = t.elapsed();
                let mut scan = ArrayScan::new(answer.as_bytes(), "results").expect("opens");
                let (mut longest_read, mut n) = (Duration::ZERO, 0);
                loop {
                    let t = Instant::now();
                    let done = scan
                        .step(
                            || t.elapsed() >= Duration::from_micros(200),
                            |_| {
                                n += 1;
                                Ok(())
                            },
                        )
                        .expect("results");
                    longest_read = longest_read.max(t.elapsed());
                    if done {
                        break;
                    }
                }
                assert_eq!(n, r.results.len());
                println!(
                    "round {round}: encoding {:.1} MB of items whole {:.2} ms, longest step now {:.0} µs; \
                     reading {} results ({:.2} MB) whole {:.2} ms, longest step now {:.0} µs",
                    whole.len() as f64 / 1e6,
                    encode_whole.as_secs_f64() * 1e3,
                    longest_encode.as_secs_f64() * 1e6,
                    n,
                    answer.len() as f64 / 1e6,
                    read_whole.as_secs_f64() * 1e3,
                    longest_read.as_secs_f64() * 1e6,
                );
            }
        });
    }
}
