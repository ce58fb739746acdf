//! `POST /v1/timers/{tenant}`: up to 10,000 registrations, applied in order, one result each.
//!
//! Items are pushed onto their shards' rings in chunks of [`CHUNK`] without waiting, then the
//! chunk's answers are awaited in order; a chunk bounds how much of a ring one batch may fill.
//! Items for the same key go to the same ring, whose order is FIFO, so the later one replaces
//! the earlier. An item fails alone (400, 413, 429, 503); the batch answers 200.
//!
//! The work runs on the shard whose executor read the request, so it is cut into slices of
//! about 200 µs (`cooperate`): the body is split into items a slice at a time (`scan.rs`),
//! then items are checked and pushed a slice at a time, and between slices the task yields to
//! the executor, whose shard loop and I/O then run. A 16 MiB batch delays the shard's timers
//! by a slice, not by the whole parse.

use super::body::parse_item;
use super::error::ApiError;
use super::respond::{BatchBody, BatchItem};
use super::scan::{BatchScan, Step};
use super::split::{self, Owners};
use super::state::App;
use crate::engine::Scheduled;
use crate::error::{validate_name, NameKind};
use crate::quota::{Quota, QuotaSlot};
use crate::runtime::cooperate::Slice;
use serde_json::value::RawValue;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Items pushed before their answers are awaited.
const CHUNK: usize = 1024;

/// Items handled between two looks at the slice (`cooperate`). An item of a kilobyte and more
/// takes a few microseconds to check and push, so 32 of them overrun a slice by about a
/// tenth; at 128, a look came 0.3–0.5 ms after the slice had ended.
const CHECK_EVERY: usize = 32;

type Pending = Pin<Box<dyn Future<Output = crate::Result<Scheduled>> + Send>>;

enum Slot {
    /// Pushed; the answer is awaited with the chunk.
    Waiting {
        key: String,
        fut: Pending,
    },
    Done(BatchItem),
}

/// Runs the batch: `{"results": [...]}`, one per item, in order.
pub async fn run(
    app: &App,
    tenant: &str,
    body: &[u8],
    now: crate::units::UtcMicros,
    owners: &Owners,
) -> Result<BatchBody, ApiError> {
    let items = scan(body).await?;
    // On a node among others, the items other nodes own are on their way to them first.
    let (remote, sent) = send_remote(app, tenant, &items, owners).await;
    let quota = app.handle.quota(tenant);
    let mut c = Collect {
        slots: Vec::with_capacity(CHUNK.min(items.len())),
        out: Vec::with_capacity(items.len()),
        slice: Slice::begin(),
    };
    for (i, item) in items.iter().enumerate() {
        if i % CHECK_EVERY == CHECK_EVERY - 1 && c.slice.is_over() {
            c.slice.next().await;
        }
        let slot = if remote.get(i).copied().unwrap_or(false) {
            // Answered by its owner, below; this stands only if that answer were lost.
            Slot::Done(BatchItem::failed(None, &not_answered()))
        } else {
            local(app, tenant, item, now, quota, &mut c).await
        };
        c.slots.push(slot);
        if c.slots.len() == CHUNK || i + 1 == items.len() {
            c.finish_chunk().await;
        }
    }
    let mut out = c.out;
    for (positions, task) in sent {
        let answers = task.await;
        split::place(&mut out, &positions, answers);
    }
    Ok(BatchBody { results: out })
}

fn not_answered() -> ApiError {
    ApiError::PeerUnavailable("the node that owns this partition gave no answer".into())
}

/// Sends the items another node owns to it (`split.rs`), one sub-batch per owner, all at
/// once: which items went, and per owner its items' positions and the task that answers them.
async fn send_remote(
    app: &App,
    tenant: &str,
    items: &[&RawValue],
    owners: &Owners,
) -> (Vec<bool>, Vec<(Vec<usize>, glommio::Task<Vec<BatchItem>>)>) {
    if owners.view.is_none() {
        return (Vec::new(), Vec::new());
    }
    let mut slice = Slice::begin();
    let mut peers = Vec::with_capacity(items.len());
    let mut keys = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if i % CHECK_EVERY == CHECK_EVERY - 1 && slice.is_over() {
            slice.next().await;
        }
        let (peer, key) = owners.peer_of(tenant, item).unzip();
        peers.push(peer);
        keys.push(key);
    }
    let mut remote = vec![false; items.len()];
    let mut sent = Vec::new();
    for (peer, positions) in split::split(peers).remote {
        let sub: Vec<&RawValue> = positions
            .iter()
            .filter_map(|&i| items.get(i).copied())
            .collect();
        let sub_keys = positions
            .iter()
            .map(|&i| keys.get_mut(i).and_then(Option::take))
            .collect();
        for &i in &positions {
            if let Some(r) = remote.get_mut(i) {
                *r = true;
            }
        }
        let auth = owners.auth.clone();
        let task = split::send(app.peers.clone(), peer, tenant, auth, &sub, sub_keys).await;
        sent.push((positions, task));
    }
    (remote, sent)
}

/// One item answered here: checked, and pushed to its shard's ring.
async fn local(
    app: &App,
    tenant: &str,
    item: &RawValue,
    now: crate::units::UtcMicros,
    quota: Option<&Arc<Quota>>,
    c: &mut Collect,
) -> Slot {
    match parse_item(item, now) {
        Err((key, e)) => Slot::Done(BatchItem::failed(key, &e)),
        Ok((key, reg)) => match validate_name(NameKind::Key, &key) {
            Err(e) => Slot::Done(BatchItem::failed(Some(key), &ApiError::from(e))),
            Ok(()) => match app.meta_for(tenant, &reg) {
                Err(e) => Slot::Done(BatchItem::failed(Some(key), &e)),
                Ok(meta) => {
                    // Items past the quota are refused in item order: take a slot here, and
                    // when none is left, let the earlier items settle first (replacements give
                    // theirs back). Without a slot the shard still takes the item if it
                    // replaces a pending timer, and refuses it otherwise.
                    let mut held = quota.and_then(QuotaSlot::reserve);
                    if quota.is_some() && held.is_none() && !c.slots.is_empty() {
                        c.finish_chunk().await;
                        held = quota.and_then(QuotaSlot::reserve);
                    }
                    let fut = Box::pin(app.handle.schedule_guarded(
                        tenant,
                        &key,
                        reg.deadline,
                        reg.payload,
                        &meta,
                        held,
                        reg.terms,
                    ));
                    Slot::Waiting { key, fut }
                }
            },
        },
    }
}

/// Encodes the answer a slice at a time, as `serde_json` encodes the whole [`BatchBody`]
/// (10,000 results are about a megabyte of JSON: a few milliseconds in one stretch). Each
/// result is dropped once written, inside the slices (10,000 keys freed at once are a
/// stretch of their own), and the task yields at the end if its slice is used up, so that
/// the answer's first writes start a slice of their own.
pub async fn encode(body: BatchBody) -> Result<Vec<u8>, serde_json::Error> {
    const OPEN: &[u8] = br#"{"results":["#;
    let mut out = Vec::with_capacity(OPEN.len() + 2 + 96 * body.results.len());
    out.extend_from_slice(OPEN);
    let mut slice = Slice::begin();
    for (i, item) in body.results.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &item)?;
        if i % CHECK_EVERY == CHECK_EVERY - 1 && slice.is_over() {
            slice.next().await;
        }
    }
    out.extend_from_slice(b"]}");
    if slice.is_over() {
        slice.next().await;
    }
    Ok(out)
}

/// The body's items, or its refusal, scanned a slice at a time whatever the body holds
/// (`scan.rs`, the one batch parser).
async fn scan(body: &[u8]) -> Result<Vec<&RawValue>, ApiError> {
    let mut scan = BatchScan::new(body);
    let mut slice = Slice::begin();
    loop {
        match scan.step(|| slice.is_over()) {
            Step::Done(items) => return Ok(items),
            Step::More => slice.next().await,
            Step::Refused(e) => return Err(e),
        }
    }
}

/// The items pushed and awaiting their answers (`slots`), the answers collected in order
/// (`out`), and the slice the batch's task runs in.
struct Collect {
    slots: Vec<Slot>,
    out: Vec<BatchItem>,
    slice: Slice,
}

impl Collect {
    /// Collects a chunk's answers in order. The shard may have applied hundreds of them by
    /// the time this task runs again, so their collection (a future's poll and drop each)
    /// looks at the slice too.
    async fn finish_chunk(&mut self) {
        for (i, slot) in self.slots.drain(..).enumerate() {
            if i % CHECK_EVERY == CHECK_EVERY - 1 && self.slice.is_over() {
                self.slice.next().await;
            }
            self.out.push(match slot {
                Slot::Done(item) => item,
                Slot::Waiting { key, fut } => match fut.await {
                    Ok(s) => BatchItem::scheduled(key, &s),
                    Err(e) => BatchItem::failed(Some(key), &ApiError::from(e)),
                },
            });
        }
    }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
