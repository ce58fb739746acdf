//! The node's loop: once a round (a second by default) it beats, reads the live set, works
//! out which partitions this node should own, and acquires, renews and releases their leases.
//! What it holds is kept in [`Holdings`], which every shard's store reads to fence its writes
//! (`store::redis::clustered::Holders`), and each change of what the node may act on is told,
//! in order, to a [`Partitions`] (the shards, which load a partition's timers when it is gained
//! and drop them when it is lost).
//!
//! # One round
//!
//! ```text
//!   beat (membership)              → the live set, or an error (then: renew only)
//!   lapsed = held past its local deadline: dropped from Holdings, released in Redis
//!   want = rendezvous::owned_by(me, live)
//!   release = held − want          dropped from Holdings now; released in Redis at the end
//!                                  of the round, `settle` (20 ms) after the drop at least
//!   renew   = held ∩ want          pipelined by master; "lost" drops it from Holdings
//!   acquire = want − held          pipelined by master; "taken" leaves it pending
//!   until the next round, every tick (50 ms):
//!     GET the live-set counter      changed since the beat: the next round starts now
//!     pending acquisitions          asked again, pipelined by master; held ones leave the list
//!   (rounds never overlap; a round started early sets the next one a round after it)
//! ```
//!
//! # Ticks: why a planned move takes about 100 ms, not two rounds
//!
//! A join, a planned leave and an expiry move the live-set counter (`membership`). Without the
//! ticks a join took two rounds: the old owner released at its next round, the newcomer,
//! answered "taken" at its first, acquired at its second; a SIGTERM left the partitions
//! unowned until the others' next round. With them, walk partition p from A to a newcomer C:
//!
//! ```text
//!   C: first round: beat (counter n → n+1), want p, acquire → "taken by A"; p pending
//!   A: next tick (≤ 50 ms): counter n+1 ≠ n → round now: beat, the view now routes p to C
//!      (requests for p are forwarded there from here), p told lost (its shards drop it);
//!      20 ms later (`settle`: the writes queued for p under the lease land), release
//!   C: next tick (≤ 50 ms): acquire p → held; told gained; the reader loads it (a batch of
//!      gained partitions a pipeline, `reader`); p fires from C
//! ```
//!
//! A SIGTERM: the stopping node's shards flush their stores, then it releases every lease and
//! removes its record (counter moved); at their next tick the others start a round and acquire
//! what the view now gives them, already released. A death at any step leaves what a death
//! leaves anyway: leases that lapse within a TTL, a record that lapses within a member TTL.
//!
//! Between the steps the loop compares [`Holdings`] with what it last told its [`Partitions`],
//! lease value by lease value: a partition valid now and not told is `gained`; one told and no
//! longer valid (released, lost at renewal, or past its local deadline) is `lost`; one valid
//! under another value than the one told (it lapsed and was acquired again in one round, as
//! when every master stalls past the TTL) is `lost`, then `gained`. So a release is told before it is
//! sent, a lease that lapsed locally is told lost at the next round (at most one round late:
//! whoever acts on a partition checks [`Holdings::valid`] too). A store whose write was refused
//! with `FENCED` cuts the lease it was fenced by to now (`Holders::fenced`, only if the slot
//! still holds that very holder value) and wakes the loop, which tells it lost at once and at
//! its next round releases it as a lapse. A lease that
//! lapsed locally is never renewed or put back under its epoch, even when a renewal lands just
//! after the lapse: it is released, and acquired again (in the same round, or the next) under
//! a new epoch, then gained and loaded afresh. Writes are fenced by the holder they were queued under
//! (`store::redis::clustered`), so one queued under the lapsed lease is refused rather than
//! landing behind the new load's back.
//!
//! Each good heartbeat also publishes the routing view of its live set
//! ([`Holdings::routing`], `routing`): who should own each partition, which the API forwards
//! requests by. Without a live set (the heartbeat failed) the last view stays.
//!
//! A partition another node still holds is answered "taken"; that node releases it at its
//! first tick after the newcomer's beat, and the newcomer acquires it at its first tick after
//! that (see Ticks). A node that dies (kill -9) releases nothing: its leases lapse one TTL after
//! its last renewal and its heartbeat one member TTL after its last beat; the others acquire its
//! partitions at their first tick after both (the expiry moves the counter too).
//!
//! # Order, and what a death in between leaves
//!
//! A partition leaves [`Holdings`] *before* its release is sent (a moved one `settle` before,
//! so that the writes queued under its lease land first), so no write is fenced with a lease
//! already given up; it enters [`Holdings`] only once its acquisition is answered, with
//! the local deadline counted from the *send* (`lease`). A process that dies anywhere in a
//! round leaves leases that lapse within a TTL and writes that are fenced: nothing of a round
//! needs undoing.
//!
//! # Where it runs, and what waits on what
//!
//! The loop runs on a thread of its own (`punctual-node`) with its own glommio executor and
//! its own cluster client, not on a shard. A shard's passes are bounded (about 200 µs), so the
//! loop could share one, but the lease deadlines are the one thing here that is timed against
//! the TTL: a round that waits behind a shard's work or its store's writes is a renewal that
//! comes late, and a lease that lapses drops a partition for every shard. On its own thread,
//! a busy shard delays no renewal, and the loop's waits (one call at a time) delay no shard.
//! It costs one mostly idle thread and one connection per master (three: the reader beside it
//! has its own, and so has the status service once `GET /cluster` is first asked). `serve`
//! starts it with `--advertise` on a cluster URL (`start.rs`: the thread, its executor, the
//! preflight, and the services beside the loop).
//!
//! The ticks run in the same loop, between rounds, one call at a time, on glommio timers with a
//! bounded sleep (never a wake that could be lost: a stop or a cut also wakes the wait, and a
//! missed wake costs at most a tick). The client's calls give up after `retry_for` (the round's
//! interval by default, not the store's 10 s), so a master that stops answering holds one round
//! for about a second; that master's leases then lapse at their local deadlines (the shards stop acting on those
//! partitions) while the others are renewed at the next round. Nothing queues: rounds do not
//! overlap, and a round that ran long starts the next at once rather than catching up.
//! Tenants do not appear here: a lease covers a partition, whichever tenants' timers it holds.
//!
//! # Cost model
//!
//! Per round: one heartbeat script, one rendezvous computation (1,024 × N weights: tens of
//! microseconds for a few nodes), one pipelined call per master for the renewals (a few
//! hundred `EVAL`s of a few dozen bytes each), and acquisitions and releases only when the
//! assignment changed. Per tick (20 a second): one `GET` on the members' master; while some
//! wanted partition is held elsewhere (a join's first ~100 ms; a dead node's leases until they
//! lapse, at most a TTL; a node whose beats fail while its renewals go through, for as long as
//! that lasts), one pipelined call per master with only those partitions' `EVAL`s.
//! A change of the live set costs each node one early round. Nothing queues: a tick that
//! waits on a slow master delays the next tick or round, never stacks behind it. Per store
//! batch, one mutex (uncontended but for the loop's updates) and one `String` copy per
//! partition written.

use super::calls::Calls;
pub use super::holdings::{Holdings, NodeStats};
use super::lease::{self, Acquired, Lease, LeaseConfig};
use super::membership::{self, NodeRecord};
use super::reader::Partitions;
use super::rendezvous;
use crate::partition::PARTITIONS;
use crate::store::redis::cluster::{ClusterClient, ClusterConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the node beats and holds leases.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's record (its id is its advertised address).
    pub me: NodeRecord,
    /// This process incarnation's lease values' prefix, `<id>/<nonce>` (`lease::incarnation`):
    /// the leases it acquires are `<holder>:<epoch>`.
    pub holder: String,
    /// Time between the starts of two rounds.
    pub round: Duration,
    /// Time between two ticks between rounds: each asks again for the partitions the round
    /// found "taken" and reads the live-set change counter (see the module doc).
    pub tick: Duration,
    /// How long a partition that moves to another node is dropped here before its lease is
    /// released: the writes its shards queued under the lease land meanwhile rather than being
    /// refused by the fence (see the module doc).
    pub settle: Duration,
    /// How long this node's heartbeat lasts without another.
    pub member_ttl: Duration,
    pub lease: LeaseConfig,
    /// The cluster's secret: only the live records that prove it count (`membership::prove`);
    /// without one, every record does.
    pub secret: Option<Arc<[u8]>>,
}

impl NodeConfig {
    /// One round a second, a 3 s heartbeat and 3 s leases (a tenth of it as drift margin).
    pub fn new(me: NodeRecord) -> NodeConfig {
        NodeConfig {
            holder: lease::incarnation(&me.id),
            me,
            round: Duration::from_secs(1),
            tick: Duration::from_millis(50),
            settle: Duration::from_millis(20),
            member_ttl: Duration::from_secs(3),
            lease: LeaseConfig::default(),
            secret: None,
        }
    }

    /// This configuration under the cluster's `secret`: its record carries the proof, and
    /// only the records that prove it count.
    pub fn with_secret(mut self, secret: &[u8]) -> NodeConfig {
        self.me.proof = membership::prove(secret, &self.me);
        self.secret = Some(Arc::from(secret));
        self
    }
}

/// What the loop last told its [`Partitions`] of each partition: the lease value it was told
/// gained under, `None` when not gained (or lost since).
///
/// Comparing values, not just "held or not", is what keeps a lapse from going untold: all the
/// leases are renewed in one pipeline, so they lapse together, and a round whose heartbeat
/// came back past their deadline removes them and acquires them again under new epochs before
/// it tells anything. Held before and held after, yet under another value: the partition is
/// told lost, then gained, so its shards drop what they hold of it (a due timer not fired in
/// the gap left it unloaded; a write refused as `FENCED` left memory ahead of Redis) and load
/// it afresh.
struct Told(Vec<Option<Arc<str>>>);

impl Told {
    fn new() -> Told {
        Told(vec![None; PARTITIONS as usize])
    }

    /// Tells `partitions` that `partition` was lost, if it was told gained: its lease lapsed
    /// before a renewal put it back, so it is gained again at the next [`Told::tell`].
    fn lapsed(&mut self, partition: u32, partitions: &dyn Partitions) {
        if let Some(told) = self.0.get_mut(partition as usize) {
            if told.take().is_some() {
                partitions.lost(partition);
            }
        }
    }

    /// Tells `partitions` every change between [`Holdings`] at `now` and what it was told: a
    /// lease no longer valid is lost; a valid one under a value not told is gained, after the
    /// loss of the value told before it if any.
    fn tell(&mut self, holdings: &Holdings, partitions: &dyn Partitions, now: Instant) {
        for (p, told) in (0..PARTITIONS).zip(self.0.iter_mut()) {
            let valid = holdings.valid(p, now).map(|l| l.holder_shared());
            if *told == valid {
                continue;
            }
            if told.is_some() {
                partitions.lost(p);
            }
            if valid.is_some() {
                partitions.gained(p);
            }
            *told = valid;
        }
    }
}

/// What a round does with the leases, given what the node holds and what it should own.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub acquire: Vec<u32>,
    pub renew: Vec<u32>,
    pub release: Vec<u32>,
}

/// The round's plan: `held` and `want` in any order; the answer's lists are increasing.
pub fn plan(held: &[u32], want: &[u32]) -> Plan {
    let mut is_held = vec![false; PARTITIONS as usize];
    let mut is_wanted = vec![false; PARTITIONS as usize];
    for &p in held.iter().filter(|&&p| p < PARTITIONS) {
        is_held[p as usize] = true;
    }
    for &p in want.iter().filter(|&&p| p < PARTITIONS) {
        is_wanted[p as usize] = true;
    }
    let mut out = Plan::default();
    for p in 0..PARTITIONS {
        match (is_held[p as usize], is_wanted[p as usize]) {
            (true, true) => out.renew.push(p),
            (true, false) => out.release.push(p),
            (false, true) => out.acquire.push(p),
            (false, false) => {}
        }
    }
    out
}

/// The loop itself, on the caller's executor, until `stop`. Dropping the future mid-round is a
/// death: nothing is released (the leases lapse), which is what the tests use to kill a node.
pub async fn run(
    cluster: ClusterConfig,
    cfg: &NodeConfig,
    holdings: &Holdings,
    partitions: &dyn Partitions,
    stop: &AtomicBool,
) {
    let client = loop {
        match ClusterClient::connect(cluster.clone()).await {
            Ok(c) => break c,
            Err(e) => {
                tracing::warn!(error = %e, "node: the cluster does not answer yet; this node holds no partition");
                if stop.load(Ordering::Acquire) {
                    return;
                }
                glommio::timer::sleep(cfg.round).await;
            }
        }
    };
    drive(client, cfg, holdings, partitions, stop).await;
}

/// [`run`] once connected: rounds and ticks over `client`'s calls until `stop`.
pub(super) async fn drive(
    client: impl Calls,
    cfg: &NodeConfig,
    holdings: &Holdings,
    partitions: &dyn Partitions,
    stop: &AtomicBool,
) {
    let mut at = Looping {
        client,
        cfg,
        holdings,
        partitions,
        told: Told::new(),
        pending: Pending::default(),
    };
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        if let Err(reason) = round(&mut at).await {
            holdings
                .stats
                .round_errors_total
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%reason, "node: a round of heartbeat and leases did not complete");
        }
        let next = started + cfg.round;
        let mut tick_at = Instant::now() + cfg.tick;
        // Until the next round, a lease that a fenced write cut is told lost at once (the
        // shards then drop the partition), not up to a round later; each tick asks again for
        // what the round found taken, and a changed live set starts the next round at once.
        loop {
            let cut = holdings.cut.listen();
            at.told.tell(holdings, partitions, Instant::now());
            let now = Instant::now();
            if next <= now || stop.load(Ordering::Acquire) {
                break;
            }
            if tick_at <= now {
                if tick(&mut at).await {
                    let early_rounds = &holdings.stats.early_rounds_total;
                    early_rounds.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                tick_at = Instant::now() + cfg.tick;
                continue;
            }
            let wake = next.min(tick_at);
            futures_lite::future::or(glommio::timer::sleep(wake - now), cut).await;
        }
    }
    leave(&mut at).await;
}

/// What the loop works with and keeps from one round or tick to the next.
struct Looping<'a, C> {
    client: C,
    cfg: &'a NodeConfig,
    holdings: &'a Holdings,
    partitions: &'a dyn Partitions,
    told: Told,
    pending: Pending,
}

/// A [`Looping`]'s parts, borrowed apart: what each step reads and what it changes.
type Parts<'b, 'a, C> = (
    &'b mut C,
    &'a NodeConfig,
    &'a Holdings,
    &'a dyn Partitions,
    &'b mut Told,
    &'b mut Pending,
);

impl<'a, C> Looping<'a, C> {
    fn parts(&mut self) -> Parts<'_, 'a, C> {
        (
            &mut self.client,
            self.cfg,
            self.holdings,
            self.partitions,
            &mut self.told,
            &mut self.pending,
        )
    }
}

/// What a round leaves for the ticks after it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Pending {
    /// Partitions the round's view assigns this node and it does not hold (answered "taken",
    /// or not answered), increasing: asked again each tick until held or the next round.
    acquire: Vec<u32>,
    /// The live-set change counter the round's beat left; `None` when the beat failed (then
    /// no tick starts a round early).
    version: Option<u64>,
}

impl Pending {
    /// Whether the counter read at a tick says the live set changed since the round's beat.
    fn changed(&self, now: u64) -> bool {
        self.version.is_some_and(|seen| seen != now)
    }

    /// `held` (increasing) were acquired: no longer asked for.
    fn acquired(&mut self, held: &[u32]) {
        self.acquire.retain(|p| held.binary_search(p).is_err());
    }
}

/// One tick between rounds: reads the live-set change counter and answers `true` if it moved
/// (start the next round now, which plans with the new live set); else asks again, in one
/// pipelined call per master, for the partitions still pending, puts what it gets in
/// [`Holdings`] and tells it gained. A failed call is left to the next tick or round.
async fn tick(at: &mut Looping<'_, impl Calls>) -> bool {
    let (client, cfg, holdings, partitions, told, pending) = at.parts();
    match client.version().await {
        Ok(now) if pending.changed(now) => return true,
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "node: a tick's read of the live-set counter failed"),
    }
    if !pending.acquire.is_empty() {
        match client
            .acquire(&cfg.holder, &pending.acquire, cfg.lease)
            .await
        {
            Ok(answers) => {
                let held = hold(holdings, answers);
                pending.acquired(&held);
                told.tell(holdings, partitions, Instant::now());
            }
            Err(e) => tracing::debug!(error = %e, "node: a tick's acquisitions failed"),
        }
    }
    false
}

/// Puts each lease answered held in [`Holdings`]; answers their partitions (increasing, as
/// asked).
fn hold(holdings: &Holdings, answers: Vec<Acquired>) -> Vec<u32> {
    let mut held = Vec::new();
    for answer in answers {
        if let Acquired::Held(l) = answer {
            holdings
                .stats
                .acquisitions_total
                .fetch_add(1, Ordering::Relaxed);
            held.push(l.partition);
            holdings.put(l);
        }
    }
    held
}

/// A planned stop (the shards' stores have flushed): every lease out of [`Holdings`] and
/// released, then the record removed, which moves the live-set counter: the others see it at
/// their next tick, start a round, and acquire the partitions then, already released (with
/// the record first, their round would find them still held and wait for a tick more).
async fn leave(at: &mut Looping<'_, impl Calls>) {
    let (client, cfg, holdings, partitions, told, _) = at.parts();
    let held = holdings.held();
    for l in &held {
        holdings.remove(l.partition);
    }
    told.tell(holdings, partitions, Instant::now());
    if let Err(e) = client.release(&held).await {
        tracing::warn!(error = %e, "node: leases not released at stop; they lapse within a TTL");
    }
    holdings
        .stats
        .releases_total
        .fetch_add(held.len() as u64, Ordering::Relaxed);
    if let Err(e) = client.leave(&cfg.me).await {
        tracing::warn!(error = %e, "node: record not removed at stop; it lapses within a TTL");
    }
}

/// One round (see the module doc).
async fn round(at: &mut Looping<'_, impl Calls>) -> Result<(), String> {
    let (client, cfg, holdings, partitions, told, pending) = at.parts();
    let stats = &holdings.stats;
    // Leases that lapsed since the last round are lost before anything is sent.
    told.tell(holdings, partitions, Instant::now());
    let live = client.beat(&cfg.me, cfg.member_ttl).await.map(|b| {
        pending.version = Some(b.version);
        membership::trusted(cfg.secret.as_deref(), b.live)
    });
    if live.is_err() {
        pending.version = None;
    }
    // A lease past its local deadline is released, not renewed, and acquired again below
    // under a new epoch if this node should still own it (see `Holdings::renewed`).
    let now = Instant::now();
    let (held, lapsed): (Vec<Lease>, Vec<Lease>) =
        holdings.held().into_iter().partition(|l| l.valid_at(now));
    for l in &lapsed {
        holdings.remove(l.partition);
        tracing::warn!(
            partition = l.partition,
            epoch = l.epoch,
            "node: lease lapsed before it was renewed; released, to be acquired under a new epoch"
        );
    }
    stats
        .losses_total
        .fetch_add(lapsed.len() as u64, Ordering::Relaxed);
    // Told lost now, before the acquisitions below put them back under new epochs.
    if !lapsed.is_empty() {
        told.tell(holdings, partitions, Instant::now());
    }
    let held_ids: Vec<u32> = held.iter().map(|l| l.partition).collect();
    let plan = match &live {
        Ok(live) => {
            stats.live_nodes.store(live.len() as u64, Ordering::Relaxed);
            holdings.routing.publish(&cfg.me.id, live);
            let ids: Vec<&str> = live.iter().map(|r| r.id.as_str()).collect();
            plan(&held_ids, &rendezvous::owned_by(&cfg.me.id, &ids))
        }
        // Without a live set, keep what is held and take nothing new.
        Err(_) => plan(&held_ids, &held_ids),
    };
    let mut failure = live.err().map(|e| format!("heartbeat: {e}"));
    let (mut renew, release): (Vec<Lease>, Vec<Lease>) = held
        .into_iter()
        .partition(|l| plan.renew.binary_search(&l.partition).is_ok());
    if !lapsed.is_empty() {
        if let Err(e) = client.release(&lapsed).await {
            failure.get_or_insert(format!("release of lapsed leases: {e}"));
        }
    }
    // Moved partitions stop here (the shards drop them now; the view already routes them to
    // their new owners) and are released after the renewals and acquisitions, at least
    // `settle` later: until then the lease in Redis still accepts the writes queued under it.
    let dropped_at = Instant::now();
    if !release.is_empty() {
        for l in &release {
            holdings.remove(l.partition);
        }
        told.tell(holdings, partitions, Instant::now());
        stats
            .releases_total
            .fetch_add(release.len() as u64, Ordering::Relaxed);
    }
    if !renew.is_empty() {
        let answered = client.renew(&mut renew, cfg.lease).await;
        // A lease that lapsed while its renewal was under way is lost now, before a renewal
        // could make it valid again; it is released below and acquired anew at the next round.
        told.tell(holdings, partitions, Instant::now());
        let mut late = Vec::new();
        match answered {
            Ok(answers) => {
                for (l, held) in renew.into_iter().zip(answers) {
                    if held {
                        stats.renewals_total.fetch_add(1, Ordering::Relaxed);
                        let partition = l.partition;
                        if !holdings.renewed(l.clone()) {
                            told.lapsed(partition, partitions);
                            stats.losses_total.fetch_add(1, Ordering::Relaxed);
                            late.push(l);
                        }
                    } else {
                        stats.losses_total.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            partition = l.partition,
                            epoch = l.epoch,
                            "node: lease lost at renewal"
                        );
                        holdings.remove(l.partition);
                    }
                }
            }
            // Deadlines stay where they were: the leases lapse locally unless a later round
            // renews them in time.
            Err(e) => {
                failure.get_or_insert(format!("renew: {e}"));
            }
        }
        if !late.is_empty() {
            if let Err(e) = client.release(&late).await {
                failure.get_or_insert(format!("release of lapsed leases: {e}"));
            }
        }
    }
    pending.acquire = plan.acquire;
    if !pending.acquire.is_empty() {
        match client
            .acquire(&cfg.holder, &pending.acquire, cfg.lease)
            .await
        {
            Ok(answers) => {
                let held = hold(holdings, answers);
                pending.acquired(&held);
            }
            Err(e) => {
                failure.get_or_insert(format!("acquire: {e}"));
            }
        }
    }
    told.tell(holdings, partitions, Instant::now());
    if !release.is_empty() {
        let wait = (dropped_at + cfg.settle).saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            glommio::timer::sleep(wait).await;
        }
        if let Err(e) = client.release(&release).await {
            failure.get_or_insert(format!("release: {e}"));
        }
    }
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
