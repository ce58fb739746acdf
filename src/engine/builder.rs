//! [`EngineBuilder`]: the engine's settings, and `build`, which starts one pinned glommio
//! executor per shard (`shard_start`) and returns once each has calibrated its clock and is
//! running.

use super::handle::{Handle, Shards};
use super::placement::{self, available_cores, Pinning};
use super::running::Engine;
use super::shard_start::{start_shard, ShardSeed, StoreSeed, PREEMPT_TIMER};
use crate::clock::{HostSource, SetWatch};
use crate::error::{Error, Result};
use crate::metrics::ShardMetrics;
use crate::quota::Quotas;
use crate::ring::Ring;
use crate::runtime::watchdog::{Pulse, Watchdog};
use crate::shard::spin::SpinWindow;
use crate::sink::webhook::settings::WebhookSettings;
use crate::sink::FireHandler;
use crate::store::journal::JournalConfig;
use crate::store::redis::clustered::Holders;
use crate::store::redis::RedisConfig;
use crate::timer::FiredTimer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Which store the shards use.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum StoreKind {
    /// Not durable: pending timers are lost when the process exits.
    #[default]
    Memory,
    /// Redis, through batched pipelines on each shard's own connection.
    Redis(RedisConfig),
    /// A journal per shard on local disk, group-committed with fdatasync.
    Journal(JournalConfig),
}

impl StoreKind {
    pub fn name(&self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis(_) => "redis",
            StoreKind::Journal(_) => "journal",
        }
    }
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
    /// Whether `spin` is the ceiling of a window that follows the wake-up latency.
    adaptive_spin: bool,
    ring_capacity: usize,
    shard_capacity: usize,
    clock: ClockChoice,
    handler: Option<FireHandler>,
    on_shard_start: Option<ShardStartHook>,
    store: StoreKind,
    preempt_timer: Duration,
    watchdog: (Duration, Duration),
    start_timeout: Option<Duration>,
    shutdown_timeout: Duration,
    quotas: Vec<(String, u64)>,
    /// Tenants whose queue is on, with their settings (`queue`, `queue_settings`).
    queues: Vec<(String, crate::queue::QueueSettings)>,
    webhooks: Option<Arc<WebhookSettings>>,
    holders: Option<Arc<dyn Holders>>,
    history: Option<Arc<crate::history::History>>,
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
            adaptive_spin: false,
            ring_capacity: 65_536,
            shard_capacity: 10_000_000,
            clock: ClockChoice::Detect,
            handler: None,
            on_shard_start: None,
            store: StoreKind::Memory,
            preempt_timer: PREEMPT_TIMER,
            start_timeout: None,
            shutdown_timeout: super::running::SHUTDOWN_LIMIT,
            quotas: Vec::new(),
            queues: Vec::new(),
            webhooks: None,
            holders: None,
            history: None,
            watchdog: (
                crate::runtime::watchdog::PERIOD,
                crate::runtime::watchdog::GRACE,
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
        self.adaptive_spin = false;
        self
    }

    /// A spin window that follows each shard's measured wake-up latency: the recent p99.9 of
    /// how late its parks resumed, plus a small margin, never above `max` (see
    /// `src/shard/spin.rs`). It spins only as long as the host makes it need to.
    pub fn adaptive_spin(mut self, max: Duration) -> Self {
        self.spin = max;
        self.adaptive_spin = true;
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

    /// Tenants whose fired timers get no Redis Stream entry (they use webhooks only). Applies
    /// to a Redis store set before this call.
    pub fn streams_off(mut self, tenants: impl IntoIterator<Item = String>) -> Self {
        if let StoreKind::Redis(cfg) = &mut self.store {
            cfg.streams_off.extend(tenants);
        }
        self
    }

    /// Makes timers durable in a journal per shard under `dir`, with the journal's defaults
    /// (see [`JournalConfig::new`]).
    pub fn journal(self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.store(StoreKind::Journal(JournalConfig::new(dir)))
    }

    /// Makes timers durable in a journal per shard with this configuration.
    pub fn journal_config(self, config: JournalConfig) -> Self {
        self.store(StoreKind::Journal(config))
    }

    /// For a node that shares a Redis Cluster with others (`nodes::node`): who holds each
    /// partition's lease. Each shard's store fences a partition's writes with its holder, and
    /// each shard acts only on the partitions it was handed to load (`Handle::partitions`)
    /// while their lease holds; start-up recovery loads none. Only with a Redis store.
    pub fn partition_holders(mut self, holders: Arc<dyn Holders>) -> Self {
        self.holders = Some(holders);
        self
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

    /// Turns `tenant`'s pull queue on (`queue`): its fired timers without a callback wait as
    /// messages until a consumer receives and acknowledges them, and become dead letters after
    /// `max_receives` receives.
    pub fn queue(self, tenant: impl Into<String>, max_receives: u32) -> Self {
        self.queue_settings(tenant, max_receives.into())
    }

    /// [`EngineBuilder::queue`] with every setting: `max_receives`, the retention of a ready
    /// message, and the receives that may wait at once.
    pub fn queue_settings(
        mut self,
        tenant: impl Into<String>,
        mut settings: crate::queue::QueueSettings,
    ) -> Self {
        settings.max_receives = settings.max_receives.max(1);
        settings.max_waiting = settings.max_waiting.max(1);
        if settings.retention.is_zero() {
            settings.retention = crate::queue::DEFAULT_RETENTION;
        }
        self.queues.push((tenant.into(), settings));
        self
    }

    /// Keeps the history of fires and deliveries in `history` (`crate::history`).
    pub fn history(mut self, history: Arc<crate::history::History>) -> Self {
        self.history = Some(history);
        self
    }

    /// Delivers timers registered with a callback (`sink::webhook`) with these settings.
    /// Without it, a timer's callback is ignored and it fires like any other.
    pub fn webhooks(mut self, settings: Arc<WebhookSettings>) -> Self {
        self.webhooks = Some(settings);
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

    /// The watchdog's period and grace (default 1 ms each; see `runtime::watchdog`). Zero
    /// period turns it off: only for tests that show what it prevents.
    #[doc(hidden)]
    pub fn watchdog(mut self, period: Duration, grace: Duration) -> Self {
        self.watchdog = (period, grace);
        self
    }

    /// How long `build` waits for every shard to report that it runs (default 10 s, or 600 s
    /// with a journal, which loads and checks its files first). A shard that has not
    /// reported by then fails the build with [`Error::ShardStart`] naming it.
    pub fn start_timeout(mut self, limit: Duration) -> Self {
        self.start_timeout = Some(limit);
        self
    }

    /// How long a shutdown waits for the shards to stop (default 60 s); one still running
    /// after it is left behind and reported.
    pub fn shutdown_timeout(mut self, limit: Duration) -> Self {
        self.shutdown_timeout = limit;
        self
    }

    /// What each shard's store starts from, checked here, on the caller's thread, so that a
    /// bad URL or setting is a build error. A journal's data directory is locked, and
    /// re-partitioned if the shard count changed, before any shard starts.
    fn store_seed(&self) -> Result<StoreSeed> {
        Ok(match &self.store {
            StoreKind::Memory => {
                tracing::info!("store: in-memory (not durable: pending timers are lost on exit); configure a durable store for durability");
                StoreSeed::Memory
            }
            StoreKind::Redis(cfg) => StoreSeed::Redis(cfg.clone(), cfg.validate()?),
            StoreKind::Journal(cfg) => {
                cfg.validate()?;
                let data = crate::store::journal::layout::prepare(cfg, self.shards)?;
                crate::page::clear(&cfg.dir).map_err(|e| {
                    Error::Config(format!(
                        "paging: cannot remove the pages of an earlier run: {e}"
                    ))
                })?;
                StoreSeed::Journal(cfg.clone(), data)
            }
        })
    }

    /// Starts the shards and returns once each has calibrated its clock and is running, or
    /// fails within the start limit ([`EngineBuilder::start_timeout`]); it never waits on a
    /// shard without a bound.
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
        if self.holders.is_some() && !matches!(self.store, StoreKind::Redis(_)) {
            return Err(Error::Config(format!(
                "partition holders need a Redis store, not {}",
                self.store.name()
            )));
        }
        let cores = placement::resolve(&self.pinning, self.shards)?;
        // Every shard's core is known before any shard starts a helper thread, which keeps off
        // them (`cpus::off_shard_cores`).
        crate::cpus::note_shard_cores(&cores);
        let store = self.store_seed()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (handle, wakees) = self.handle()?;
        let pulses: Vec<Arc<Pulse>> = (0..self.shards).map(|_| Arc::default()).collect();
        let set_watch = watch_clock_sets(&handle);
        let set_generation = set_watch.as_ref().map(SetWatch::generation);
        // The watchdog guards every shard from its first instant: it runs before they start.
        let watchdog = self.start_watchdog(&pulses, &handle, &cores)?;
        let mut threads = Vec::with_capacity(self.shards);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for (id, wakee) in wakees.into_iter().enumerate() {
            let hook = self.on_shard_start.clone().map(|hook| {
                let handle = handle.clone();
                Box::new(move || hook(id, handle)) as Box<dyn FnOnce() + Send>
            });
            let seed = ShardSeed {
                id,
                shards: self.shards,
                core: cores.get(id).copied(),
                ring: handle.inner.rings[id].clone(),
                wakee,
                metrics: handle.inner.metrics[id].clone(),
                pulse: pulses[id].clone(),
                quotas: handle.inner.quotas.clone(),
                queues: handle.inner.queues.clone(),
                stop: stop.clone(),
                source: match self.clock {
                    ClockChoice::Detect => HostSource::detect,
                    ClockChoice::ClockGettime => HostSource::fallback,
                },
                set_generation: set_generation.clone(),
                spin: if self.adaptive_spin {
                    SpinWindow::adaptive(self.spin)
                } else {
                    SpinWindow::fixed(self.spin)
                },
                capacity: self.shard_capacity,
                preempt_timer: self.preempt_timer,
                store: store.clone(),
                holders: self.holders.clone(),
                handler: self.handler.clone(),
                webhooks: self.webhooks.clone(),
                history: self.history.as_ref().map(|h| h.recorder()),
                hook,
                ready: ready_tx.clone(),
            };
            match start_shard(seed) {
                Ok(t) => threads.push(t),
                Err(e) => {
                    abandon_start(&stop, &handle, threads, STOP_AFTER_FAILED_START);
                    return Err(e);
                }
            }
        }
        drop(ready_tx);
        // A journal loads and checks its files before its shard reports: allow for the disk.
        let start_limit = self.start_timeout.unwrap_or(match self.store {
            StoreKind::Journal(_) => Duration::from_secs(600),
            _ => Duration::from_secs(10),
        });
        if let Err(e) = await_ready(&ready_rx, self.shards, start_limit) {
            abandon_start(&stop, &handle, threads, start_limit);
            return Err(e);
        }
        tracing::info!(shards = self.shards, cores = ?cores, spin_us = self.spin.as_micros() as u64, adaptive_spin = self.adaptive_spin, "engine started");
        Ok(Engine {
            handle,
            threads,
            stop,
            shutdown_limit: self.shutdown_timeout,
            _watchdog: watchdog,
            _set_watch: set_watch,
        })
    }

    /// The handle on the shards' rings, quotas and metrics, with the read end of each ring's
    /// wake socket (for its shard).
    fn handle(&self) -> Result<(Handle, Vec<std::os::unix::net::UnixStream>)> {
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
        let quotas = Arc::new(Quotas::new(self.quotas.clone(), self.shards));
        let capacity = (self.shards as u64).saturating_mul(self.shard_capacity as u64);
        if quotas.total_limit() >= capacity {
            tracing::warn!(
                quotas = quotas.total_limit(),
                capacity,
                "tenants' quotas add up to the whole capacity: room is held for them, so tenants without a quota are refused capacity_exceeded; raise shard_capacity or lower the quotas"
            );
        }
        let handle = Handle {
            inner: Arc::new(Shards {
                store_kind: self.store.name(),
                quotas,
                queues: Arc::new(crate::queue::PullQueues::new(self.queues.clone())),
                rings,
                metrics: (0..self.shards)
                    .map(|_| Arc::new(ShardMetrics::default()))
                    .collect(),
                stopping: AtomicBool::new(false),
                history: self.history.clone(),
            }),
        };
        Ok((handle, wakees))
    }

    /// The watchdog over every shard's pulse (none when its period is zero).
    fn start_watchdog(
        &self,
        pulses: &[Arc<Pulse>],
        handle: &Handle,
        cores: &[usize],
    ) -> Result<Option<Watchdog>> {
        let (period, grace) = self.watchdog;
        if period.is_zero() {
            return Ok(None);
        }
        let watched = pulses
            .iter()
            .cloned()
            .zip(handle.inner.metrics.iter().cloned())
            .collect();
        let watchdog =
            Watchdog::spawn(watched, period, grace, cores).map_err(|e| Error::ShardStart {
                shard: 0,
                reason: format!("cannot start the watchdog thread: {e}"),
            })?;
        Ok(Some(watchdog))
    }
}

/// Every shard re-anchors as soon as the system clock is set, not at its next 100 ms anchor:
/// the watch bumps a generation the clocks follow and wakes every shard. None when the watch
/// cannot run (logged).
fn watch_clock_sets(handle: &Handle) -> Option<SetWatch> {
    let rings = handle.inner.rings.clone();
    match SetWatch::spawn(move || rings.iter().for_each(|r| r.wake())) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch for system clock sets; shards notice a step at their next anchor (within 100 ms)");
            None
        }
    }
}

/// How long a failed start waits for the shards that did start to stop.
const STOP_AFTER_FAILED_START: Duration = Duration::from_secs(10);

/// Waits until all `shards` report that they run, up to `limit` in all; the first failure
/// reported, or which shards had not reported in time.
fn await_ready(
    ready: &std::sync::mpsc::Receiver<Result<usize>>,
    shards: usize,
    limit: Duration,
) -> Result<()> {
    let give_up = std::time::Instant::now() + crate::units::capped(limit);
    let mut started = vec![false; shards];
    for _ in 0..shards {
        let left = give_up.saturating_duration_since(std::time::Instant::now());
        match ready.recv_timeout(left) {
            Ok(Ok(id)) => started[id] = true,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                let missing: Vec<usize> = (0..shards).filter(|&i| !started[i]).collect();
                return Err(Error::ShardStart {
                    shard: missing.first().copied().unwrap_or(0),
                    reason: format!(
                        "shards {missing:?} did not report within {} ms (stuck in their store's \
                         recovery, their start hook, or an executor that does not run)",
                        limit.as_millis()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// A start failed: stops the shards that did start and joins them, within `limit` (at most
/// [`STOP_AFTER_FAILED_START`]); a shard
/// that does not stop in time is left behind (logged), never waited on without end.
fn abandon_start(
    stop: &AtomicBool,
    handle: &Handle,
    threads: Vec<std::thread::JoinHandle<()>>,
    limit: Duration,
) {
    stop.store(true, Ordering::Release);
    handle.inner.stopping.store(true, Ordering::Release);
    handle.inner.rings.iter().for_each(|r| r.wake());
    let report = super::running::join_within(threads, limit.min(STOP_AFTER_FAILED_START));
    if !report.stuck.is_empty() {
        tracing::error!(
            shards = ?report.stuck,
            "shards of a failed start did not stop within {} ms; left behind",
            limit.min(STOP_AFTER_FAILED_START).as_millis()
        );
    }
}
