//! The library API: [`EngineBuilder`] starts the shards; [`Handle`] (cloneable, `Send`) is how
//! any thread schedules, cancels and reads timers.
//!
//! Every call validates its arguments on the caller's thread, packs tenant, key and payload
//! into one allocation, and pushes it onto the ring of the shard that owns the key (a hash of
//! tenant and key). `schedule`, `cancel` and `get` block the calling thread until the shard
//! answers (microseconds); the `_async` forms return a future instead, for callers on an
//! executor; `schedule_detached` does not wait for an answer at all (bulk loads).

use crate::clock::{clock_ns, Clock, ClockConfig, HostSource, SetWatch};
use crate::error::{validate_name, Error, NameKind, Result};
use crate::metrics::ShardMetrics;
use crate::op::{reply_channel, Op, Reply};
use crate::quota::{Quota, QuotaSlot, Quotas};
use crate::ring::Ring;
use crate::shard::watchdog::{Pulse, Watchdog};
use crate::shard::{set_timer_slack_ns, Shard, Wakee};
use crate::sink::{FireHandler, FiredTimer, HandlerSink, Sink};
use crate::store::memory::MemoryStore;
use crate::store::redis::RedisConfig;
use crate::store::redis::RedisStore;
use crate::store::StoreState;
use crate::units::{Deadline, UtcMicros, TEN_YEARS_US};
use crate::wheel::table::{PackedTimer, TimerTable};
use futures_lite::future::block_on;
use std::future::Future;
use std::os::fd::IntoRawFd;
use std::os::unix::io::FromRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use crate::op::{Cancelled, Scheduled, TimerInfo};

/// Largest payload, in bytes (DESIGN.md: 65,536 bytes of JSON text).
pub const MAX_PAYLOAD: usize = 65_536;

/// glommio's preemption timer: its own default. Shards yield on their own and never rely on
/// being preempted; a shorter timer brings back a glommio stall (see `shard::watchdog`).
const PREEMPT_TIMER: Duration = Duration::from_millis(100);

/// Which store the shards use.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum StoreKind {
    /// Not durable: pending timers are lost when the process exits.
    #[default]
    Memory,
    /// Redis, through batched pipelines on each shard's own connection.
    Redis(RedisConfig),
}

impl StoreKind {
    pub fn name(&self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis(_) => "redis",
        }
    }
}

/// How a shard gets its core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pinning {
    /// Shard `i` is pinned to the `i`-th of these CPU ids.
    Cores(Vec<usize>),
    /// Shard `i` is pinned to the `i`-th CPU the process may run on.
    Auto,
    /// No pinning: the kernel places the threads (for comparisons and shared hosts).
    None,
}

/// Which tick source the shards' clocks use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockChoice {
    /// The TSC when it is invariant, else clock_gettime.
    Detect,
    /// clock_gettime even when a TSC is there.
    ClockGettime,
}

pub struct EngineBuilder {
    shards: usize,
    pinning: Pinning,
    spin: Duration,
    ring_capacity: usize,
    shard_capacity: usize,
    clock: ClockChoice,
    handler: Option<FireHandler>,
    on_shard_start: Option<ShardStartHook>,
    store: StoreKind,
    preempt_timer: Duration,
    watchdog: (Duration, Duration),
    quotas: Vec<(String, u64)>,
}

/// Runs on each shard's thread, inside its executor, before the shard's loop starts: the place
/// to `glommio::spawn_local` tasks that live on that shard (the HTTP acceptor does).
pub type ShardStartHook = Arc<dyn Fn(usize, Handle) + Send + Sync>;

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder {
            shards: available_cores().len().max(1),
            pinning: Pinning::Auto,
            spin: Duration::from_micros(100),
            ring_capacity: 65_536,
            shard_capacity: 10_000_000,
            clock: ClockChoice::Detect,
            handler: None,
            on_shard_start: None,
            store: StoreKind::Memory,
            preempt_timer: PREEMPT_TIMER,
            quotas: Vec::new(),
            watchdog: (
                crate::shard::watchdog::PERIOD,
                crate::shard::watchdog::GRACE,
            ),
        }
    }
}

impl EngineBuilder {
    /// One shard per available core, auto-pinned, a 100 µs spin window, 65,536-slot rings,
    /// 10 million timers per shard, and a handler that does nothing.
    pub fn new() -> Self {
        Self::default()
    }

    pub fn shards(mut self, n: usize) -> Self {
        self.shards = n;
        self
    }

    /// Pins shard `i` to `cores[i]`; also sets the shard count to `cores.len()`.
    pub fn cores(mut self, cores: Vec<usize>) -> Self {
        self.shards = cores.len();
        self.pinning = Pinning::Cores(cores);
        self
    }

    pub fn pinning(mut self, pinning: Pinning) -> Self {
        self.pinning = pinning;
        self
    }

    /// How long before a deadline the shard stops parking and spins. Zero turns spinning off.
    pub fn spin(mut self, window: Duration) -> Self {
        self.spin = window;
        self
    }

    pub fn ring_capacity(mut self, n: usize) -> Self {
        self.ring_capacity = n;
        self
    }

    /// Pending timers one shard may hold; its slab and index are sized for it up front.
    pub fn shard_capacity(mut self, n: usize) -> Self {
        self.shard_capacity = n;
        self
    }

    pub fn clock(mut self, clock: ClockChoice) -> Self {
        self.clock = clock;
        self
    }

    /// Runs on the shard's thread for every fired timer.
    pub fn on_fire(mut self, handler: impl Fn(&FiredTimer<'_>) + Send + Sync + 'static) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// Runs `hook(shard id, handle)` on every shard's thread, inside its glommio executor,
    /// before the shard's loop starts.
    pub fn on_shard_start(mut self, hook: impl Fn(usize, Handle) + Send + Sync + 'static) -> Self {
        self.on_shard_start = Some(Arc::new(hook));
        self
    }

    /// Makes timers durable in the Redis at `url` (`redis://host:port[/db]`), with the
    /// store's defaults (see [`RedisConfig::new`]).
    pub fn redis(self, url: impl Into<String>) -> Self {
        self.redis_config(RedisConfig::new(url))
    }

    /// Makes timers durable in Redis with this configuration.
    pub fn redis_config(self, config: RedisConfig) -> Self {
        self.store(StoreKind::Redis(config))
    }

    /// Which store the shards use (default: in memory, not durable).
    pub fn store(mut self, store: StoreKind) -> Self {
        self.store = store;
        self
    }

    /// At most `limit` pending timers for `tenant`, all shards together: a schedule that would
    /// add one more is refused with [`Error::QuotaExceeded`] (see `quota`).
    pub fn quota(mut self, tenant: impl Into<String>, limit: u64) -> Self {
        self.quotas.push((tenant.into(), limit));
        self
    }

    /// glommio's preemption timer for the shards' executors (default 100 ms, glommio's own).
    /// Only for tests that reproduce glommio's stall under a short timer: production code
    /// leaves it alone.
    #[doc(hidden)]
    pub fn glommio_preempt_timer(mut self, timer: Duration) -> Self {
        self.preempt_timer = timer;
        self
    }

    /// The watchdog's period and grace (default 5 ms each; see `shard::watchdog`). Zero
    /// period turns it off: only for tests that show what it prevents.
    #[doc(hidden)]
    pub fn watchdog(mut self, period: Duration, grace: Duration) -> Self {
        self.watchdog = (period, grace);
        self
    }

    /// Starts the shards and returns once each has calibrated its clock and is running.
    pub fn build(self) -> Result<Engine> {
        if self.shards == 0 || self.shards > 1024 {
            return Err(Error::Config(format!(
                "shards must be 1 to 1024, not {}",
                self.shards
            )));
        }
        if self.ring_capacity == 0 || self.shard_capacity == 0 {
            return Err(Error::Config(
                "ring and shard capacities must be positive".into(),
            ));
        }
        let cores = self.placement()?;
        // Validated here, on the caller's thread, so that a bad URL is a build error.
        let redis_info = match &self.store {
            StoreKind::Redis(cfg) => Some(cfg.validate()?),
            StoreKind::Memory => {
                tracing::info!("store: in-memory (not durable: pending timers are lost on exit); configure a durable store for durability");
                None
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let mut rings = Vec::with_capacity(self.shards);
        let mut wakees = Vec::with_capacity(self.shards);
        for id in 0..self.shards {
            let (ring, wakee) =
                Ring::new(id, self.ring_capacity).map_err(|e| Error::ShardStart {
                    shard: id,
                    reason: e.to_string(),
                })?;
            rings.push(Arc::new(ring));
            wakees.push(wakee);
        }
        let handle = Handle {
            inner: Arc::new(Shared {
                store_kind: self.store.name(),
                quotas: Arc::new(Quotas::new(self.quotas.clone())),
                rings,
                metrics: (0..self.shards)
                    .map(|_| Arc::new(ShardMetrics::default()))
                    .collect(),
                stopping: AtomicBool::new(false),
            }),
        };
        let pulses: Vec<Arc<Pulse>> = (0..self.shards).map(|_| Arc::default()).collect();
        // Every shard re-anchors as soon as the system clock is set, not at its next 100 ms
        // anchor: the watch bumps a generation the clocks follow and wakes every shard.
        let rings = handle.inner.rings.clone();
        let set_watch = match SetWatch::spawn(move || rings.iter().for_each(|r| r.wake())) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch for system clock sets; shards notice a step at their next anchor (within 100 ms)");
                None
            }
        };
        let set_generation = set_watch.as_ref().map(SetWatch::generation);
        let mut threads = Vec::with_capacity(self.shards);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for (id, wakee) in wakees.into_iter().enumerate() {
            let ring = handle.inner.rings[id].clone();
            let m = handle.inner.metrics[id].clone();
            let placement = match cores.get(id) {
                Some(&core) => glommio::Placement::Fixed(core),
                None => glommio::Placement::Unbound,
            };
            let (spin, capacity, handler, stop) = (
                self.spin,
                self.shard_capacity,
                self.handler.clone(),
                stop.clone(),
            );
            let clock_choice = self.clock;
            let ready = ready_tx.clone();
            let hook = self.on_shard_start.clone().map(|h| (h, handle.clone()));
            let store = self.store.clone();
            let redis_info = redis_info.clone();
            let shards = self.shards;
            // A shard that runs only its own loop parks in the kernel directly; with other
            // tasks on its executor (HTTP, the store) it must park in glommio's reactor.
            let park_direct = hook.is_none() && store == StoreKind::Memory;
            let wakee_fd = wakee.into_raw_fd();
            let pulse = pulses[id].clone();
            let set_generation = set_generation.clone();
            let quotas = handle.inner.quotas.clone();
            let thread = glommio::LocalExecutorBuilder::new(placement)
                .name(&format!("punctual-shard-{id}"))
                .preempt_timer(self.preempt_timer)
                .spawn(move || async move {
                    set_timer_slack_ns(1);
                    let source = match clock_choice {
                        ClockChoice::Detect => HostSource::detect(),
                        ClockChoice::ClockGettime => HostSource::fallback(),
                    };
                    let mut clock = Clock::calibrate(source, ClockConfig::default());
                    if let Some(generation) = set_generation {
                        clock.follow_sets(generation);
                    }
                    let table = TimerTable::new(clock.now().as_micros(), capacity);
                    // SAFETY: `wakee_fd` came from `into_raw_fd` on a UnixStream that nothing
                    // else owns, so the stream made here becomes its sole owner.
                    let wakee = unsafe {
                        if park_direct {
                            Wakee::Direct(std::os::unix::net::UnixStream::from_raw_fd(wakee_fd))
                        } else {
                            Wakee::Reactor(glommio::net::UnixStream::from_raw_fd(wakee_fd))
                        }
                    };
                    let store: Box<dyn crate::store::Store> = match (store, redis_info) {
                        (StoreKind::Redis(cfg), Some(info)) => {
                            Box::new(RedisStore::new(cfg, info, id, shards, m.clone()))
                        }
                        _ => Box::new(MemoryStore),
                    };
                    let sinks: Vec<Box<dyn Sink>> = handler
                        .map(|h| Box::new(HandlerSink(h)) as Box<dyn Sink>)
                        .into_iter()
                        .collect();
                    let shard = Shard {
                        id,
                        ring,
                        table,
                        clock,
                        spin,
                        sinks,
                        store,
                        metrics: m.clone(),
                        stop,
                        pulse,
                        quotas,
                    };
                    shard.publish_initial();
                    if let Some((hook, handle)) = hook {
                        hook(id, handle);
                    }
                    let _ = ready.send(id);
                    shard.run(wakee).await;
                })
                .map_err(|e| Error::ShardStart {
                    shard: id,
                    reason: e.to_string(),
                })?;
            threads.push(thread);
        }
        drop(ready_tx);
        for _ in 0..self.shards {
            if ready_rx.recv_timeout(Duration::from_secs(10)).is_err() {
                stop.store(true, Ordering::Release);
                handle.inner.rings.iter().for_each(|r| r.wake());
                return Err(Error::ShardStart {
                    shard: 0,
                    reason: "a shard did not start within 10 s".into(),
                });
            }
        }
        let (period, grace) = self.watchdog;
        let watchdog = if period.is_zero() {
            None
        } else {
            let watched = pulses
                .into_iter()
                .zip(handle.inner.metrics.iter().cloned())
                .collect();
            Some(
                Watchdog::spawn(watched, period, grace).map_err(|e| Error::ShardStart {
                    shard: 0,
                    reason: format!("cannot start the watchdog thread: {e}"),
                })?,
            )
        };
        tracing::info!(shards = self.shards, cores = ?cores, spin_us = self.spin.as_micros() as u64, "engine started");
        Ok(Engine {
            handle,
            threads,
            stop,
            _watchdog: watchdog,
            _set_watch: set_watch,
        })
    }

    fn placement(&self) -> Result<Vec<usize>> {
        match &self.pinning {
            Pinning::None => Ok(Vec::new()),
            Pinning::Cores(cores) => {
                if cores.len() != self.shards {
                    return Err(Error::Config(format!(
                        "{} shards need {} cores, {} given",
                        self.shards,
                        self.shards,
                        cores.len()
                    )));
                }
                let available = available_cores();
                if let Some(c) = cores.iter().find(|c| !available.contains(c)) {
                    return Err(Error::Config(format!(
                        "core {c} is not available to this process (available: {available:?})"
                    )));
                }
                Ok(cores.clone())
            }
            Pinning::Auto => {
                let available = available_cores();
                if self.shards > available.len() {
                    return Err(Error::Config(format!(
                        "{} pinned shards need as many cores; this process may use {}",
                        self.shards,
                        available.len()
                    )));
                }
                Ok(available[..self.shards].to_vec())
            }
        }
    }
}

/// The CPU ids the calling thread may run on (its affinity mask, which a process started
/// under `taskset` or systemd's `CPUAffinity` inherits).
pub fn available_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

struct Shared {
    /// "memory" or "redis".
    store_kind: &'static str,
    quotas: Arc<Quotas>,
    rings: Vec<Arc<Ring>>,
    metrics: Vec<Arc<ShardMetrics>>,
    stopping: AtomicBool,
}

/// A running engine. Dropping it shuts it down; `shutdown` does the same and reports.
pub struct Engine {
    handle: Handle,
    threads: Vec<glommio::ExecutorJoinHandle<()>>,
    stop: Arc<AtomicBool>,
    /// Stopped after the shards (fields drop after `Drop::drop` has joined them).
    _watchdog: Option<Watchdog>,
    _set_watch: Option<SetWatch>,
}

impl Engine {
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Stops every shard and joins its thread. Pending in-memory timers are dropped.
    pub fn shutdown(mut self) -> std::result::Result<(), String> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> std::result::Result<(), String> {
        self.handle.inner.stopping.store(true, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        for ring in &self.handle.inner.rings {
            ring.wake();
        }
        let mut failed = Vec::new();
        for (id, t) in self.threads.drain(..).enumerate() {
            if t.join().is_err() {
                failed.push(id);
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("shard threads {failed:?} panicked"))
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            tracing::error!("{e}");
        }
    }
}

/// Per-shard figures for exporters.
#[derive(Clone, Debug)]
pub struct ShardStats {
    pub shard: usize,
    pub pending: u64,
    pub fired_total: u64,
    pub ring_depth: usize,
    pub ring_rejected_total: u64,
    pub clock_offset_ns: i64,
    pub clock_steps_total: u64,
    /// Leads under the step threshold that the clock removed at an anchor.
    pub clock_set_backs_total: u64,
    /// The shard's clock reads clock_gettime, not the TSC.
    pub clock_fallback: bool,
    /// Times the watchdog had to wake the shard (`shard::watchdog`).
    pub watchdog_wakes_total: u64,
    pub lateness: crate::metrics::HistogramSnapshot,
}

/// A cloneable, `Send` handle on the engine's shards.
#[derive(Clone)]
pub struct Handle {
    inner: Arc<Shared>,
}

impl Handle {
    pub fn shards(&self) -> usize {
        self.inner.rings.len()
    }

    /// The shard that owns (tenant, key): the owner of its partition (`partition`), so that
    /// the routing and the durable layout agree for any shard count.
    pub fn shard_for(&self, tenant: &str, key: &str) -> usize {
        crate::partition::shard_of(tenant, key, self.inner.rings.len())
    }

    /// Which store the shards use: "memory" or "redis".
    pub fn store_kind(&self) -> &'static str {
        self.inner.store_kind
    }

    /// Each shard's store state (`InMemory` for all without Redis).
    pub fn store_states(&self) -> Vec<StoreState> {
        self.inner.metrics.iter().map(|m| m.store.state()).collect()
    }

    /// True when no Redis is configured, or when every shard is connected and recovered:
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
        let (tx, rx) = reply_channel();
        self.push_schedule(tenant, key, deadline, payload, Some(tx), None)?;
        block_on(rx).map_err(|_| Error::ShuttingDown)?
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
        let (tx, rx) = reply_channel();
        let pushed = self.push_schedule(tenant, key, deadline, payload, Some(tx), slot);
        async move {
            pushed?;
            rx.await.map_err(|_| Error::ShuttingDown)?
        }
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
        self.push_schedule(tenant, key, deadline, payload, None, None)
    }

    /// Cancels the pending timer under (tenant, key).
    pub fn cancel(&self, tenant: &str, key: &str) -> Result<Cancelled> {
        let (tx, rx) = reply_channel();
        let timer = self.pack(tenant, key, &[])?;
        self.push(tenant, key, Op::Cancel { timer, reply: tx })?;
        block_on(rx).map_err(|_| Error::ShuttingDown)?
    }

    pub fn cancel_async(
        &self,
        tenant: &str,
        key: &str,
    ) -> impl Future<Output = Result<Cancelled>> + Send + 'static {
        let (tx, rx) = reply_channel();
        let pushed = self
            .pack(tenant, key, &[])
            .and_then(|timer| self.push(tenant, key, Op::Cancel { timer, reply: tx }));
        async move {
            pushed?;
            rx.await.map_err(|_| Error::ShuttingDown)?
        }
    }

    /// The pending timer under (tenant, key), if any.
    pub fn get(&self, tenant: &str, key: &str) -> Result<Option<TimerInfo>> {
        let (tx, rx) = reply_channel();
        let timer = self.pack(tenant, key, &[])?;
        self.push(tenant, key, Op::Get { timer, reply: tx })?;
        block_on(rx).map_err(|_| Error::ShuttingDown)?
    }

    pub fn get_async(
        &self,
        tenant: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<TimerInfo>>> + Send + 'static {
        let (tx, rx) = reply_channel();
        let pushed = self
            .pack(tenant, key, &[])
            .and_then(|timer| self.push(tenant, key, Op::Get { timer, reply: tx }));
        async move {
            pushed?;
            rx.await.map_err(|_| Error::ShuttingDown)?
        }
    }

    pub fn stats(&self) -> Vec<ShardStats> {
        let inner = &self.inner;
        (0..inner.rings.len())
            .map(|i| {
                let m = &inner.metrics[i];
                ShardStats {
                    shard: i,
                    pending: m.pending.load(Ordering::Relaxed),
                    fired_total: m.fired_total.load(Ordering::Relaxed),
                    ring_depth: inner.rings[i].len(),
                    ring_rejected_total: inner.rings[i].rejected(),
                    clock_offset_ns: m.clock_offset_ns.load(Ordering::Relaxed),
                    clock_steps_total: m.clock_steps_total.load(Ordering::Relaxed),
                    clock_set_backs_total: m.clock_set_backs_total.load(Ordering::Relaxed),
                    clock_fallback: m.clock_fallback.load(Ordering::Relaxed) != 0,
                    watchdog_wakes_total: m.watchdog_wakes_total.load(Ordering::Relaxed),
                    lateness: m.lateness.snapshot(),
                }
            })
            .collect()
    }

    fn push_schedule(
        &self,
        tenant: &str,
        key: &str,
        deadline: Deadline,
        payload: &[u8],
        reply: Option<Reply<Result<Scheduled>>>,
        slot: Option<QuotaSlot>,
    ) -> Result<()> {
        if deadline.0 > self.now().0.saturating_add(TEN_YEARS_US) {
            return Err(Error::DeadlineOutOfRange {
                deadline_us: deadline.0,
            });
        }
        let timer = self.pack(tenant, key, payload)?;
        self.push(
            tenant,
            key,
            Op::Schedule {
                timer,
                deadline,
                reply,
                slot,
            },
        )
    }

    fn pack(&self, tenant: &str, key: &str, payload: &[u8]) -> Result<PackedTimer> {
        validate_name(NameKind::Tenant, tenant)?;
        validate_name(NameKind::Key, key)?;
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                limit: MAX_PAYLOAD,
            });
        }
        // validate_name caps both at 128 bytes, so packing cannot fail here.
        PackedTimer::new(tenant, key, payload).ok_or(Error::NameTooLong {
            kind: NameKind::Key,
            len: key.len(),
        })
    }

    fn push(&self, tenant: &str, key: &str, op: Op) -> Result<()> {
        if self.inner.stopping.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        self.inner.rings[self.shard_for(tenant, key)].push(op)
    }
}
