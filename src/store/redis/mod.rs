//! The Redis store: each shard's timers persisted in Redis through batched pipelines,
//! recovered on start, and handed to the tenant's stream when they fire (the stream entry's
//! format is `fired`).
//!
//! # What the store owns
//!
//! One Redis connection per shard, driven by the shard's own glommio executor (a task spawned
//! on the shard; no tokio, no extra thread), the shard's [`outbox::Outbox`] of writes not yet
//! acknowledged, and the key layout below. Commands are built and replies decoded by the
//! `redis` crate; its streaming parser reads from the glommio socket (`conn`).
//!
//! # Key layout (see `layout`)
//!
//! | key | type | holds |
//! |---|---|---|
//! | `punctual:{p<N>}:timers` | hash | field `<tenant>/<key>` → `<version> <fire_at_us> <payload>`, one per pending timer of partition N |
//! | `punctual:fired:{<tenant>}` | stream | one entry per firing: `key`, `version`, `fire_at_us`, `fired_at_us`, `payload` (not for tenants in `streams_off`) |
//! | `punctual:{p<N>}:dead`, `punctual:dead:{<tenant>}` | hash, stream | dead letters (see `dead`) |
//!
//! N is `FNV-1a(tenant, key) mod 1024`: a fixed number of partitions, independent of the
//! shard count. Shard `s` of `S` owns (and routes, see `Handle::shard_for`) the partitions
//! with `N mod S == s`, so recovery after a restart with another shard count loads every
//! partition exactly once. Every key carries a hash tag, so the keys place themselves on a
//! Redis Cluster's slots unchanged. This build talks to one Redis endpoint; a cluster client
//! would also have to split a fire's transaction, whose two keys lie in different slots, into
//! `XADD` then `HDEL` (an order that can only duplicate, never lose).
//!
//! What each operation writes:
//!
//! - schedule (upsert): `HSET punctual:{pN}:timers <tenant>/<key> <record>` — the whole
//!   record, so a replay is idempotent. No sorted set is kept: ordering is the wheel's job, and
//!   recovery loads everything anyway; one command per registration keeps the write rate
//!   close to Redis's own.
//! - cancel: `HDEL punctual:{pN}:timers <tenant>/<key>`.
//! - fire: `XADD punctual:fired:{<tenant>} MAXLEN ~ <max> * …` and the `HDEL`, inside the
//!   same `MULTI`/`EXEC` (a pipeline that holds a fire is sent as one transaction), so the
//!   entry appears exactly when the record disappears.
//! - fire of a webhook timer, kept pending: the `XADD` and the `HSET` of its rewritten record
//!   (delivery under way), in one transaction; each later step of its delivery is an `HSET`
//!   (a retry), an `HDEL` (delivered), or a dead letter's transaction (see `dead`).
//!
//! # Invariants
//!
//! - A durable schedule or cancel is answered only after the replies of the pipeline that
//!   carried it came back without an error, or with `StoreUnavailable` (not acknowledged)
//!   when that takes longer than `ack_timeout`, the outbox is full, or Redis rejects the write
//!   for good.
//! - Writes reach Redis in the order the shard made them; after a lost connection or a
//!   transient error reply (OOM, READONLY, …) everything not yet answered is written again, in
//!   order (idempotent assignments; stream entries may repeat, with the same version).
//! - Fires never wait for Redis: the shard fires from memory and the outbox carries the XADD
//!   until Redis takes it. A timer's record leaves Redis only through its fire's transaction,
//!   a cancel, or a replacement, so an acknowledged timer is in Redis or in its stream.
//! - Until a shard has recovered its partitions it applies no op: ops wait (answered
//!   `StoreUnavailable` after `ack_timeout`) and are applied in order once it has.
//!
//! # Cost model
//!
//! Per registration on the shard: one `redis::Cmd` built (the record is copied once into the
//! command's buffer) and one `VecDeque` push; per fire, two commands. The store task writes a
//! batch (up to `flush_max_commands`) as soon as a fire waits, N writes wait, or the oldest
//! has waited `flush_interval`; up to four batches are in flight on the connection. The
//! shard's passes are shortened (512 ops) on durable shards, and the shard yields to its
//! executor after every pass that did work (see `shard`), so that Redis's replies are read
//! between passes, not after them.
//!
//! # Why this store writes the stream entry
//!
//! A fired timer's stream entry (`XADD`) and the removal of its record (`HDEL`) travel in the
//! same outbox entry and the same `MULTI`/`EXEC`, so an entry exists exactly when the record
//! is gone: a fire is never lost between the two and never half-applied. That atomicity is a
//! property of one Redis connection, so the Redis store writes the entry (built by
//! `fired`) rather than a separate sink.

pub mod conn;
pub mod dead;
pub mod endpoint;
pub mod fired;
pub mod flush;
pub mod layout;
pub mod outbox;
pub mod recover;
pub mod replies;
pub mod streams;

use super::{Ack, DeadLetter, LocalFuture, Recovered, Store};
use crate::error::{Error, Result};
use crate::metrics::{ShardMetrics, StoreMetrics, StoreState};
use crate::op::Scheduled;
use crate::timer::{FiredTimer, PackedTimer};
use endpoint::Endpoint;
use outbox::Outbox;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// How the store talks to Redis. Defaults are written in [`RedisConfig::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`, or
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>[/db]` for the
    /// master that Redis Sentinel names (see `endpoint`).
    pub url: String,
    /// Longest a write waits in the outbox before its pipeline is sent (default 1 ms).
    pub flush_interval: Duration,
    /// A pipeline is sent as soon as this many writes wait (default 4,096).
    pub flush_max_commands: usize,
    /// Writes the outbox holds before durable registrations are refused (default 100,000).
    pub max_buffered: usize,
    /// Fires the outbox holds before the shard stops firing (default 100,000). While Redis is
    /// unreachable, a fired timer's stream entry waits in the outbox; at this bound the shard
    /// holds further due timers in its wheel (their records stay in Redis) and fires them,
    /// late but not lost, once Redis takes the backlog. Memory stays bounded by both limits.
    pub max_buffered_fires: usize,
    /// Longest a durable schedule or cancel waits for Redis before `StoreUnavailable` (2 s).
    pub ack_timeout: Duration,
    /// `MAXLEN ~` of each tenant's fired stream (default 1,000,000).
    pub stream_maxlen: u64,
    /// `COUNT` of each recovery `HSCAN` (default 1,000).
    pub recovery_page: usize,
    /// Tenants whose fired timers get no stream entry (webhooks only; default none).
    pub streams_off: std::collections::BTreeSet<String>,
    /// Connect and I/O timeout of one attempt (default 1 s).
    pub io_timeout: Duration,
    /// Longest pause between reconnect attempts (default 1 s; they start at 10 ms).
    pub backoff_max: Duration,
    /// Replicas that must hold a write before it is acknowledged (default 0: the master's
    /// word is enough). Above 0, each pipeline ends with `WAIT n`, and a write is answered
    /// only once `n` replicas have it, so an acknowledged timer survives the loss of the
    /// master. See `flush` for what happens while too few replicas answer.
    pub wait_replicas: u32,
}

impl RedisConfig {
    pub fn new(url: impl Into<String>) -> RedisConfig {
        RedisConfig {
            url: url.into(),
            flush_interval: Duration::from_millis(1),
            flush_max_commands: 4096,
            max_buffered: 100_000,
            max_buffered_fires: 100_000,
            ack_timeout: Duration::from_secs(2),
            stream_maxlen: 1_000_000,
            recovery_page: 1000,
            streams_off: Default::default(),
            io_timeout: Duration::from_secs(1),
            backoff_max: Duration::from_secs(1),
            wait_replicas: 0,
        }
    }

    /// The parsed URL; an error names what is wrong with it.
    pub fn endpoint(&self) -> Result<Endpoint> {
        Endpoint::parse(&self.url)
            .map_err(|e| Error::Config(format!("redis URL {:?}: {e}", self.url)))
    }

    pub(crate) fn validate(&self) -> Result<Endpoint> {
        if self.flush_max_commands == 0
            || self.max_buffered == 0
            || self.max_buffered_fires == 0
            || self.recovery_page == 0
        {
            return Err(Error::Config(
                "store: flush_max_commands, max_buffered, max_buffered_fires and recovery_page must be positive".into(),
            ));
        }
        self.endpoint()
    }

    /// The `Retry-After` a refused durable write suggests, in seconds.
    fn retry_after_s(&self) -> u64 {
        self.backoff_max.as_secs().max(1)
    }
}

/// What the shard and its store task share, on the shard's thread only.
pub(crate) struct Shared {
    pub cfg: RedisConfig,
    pub endpoint: Endpoint,
    pub shard: usize,
    pub shards: usize,
    pub outbox: RefCell<Outbox>,
    pub wake: event_listener::Event,
    pub closing: Cell<bool>,
    pub metrics: Arc<ShardMetrics>,
}

impl Shared {
    pub fn m(&self) -> &StoreMetrics {
        &self.metrics.store
    }

    pub fn unavailable(&self) -> Error {
        Error::StoreUnavailable {
            retry_after_s: self.cfg.retry_after_s(),
        }
    }
}

/// A `Shared` with a default configuration and no connection, shard 0 of 1: for unit tests
/// and the reply judge's fuzz target.
pub(crate) fn detached_shared() -> Shared {
    test_shared(RedisConfig::new("redis://127.0.0.1:1/"))
}

/// [`detached_shared`] with this configuration.
pub(crate) fn test_shared(cfg: RedisConfig) -> Shared {
    let endpoint = cfg.endpoint().unwrap_or_else(|_| {
        Endpoint::Direct(redis::ConnectionInfo {
            addr: redis::ConnectionAddr::Tcp("127.0.0.1".into(), 1),
            redis: Default::default(),
        })
    });
    Shared {
        endpoint,
        outbox: RefCell::new(Outbox::new(8, 8, cfg.ack_timeout)),
        cfg,
        shard: 0,
        shards: 1,
        wake: event_listener::Event::new(),
        closing: Cell::new(false),
        metrics: Default::default(),
    }
}

/// One shard's Redis store: the outbox and the store task that flushes it.
pub struct RedisStore {
    shared: Rc<Shared>,
    task: Option<glommio::Task<()>>,
}

impl RedisStore {
    pub fn new(
        cfg: RedisConfig,
        endpoint: Endpoint,
        shard: usize,
        shards: usize,
        metrics: Arc<ShardMetrics>,
    ) -> RedisStore {
        metrics.store.set_state(StoreState::Connecting);
        let outbox = Outbox::new(cfg.max_buffered, cfg.max_buffered_fires, cfg.ack_timeout);
        RedisStore {
            shared: Rc::new(Shared {
                cfg,
                endpoint,
                shard,
                shards,
                outbox: RefCell::new(outbox),
                wake: event_listener::Event::new(),
                closing: Cell::new(false),
                metrics,
            }),
            task: None,
        }
    }

    /// Starts the store task with the connection recovery left open.
    fn start(&mut self, conn: conn::Conn) {
        let shared = self.shared.clone();
        self.task = Some(glommio::spawn_local(flush::run(shared, Some(conn))));
        if self.shared.shard == 0 {
            glommio::spawn_local(streams::run(self.shared.clone())).detach();
            let shared = self.shared.clone();
            glommio::spawn_local(async move {
                endpoint::watch_switches(&shared.endpoint, shared.cfg.io_timeout, || {
                    shared.closing.get()
                })
                .await
            })
            .detach();
        }
    }
}

impl Store for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn recover<'a>(
        &'a mut self,
        insert: &'a mut dyn FnMut(Recovered<'_>) -> bool,
        stop: &'a AtomicBool,
    ) -> LocalFuture<'a, bool> {
        Box::pin(async move {
            let shared = self.shared.clone();
            match recover::recover(&shared, insert, stop).await {
                Some(conn) => {
                    self.start(conn);
                    true
                }
                None => false,
            }
        })
    }

    /// `Ok` when one more durable write of `tenant` fits in the outbox; else the refusal,
    /// counted.
    fn admit(&self, tenant: &str) -> Result<()> {
        let s = &self.shared;
        s.outbox
            .borrow()
            .acks
            .admit(tenant, s.shard, s.m(), || s.unavailable())
    }

    fn refusal(&self) -> Error {
        self.shared.unavailable()
    }

    fn ack_timeout(&self) -> Duration {
        self.shared.cfg.ack_timeout
    }

    /// Shorter passes than the in-memory shard's, so that the store task (on the same
    /// executor) reads Redis's replies between them instead of after a 4,096-op pass.
    fn ops_per_pass(&self) -> usize {
        512
    }

    /// Stamps the entries of the batch the shard is about to apply (one clock read a pass).
    fn begin_pass(&mut self) {
        self.shared.outbox.borrow_mut().acks.stamp();
    }

    fn schedule(&mut self, timer: &PackedTimer, s: &Scheduled, ack: Ack) {
        let write = put_cmd(timer, s.version, s.deadline.0);
        self.shared
            .outbox
            .borrow_mut()
            .push(write, None, ack, timer.tenant());
    }

    fn cancel(&mut self, tenant: &str, key: &str, ack: Ack) {
        self.shared
            .outbox
            .borrow_mut()
            .push(del_cmd(tenant, key), None, ack, tenant);
    }

    fn fire_room(&self) -> usize {
        self.shared.outbox.borrow().acks.fire_room()
    }

    /// Counted once per pause, not per pass.
    fn fires_held(&mut self, held: bool) {
        let m = self.shared.m();
        let was = m
            .fires_held
            .swap(u64::from(held), std::sync::atomic::Ordering::Relaxed);
        if held && was == 0 {
            StoreMetrics::count(&m.fire_pauses_total, 1);
            tracing::warn!(
                shard = self.shared.shard,
                limit = self.shared.cfg.max_buffered_fires,
                "store: fires waiting for Redis reached their bound; due timers stay pending (not lost) until Redis takes the backlog"
            );
        }
    }

    /// Queues the stream entry and the record's removal, applied together.
    fn fired(&mut self, t: &FiredTimer<'_>) {
        let del = del_cmd(t.tenant, t.key);
        let mut outbox = self.shared.outbox.borrow_mut();
        match self.stream_entry(t) {
            Some(xadd) => outbox.push(xadd, Some(del), Ack::None, t.tenant),
            None => outbox.push(del, None, Ack::None, t.tenant),
        }
    }

    /// Queues the stream entry and the rewritten record, applied together.
    fn fired_kept(&mut self, t: &FiredTimer<'_>, kept: &PackedTimer, s: &Scheduled) {
        let put = put_cmd(kept, s.version, s.deadline.0);
        let mut outbox = self.shared.outbox.borrow_mut();
        match self.stream_entry(t) {
            Some(xadd) => outbox.push(xadd, Some(put), Ack::None, t.tenant),
            None => outbox.push(put, None, Ack::None, t.tenant),
        }
    }

    fn dead(&mut self, letter: &DeadLetter<'_>) {
        let cmds = dead::bury(letter, self.shared.cfg.stream_maxlen);
        self.shared.outbox.borrow_mut().push_three(cmds);
    }

    fn dead_removed(&mut self, tenant: &str, key: &str, ack: Ack) {
        self.shared
            .outbox
            .borrow_mut()
            .push(dead::remove(tenant, key), None, ack, tenant);
    }

    /// Tells the store task that writes are waiting, and answers `StoreUnavailable` to callers
    /// past the ack timeout (so that no caller waits much longer than it, even while the store
    /// task is stuck waiting on Redis). The shard passes at least every 100 ms (its clock
    /// anchor is a deadline of its own), and a shard its executor failed to wake is woken by
    /// the watchdog within about 10 ms of that (`shard::watchdog`); the store task also
    /// answers expired callers whenever it runs. So a caller waits at most the ack timeout
    /// plus about 110 ms.
    fn after_pass(&mut self) {
        let shared = &self.shared;
        shared.outbox.borrow_mut().acks.after_pass(
            shared.m(),
            shared.cfg.retry_after_s(),
            &shared.wake,
        );
    }

    /// Flushes what it can within the ack timeout, then stops the store task.
    fn close(&mut self) -> LocalFuture<'_, ()> {
        Box::pin(async move {
            self.shared.closing.set(true);
            self.shared.wake.notify(usize::MAX);
            if let Some(task) = self.task.take() {
                let limit = crate::units::capped(self.shared.cfg.ack_timeout);
                futures_lite::future::or(task, glommio::timer::sleep(limit)).await;
            }
            let left = self.shared.outbox.borrow().len();
            if left > 0 {
                tracing::warn!(
                    shard = self.shared.shard,
                    writes = left,
                    "store closed with writes Redis never acknowledged; their timers are recovered (and fired again if due) on the next start"
                );
            }
        })
    }
}

impl RedisStore {
    /// The fired stream's entry for `t`, unless its tenant's stream is off.
    fn stream_entry(&self, t: &FiredTimer<'_>) -> Option<redis::Cmd> {
        let off = &self.shared.cfg.streams_off;
        (off.is_empty() || !off.contains(t.tenant))
            .then(|| fired::xadd(t, self.shared.cfg.stream_maxlen))
    }
}

/// `HSET` of a (re)scheduled timer's whole record.
fn put_cmd(timer: &PackedTimer, version: u64, fire_at: u64) -> redis::Cmd {
    let (tenant, key) = (timer.tenant(), timer.key());
    let size = 96 + tenant.len() + key.len() + timer.meta().len() + timer.payload().len();
    // Sized once: name, key, field and record, no reallocation while the args go in.
    let mut c = redis::Cmd::with_capacity(4, size);
    c.arg("HSET")
        .arg(layout::timers_key_static(layout::partition_of(tenant, key)))
        .arg(layout::Arg::Field { tenant, key })
        .arg(layout::Arg::Record {
            version,
            fire_at_us: fire_at,
            meta: timer.meta(),
            payload: timer.payload(),
        });
    c
}

fn del_cmd(tenant: &str, key: &str) -> redis::Cmd {
    let mut c = redis::Cmd::with_capacity(3, 40 + tenant.len() + key.len());
    c.arg("HDEL")
        .arg(layout::timers_key_static(layout::partition_of(tenant, key)))
        .arg(layout::Arg::Field { tenant, key });
    c
}
