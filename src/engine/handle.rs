//! [`Handle`]: how any thread schedules, cancels and reads timers. Cloneable and `Send`.
//!
//! Every call validates its arguments on the caller's thread, packs tenant, key and payload
//! into one allocation, and pushes it onto the ring of the shard that owns the key (see
//! `partition`). The blocking forms wait for the shard's answer; the `_async` forms return a
//! future instead, for callers on an executor; `schedule_detached` does not wait at all.

use crate::clock::clock_ns;
use crate::error::{validate_name, Error, NameKind, Result};
use crate::metrics::ShardMetrics;
use crate::op::{
    reply_channel, Cancelled, DeadInfo, Guarded, Op, Reply, Scheduled, Terms, TimerInfo,
};
use crate::quota::{Quota, QuotaSlot, Quotas};
use crate::ring::Ring;
use crate::runtime::doorbell::relay;
use crate::store::StoreState;
use crate::timer::PackedTimer;
use crate::units::{Deadline, UtcMicros, TEN_YEARS_US};
use futures_lite::future::block_on;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Largest payload, in bytes: 65,536 bytes of JSON text (docs/API.md).
pub const MAX_PAYLOAD: usize = 65_536;

/// The most bytes of dead letters' bodies one shard is asked to copy in one op while a listing
/// gathers its page: about 0.1–0.3 ms of copying, in the order of the shard's cooperation
/// slice, so a listing does not hold up the timers of the shard's other tenants.
pub const BODIES_PER_ASK: usize = 1 << 20;

/// What every clone of a [`Handle`] shares: each shard's ring and metrics, the tenants'
/// quotas, which store the shards use, and whether the engine is stopping.
pub(super) struct Shards {
    /// "journal", "memory" or "redis" (`StoreKind::name`).
    pub(super) store_kind: &'static str,
    pub(super) quotas: Arc<Quotas>,
    /// The tenants' pull queues (`queue`).
    pub(super) queues: Arc<crate::queue::PullQueues>,
    pub(super) rings: Vec<Arc<Ring>>,
    pub(super) metrics: Vec<Arc<ShardMetrics>>,
    pub(super) stopping: AtomicBool,
    /// The history of fires and deliveries, when it is kept.
    pub(super) history: Option<Arc<crate::history::History>>,
}

/// A cloneable, `Send` handle on the engine's shards.
#[derive(Clone)]
pub struct Handle {
    pub(super) inner: Arc<Shards>,
}

impl Handle {
    /// The shards as the node's loop hands them partitions to load and drop
    /// (`nodes::start::spawn`). Only shards built with `EngineBuilder::partition_holders` act
    /// on them; others ignore them.
    pub fn partitions(&self) -> Arc<dyn crate::nodes::reader::Shards> {
        Arc::new(super::handover::Rings(self.inner.rings.clone()))
    }

    /// On a node that shares a Redis Cluster: the partitions its shards have loaded and act
    /// on, all shards together (0 elsewhere).
    pub fn partitions_loaded(&self) -> u64 {
        self.sum(|m| &m.partitions_loaded)
    }

    /// On a node that shares a Redis Cluster: due timers the shards took off their wheels
    /// unfired because their partition's lease was no longer valid, all shards together.
    pub fn unfired(&self) -> u64 {
        self.sum(|m| &m.unfired_total)
    }

    /// A per-shard figure summed over the shards.
    fn sum(&self, pick: impl Fn(&ShardMetrics) -> &std::sync::atomic::AtomicU64) -> u64 {
        self.inner
            .metrics
            .iter()
            .map(|m| pick(m).load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    pub fn shards(&self) -> usize {
        self.inner.rings.len()
    }

    /// The shard that owns (tenant, key): the owner of its partition (`partition`), so that
    /// the routing and the durable layout agree for any shard count.
    pub fn shard_for(&self, tenant: &str, key: &str) -> usize {
        crate::partition::shard_of(tenant, key, self.inner.rings.len())
    }

    /// Which store the shards use: "journal", "memory" or "redis".
    /// The history of fires and deliveries, when it is kept (`crate::history`).
    pub fn history(&self) -> Option<&crate::history::History> {
        self.inner.history.as_deref()
    }

    pub fn store_kind(&self) -> &'static str {
        self.inner.store_kind
    }

    /// The shards whose thread panicked (`shard::failure`): their rings are closed, and every
    /// call to them is answered [`Error::ShuttingDown`].
    pub fn failed_shards(&self) -> Vec<usize> {
        (self.inner.metrics.iter().enumerate())
            .filter(|(_, m)| m.failed.load(Ordering::Relaxed) != 0)
            .map(|(i, _)| i)
            .collect()
    }

    /// Each shard's store state (`InMemory` for all without Redis).
    pub fn store_states(&self) -> Vec<StoreState> {
        self.inner.metrics.iter().map(|m| m.store.state()).collect()
    }

    /// True when the store is in memory, or when every shard's store is recovered and can
    /// take writes (not connecting, stalled on a full disk or failed):
    /// what `/healthz` reports.
    pub fn store_healthy(&self) -> bool {
        self.store_states()
            .iter()
            .all(|s| matches!(s, StoreState::InMemory | StoreState::Ready))
    }

    /// Waits until [`Handle::store_healthy`], up to `timeout`; whether it became so.
    pub fn wait_store_ready(&self, timeout: Duration) -> bool {
        let give_up = std::time::Instant::now() + crate::units::capped(timeout);
        loop {
            if self.store_healthy() {
                return true;
            }
            if std::time::Instant::now() >= give_up {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// (tenant, length) of every fired stream (`punctual_stream_length`), sampled every
    /// few seconds; empty without Redis.
    pub fn stream_lengths(&self) -> Vec<(String, u64)> {
        self.inner
            .metrics
            .first()
            .and_then(|m| m.store.stream_lengths.lock().ok().map(|l| l.clone()))
            .unwrap_or_default()
    }

    /// Each shard's store metrics (`punctual_store_*`).
    pub fn store_metrics(&self) -> Vec<Arc<ShardMetrics>> {
        self.inner.metrics.clone()
    }

    /// The system's UTC time (CLOCK_REALTIME), in µs; what `delay_ms` is counted from.
    pub fn now(&self) -> UtcMicros {
        UtcMicros(clock_ns(libc::CLOCK_REALTIME) / 1_000)
    }

    /// Schedules (upserts) a timer and waits for the shard's answer.
    pub fn schedule(
        &self,
        tenant: &str,
        key: &str,
        deadline: Deadline,
        payload: &[u8],
    ) -> Result<Scheduled> {
        block_on(self.schedule_async(tenant, key, deadline, payload))
    }

    /// `schedule` for callers on an executor: the push happens now, the answer comes later.
    pub fn schedule_async(
        &self,
        tenant: &str,
        key: &str,
        deadline: Deadline,
        payload: &[u8],
    ) -> impl Future<Output = Result<Scheduled>> + Send + 'static {
        self.schedule_holding(tenant, key, deadline, payload, None)
    }

    /// `schedule_async` with a quota slot the caller took already ([`Handle::quota`]): callers
    /// that must refuse in their own order (a batch) reserve first. The shard keeps the slot
    /// for a new timer and gives it back otherwise.
    pub fn schedule_holding(
        &self,
        tenant: &str,
        key: &str,
        deadline: Deadline,
        payload: &[u8],
        slot: Option<QuotaSlot>,
    ) -> impl Future<Output = Result<Scheduled>> + Send + 'static {
        self.schedule_with_meta(tenant, key, deadline, payload, &[], slot)
    }

    /// `schedule_holding` with delivery metadata: a callback's state, encoded by
    /// `sink::webhook::meta` (empty: none).
    pub fn schedule_with_meta(
        &self,
        tenant: &str,
        key: &str,
        deadline: Deadline,
        payload: &[u8],
        meta: &[u8],
        slot: Option<QuotaSlot>,
    ) -> impl Future<Output = Result<Scheduled>> + Send + 'static {
        let (tx, rx) = reply_channel();
        let pushed = self.push_schedule(tenant, key, deadline, payload, meta, Some(tx), slot);
        answer(pushed, rx)
    }

    /// `schedule_with_meta` with terms (a condition, a debounce), which the owning shard
    /// checks against its table in the same step as the write: `Exists`, `VersionMismatch`
    /// or `NotPending` when the condition does not hold (nothing changed). Plain terms are a
    /// plain schedule.
    #[allow(clippy::too_many_arguments)]
    pub fn schedule_guarded(
        &self,
        tenant: &str,
        key: &str,
        deadline: Deadline,
        payload: &[u8],
        meta: &[u8],
        slot: Option<QuotaSlot>,
        terms: Terms,
    ) -> impl Future<Output = Result<Scheduled>> + Send + 'static {
        let (tx, rx) = reply_channel();
        let pushed = if terms.is_plain() {
            self.push_schedule(tenant, key, deadline, payload, meta, Some(tx), slot)
        } else {
            self.checked_deadline(deadline)
                .and_then(|()| self.pack_with_meta(tenant, key, meta, payload))
                .and_then(|timer| {
                    let shard = self.shard_for(tenant, key);
                    let op = Op::Guarded(Box::new(Guarded {
                        timer,
                        deadline,
                        terms,
                        reply: tx,
                        slot,
                        home: crate::shard::on_thread() == Some(shard),
                    }));
                    self.push_to(shard, tenant, op)
                })
        };
        answer(pushed, rx)
    }

    /// Cancels the pending timer under (tenant, key) only if its version is `version`:
    /// `VersionMismatch` (nothing changed) when another version is pending, `NotFound` when
    /// none is.
    pub fn cancel_if_async(
        &self,
        tenant: &str,
        key: &str,
        version: u64,
    ) -> impl Future<Output = Result<Cancelled>> + Send + 'static {
        self.call(tenant, key, move |timer, reply| Op::CancelIf {
            timer,
            version,
            reply,
        })
    }

    /// Up to `limit` dead letters of `tenant` with a key after `after`, by key, gathered
    /// from every shard. The keys come first (no body copied), then the page's bodies, in
    /// consecutive key ranges of at most [`BODIES_PER_ASK`] bytes each: each shard that holds
    /// some of a range sends its letters there, and the next range is asked once the last has
    /// come back. A page of a thousand 128 KiB letters was one copy of 128 MiB on a shard's
    /// thread, which stopped every tenant's timers there for tens of milliseconds.
    pub fn dead_letters_async(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DeadInfo>>> + Send + 'static {
        let checked = validate_name(NameKind::Tenant, tenant);
        let stopping = self.inner.stopping.load(Ordering::Acquire);
        let inner = self.inner.clone();
        let (tenant, after) = (tenant.to_string(), after.map(str::to_string));
        let all: Vec<usize> = (0..inner.rings.len()).collect();
        let first = (checked.is_ok() && !stopping).then(|| {
            let keys = DeadPage {
                tenant: &tenant,
                after: after.as_deref(),
                through: None,
                limit,
                bodies: false,
            };
            keys.ask(&inner.rings, &all)
        });
        async move {
            checked?;
            let Some(first) = first else {
                return Err(Error::ShuttingDown);
            };
            let per_shard = gather(first).await?;
            let page = merge(per_shard.iter().flatten().cloned().collect(), limit);
            let mut listed: Vec<DeadInfo> = Vec::with_capacity(page.len());
            let mut from = after;
            for part in DeadInfo::parts(&page, BODIES_PER_ASK) {
                let Some(through) = part.last().map(|l| l.key.as_str()) else {
                    continue;
                };
                let in_range = |l: &DeadInfo| {
                    from.as_deref().is_none_or(|f| l.key.as_str() > f) && l.key.as_str() <= through
                };
                let holders: Vec<usize> = per_shard
                    .iter()
                    .enumerate()
                    .filter(|(_, letters)| letters.iter().any(in_range))
                    .map(|(i, _)| i)
                    .collect();
                // The shards' limit is the page's, not the part's: a letter filed in the range
                // since the keys were read must not push the range's last key out, or the next
                // range, which starts after it, would skip it.
                let bodies = DeadPage {
                    tenant: &tenant,
                    after: from.as_deref(),
                    through: Some(through),
                    limit: limit - listed.len(),
                    bodies: true,
                };
                let got = gather(bodies.ask(&inner.rings, &holders)).await?;
                listed.extend(merge(got.into_iter().flatten().collect(), limit));
                if listed.len() >= limit {
                    break;
                }
                from = Some(through.to_string());
            }
            // Each range came back whole and the ranges follow one another, so the first
            // `limit` of all of them are the page.
            listed.truncate(limit);
            Ok(listed)
        }
    }

    /// Re-drives the dead letter under (tenant, key): pending again, due now, with a fresh
    /// attempt budget. `DeadLetterNotFound` without one; `TimerPending` while a timer is
    /// pending under the key.
    pub fn redrive_async(
        &self,
        tenant: &str,
        key: &str,
    ) -> impl Future<Output = Result<Scheduled>> + Send + 'static {
        self.call_letter(tenant, key, |timer, reply| Op::DeadRedrive { timer, reply })
    }

    /// Discards the dead letter under (tenant, key): `Cancelled`, or `NotFound` without one.
    pub fn discard_dead_async(
        &self,
        tenant: &str,
        key: &str,
    ) -> impl Future<Output = Result<Cancelled>> + Send + 'static {
        self.call_letter(tenant, key, |timer, reply| Op::DeadDiscard { timer, reply })
    }

    /// [`Handle::call`] for a dead letter, whose key may be a schedule occurrence's
    /// (`error::validate_letter_key`).
    fn call_letter<T: Send + 'static>(
        &self,
        tenant: &str,
        key: &str,
        make: impl FnOnce(PackedTimer, Reply<Result<T>>) -> Op,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        let packed = validate_name(NameKind::Tenant, tenant)
            .and_then(|()| crate::error::validate_letter_key(key))
            .and_then(|()| {
                PackedTimer::new(tenant, key, b"").ok_or(Error::NameTooLong {
                    kind: NameKind::Key,
                    len: key.len(),
                })
            });
        self.call_packed(tenant, packed, make)
    }

    /// The quota of `tenant`, if it has one.
    pub fn quota(&self, tenant: &str) -> Option<&Arc<Quota>> {
        self.inner.quotas.get(tenant)
    }

    /// (tenant, limit, pending) of every tenant with a quota.
    pub fn quotas(&self) -> Vec<(String, u64, i64)> {
        self.inner.quotas.snapshot()
    }

    /// Schedules without waiting for an answer. Errors the shard finds (capacity) are logged.
    pub fn schedule_detached(
        &self,
        tenant: &str,
        key: &str,
        deadline: Deadline,
        payload: &[u8],
    ) -> Result<()> {
        self.push_schedule(tenant, key, deadline, payload, &[], None, None)
    }

    /// Cancels the pending timer under (tenant, key).
    pub fn cancel(&self, tenant: &str, key: &str) -> Result<Cancelled> {
        block_on(self.cancel_async(tenant, key))
    }

    pub fn cancel_async(
        &self,
        tenant: &str,
        key: &str,
    ) -> impl Future<Output = Result<Cancelled>> + Send + 'static {
        self.call(tenant, key, |timer, reply| Op::Cancel { timer, reply })
    }

    /// The pending timer under (tenant, key), if any.
    pub fn get(&self, tenant: &str, key: &str) -> Result<Option<TimerInfo>> {
        block_on(self.get_async(tenant, key))
    }

    pub fn get_async(
        &self,
        tenant: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<TimerInfo>>> + Send + 'static {
        self.call(tenant, key, |timer, reply| Op::Get { timer, reply })
    }

    /// Sends the op `make` builds for (tenant, key) to the shard that owns it; the future
    /// resolves to the shard's answer (`ShuttingDown` if the shard stops first).
    pub(super) fn call<T: Send + 'static>(
        &self,
        tenant: &str,
        key: &str,
        make: impl FnOnce(PackedTimer, Reply<Result<T>>) -> Op,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        self.call_packed(tenant, self.pack(tenant, key, &[]), make)
    }

    /// Sends the op `make` builds around `packed` to the shard of its tenant and key, and
    /// answers its reply; a `packed` error is the answer.
    pub(super) fn call_packed<T: Send + 'static>(
        &self,
        tenant: &str,
        packed: Result<PackedTimer>,
        make: impl FnOnce(PackedTimer, Reply<Result<T>>) -> Op,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        let (tx, rx) = reply_channel();
        let pushed = packed.and_then(|timer| {
            let shard = self.shard_for(tenant, timer.key());
            self.push_to(shard, tenant, make(timer, tx))
        });
        answer(pushed, rx)
    }

    #[allow(clippy::too_many_arguments)]
    fn push_schedule(
        &self,
        tenant: &str,
        key: &str,
        deadline: Deadline,
        payload: &[u8],
        meta: &[u8],
        reply: Option<Reply<Result<Scheduled>>>,
        slot: Option<QuotaSlot>,
    ) -> Result<()> {
        self.checked_deadline(deadline)?;
        let timer = self.pack_with_meta(tenant, key, meta, payload)?;
        let shard = self.shard_for(tenant, key);
        let op = Op::Schedule {
            timer,
            deadline,
            reply,
            slot,
            home: crate::shard::on_thread() == Some(shard),
        };
        self.push_to(shard, tenant, op)
    }

    /// `DeadlineOutOfRange` past now + 10 years.
    pub(super) fn checked_deadline(&self, deadline: Deadline) -> Result<()> {
        if deadline.0 > self.now().0.saturating_add(TEN_YEARS_US) {
            return Err(Error::DeadlineOutOfRange {
                deadline_us: deadline.0,
            });
        }
        Ok(())
    }

    fn pack(&self, tenant: &str, key: &str, payload: &[u8]) -> Result<PackedTimer> {
        self.pack_with_meta(tenant, key, &[], payload)
    }

    fn pack_with_meta(
        &self,
        tenant: &str,
        key: &str,
        meta: &[u8],
        payload: &[u8],
    ) -> Result<PackedTimer> {
        validate_name(NameKind::Tenant, tenant)?;
        validate_name(NameKind::Key, key)?;
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                limit: MAX_PAYLOAD,
            });
        }
        // validate_name caps both at 128 bytes; only metadata over 64 KiB fails here.
        PackedTimer::with_meta(tenant, key, meta, payload).ok_or(Error::PayloadTooLarge {
            len: meta.len(),
            limit: u16::MAX as usize,
        })
    }

    pub(super) fn push_to(&self, shard: usize, tenant: &str, op: Op) -> Result<()> {
        if self.inner.stopping.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        self.inner.rings[shard].push(tenant, op)
    }
}

/// One shard's part of a dead-letter listing.
struct DeadPage<'a> {
    tenant: &'a str,
    after: Option<&'a str>,
    through: Option<&'a str>,
    limit: usize,
    bodies: bool,
}

type DeadReply = futures_channel::oneshot::Receiver<Result<Vec<DeadInfo>>>;

impl DeadPage<'_> {
    /// Sends the request to the shards `which`; what each answers, in that order.
    fn ask(&self, rings: &[Arc<Ring>], which: &[usize]) -> Vec<Result<DeadReply>> {
        which
            .iter()
            .filter_map(|&i| rings.get(i))
            .map(|ring| {
                let (tx, rx) = reply_channel();
                let op = Op::DeadList {
                    tenant: self.tenant.to_string(),
                    after: self.after.map(str::to_string),
                    through: self.through.map(str::to_string),
                    limit: self.limit,
                    bodies: self.bodies,
                    reply: tx,
                };
                ring.push(self.tenant, op).map(|()| rx)
            })
            .collect()
    }
}

/// Every shard's answer, in order.
async fn gather(waits: Vec<Result<DeadReply>>) -> Result<Vec<Vec<DeadInfo>>> {
    let mut all = Vec::with_capacity(waits.len());
    for w in waits {
        all.push(relay(w?).await.map_err(|_| Error::ShuttingDown)??);
    }
    Ok(all)
}

/// The first `limit` by key.
fn merge(mut letters: Vec<DeadInfo>, limit: usize) -> Vec<DeadInfo> {
    letters.sort_by(|a, b| a.key.cmp(&b.key));
    letters.truncate(limit);
    letters
}

/// The shard's answer to an op, once it was pushed (`pushed`'s error, when it was not).
pub(super) async fn answer<T: Send + 'static>(
    pushed: Result<()>,
    rx: futures_channel::oneshot::Receiver<Result<T>>,
) -> Result<T> {
    pushed?;
    // Woken by the shard's thread: through this executor's doorbell, if it has one.
    relay(rx).await.map_err(|_| Error::ShuttingDown)?
}
