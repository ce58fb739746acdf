//! Starting one shard: [`ShardSeed`], what a shard needs to start (made by `build` on the
//! caller's thread), and [`start_shard`], which spawns the shard's thread and, on it, makes its
//! executor, calibrates its clock, opens its store ([`open_store`]), makes its sinks
//! ([`make_sinks`]) and runs its loop.
//!
//! A shard reports on its seed's `ready` channel once it runs (after its start hook), or why
//! it could not start; `build` waits for every shard's report within its start limit.

use crate::clock::{Clock, ClockConfig, HostSource};
use crate::error::{Error, Result};
use crate::metrics::ShardMetrics;
use crate::page::Pager;
use crate::quota::Quotas;
use crate::ring::Ring;
use crate::runtime::doorbell::Doorbell;
use crate::runtime::watchdog::Pulse;
use crate::shard::gate::Gate;
use crate::shard::spin::SpinWindow;
use crate::shard::{set_timer_slack_ns, Deliveries, Shard, ShardFailure, Wakee};
use crate::sink::webhook::{settings::WebhookSettings, WebhookSink};
use crate::sink::{FireHandler, Followups, HandlerSink, Sink};
use crate::store::journal::layout::DataDir;
use crate::store::journal::{JournalConfig, JournalStore};
use crate::store::memory::MemoryStore;
use crate::store::redis::clustered::Holders;
use crate::store::redis::endpoint::Endpoint;
use crate::store::redis::{RedisConfig, RedisStore};
use crate::store::Store;
use crate::wheel::TimerTable;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

/// glommio's preemption timer: its own default. Shards yield on their own and never rely on
/// being preempted; a shorter timer brings back a glommio stall (see `runtime::watchdog`).
pub(super) const PREEMPT_TIMER: Duration = Duration::from_millis(100);

/// What one shard needs to start.
pub(super) struct ShardSeed {
    pub id: usize,
    pub shards: usize,
    /// The core it is pinned to; none: unbound.
    pub core: Option<usize>,
    pub ring: Arc<Ring>,
    /// The read end of the ring's wake socket.
    pub wakee: UnixStream,
    pub metrics: Arc<ShardMetrics>,
    /// What the watchdog watches of this shard.
    pub pulse: Arc<Pulse>,
    pub quotas: Arc<Quotas>,
    pub queues: Arc<crate::queue::PullQueues>,
    /// Raised when the engine stops.
    pub stop: Arc<AtomicBool>,
    /// The clock's tick source: detected, or clock_gettime.
    pub source: fn() -> HostSource,
    /// The generation the system-clock watch bumps on a set, if it runs.
    pub set_generation: Option<Arc<AtomicU64>>,
    pub spin: SpinWindow,
    /// Pending timers the shard may hold.
    pub capacity: usize,
    /// glommio's preemption timer once the shard is guarded (tests shorten it).
    pub preempt_timer: Duration,
    pub store: StoreSeed,
    /// Over a cluster of nodes, who holds each partition's lease: the store fences its writes
    /// with them and the shard acts only on the partitions it loaded and holds.
    pub holders: Option<Arc<dyn Holders>>,
    pub handler: Option<FireHandler>,
    pub webhooks: Option<Arc<WebhookSettings>>,
    /// The shard's end of the history, when it is kept (`crate::history`).
    pub history: Option<crate::history::Recorder>,
    /// The engine's start hook, bound to this shard and a handle.
    pub hook: Option<Box<dyn FnOnce() + Send>>,
    /// Where the shard reports its id once it runs, or why it could not start.
    pub ready: Sender<Result<usize>>,
}

/// What a shard's store starts from: checked, and for a journal locked, on the caller's
/// thread before any shard starts.
#[derive(Clone)]
pub(super) enum StoreSeed {
    Memory,
    Redis(RedisConfig, Endpoint),
    Journal(JournalConfig, Arc<DataDir>),
}

impl ShardSeed {
    /// A shard that runs only its own loop parks in the kernel directly; with other tasks on
    /// its executor (HTTP, the store, webhooks) it must park in glommio's reactor.
    fn parks_direct(&self) -> bool {
        self.hook.is_none() && matches!(self.store, StoreSeed::Memory) && self.webhooks.is_none()
    }
}

/// Spawns the shard's thread, which runs the shard until the engine stops.
pub(super) fn start_shard(seed: ShardSeed) -> Result<std::thread::JoinHandle<()>> {
    let id = seed.id;
    let placement = match seed.core {
        Some(core) => glommio::Placement::Fixed(core),
        None => glommio::Placement::Unbound,
    };
    // The executor starts under glommio's default timer; a shorter one (tests) applies only
    // once the shard is guarded (`run_under_preempt_timer`).
    let executor = glommio::LocalExecutorBuilder::new(placement).preempt_timer(PREEMPT_TIMER);
    let failure = ShardFailure {
        id,
        ring: seed.ring.clone(),
        metrics: seed.metrics.clone(),
        pulse: seed.pulse.clone(),
    };
    // A plain thread that makes its executor, so that `failure` lives outside the executor
    // and sees the thread unwind from a panic in any of its tasks.
    std::thread::Builder::new()
        .name(format!("punctual-shard-{id}"))
        .spawn(move || {
            let _failure = failure;
            let ex = match executor.make() {
                Ok(ex) => ex,
                Err(e) => {
                    let _ = seed.ready.send(Err(Error::ShardStart {
                        shard: id,
                        reason: format!("cannot make its executor: {e}"),
                    }));
                    return;
                }
            };
            ex.run(async move {
                // Registers the thread and the task's waker with the watchdog at once.
                seed.pulse.on_this_thread();
                seed.pulse.register_home().await;
                let (pulse, timer) = (seed.pulse.clone(), seed.preempt_timer);
                let body = {
                    let pulse = pulse.clone();
                    async move {
                        run_shard(seed).await;
                        pulse.hand_back();
                    }
                };
                run_under_preempt_timer(timer, &pulse, body).await;
                // Still on the executor, in its last task: the wakers are dropped where they
                // live, and nothing is left for the watchdog to wake once the executor is gone.
                pulse.leave();
            })
        })
        .map_err(|e| Error::ShardStart {
            shard: id,
            reason: e.to_string(),
        })
}

/// On the shard's thread, inside its executor: makes the shard and runs its loop.
async fn run_shard(seed: ShardSeed) {
    let park_direct = seed.parks_direct();
    let ShardSeed {
        id,
        shards,
        ring,
        wakee,
        metrics,
        pulse,
        quotas,
        queues,
        stop,
        source,
        set_generation,
        spin,
        capacity,
        store,
        holders,
        history,
        handler,
        webhooks,
        hook,
        ready,
        ..
    } = seed;
    crate::shard::claim_thread(id);
    // Replies from other threads reach this executor's tasks through its doorbell, not
    // glommio's foreign wakes (see `doorbell`).
    if !park_direct {
        if let Err(e) = Doorbell::install(metrics.clone()) {
            tracing::warn!(shard = id, error = %e, "no doorbell: replies from other threads wake this shard's tasks through glommio");
        }
    }
    set_timer_slack_ns(1);
    let mut clock = Clock::calibrate(source(), ClockConfig::default());
    if let Some(generation) = set_generation {
        clock.follow_sets(generation);
    }
    let table = TimerTable::new(clock.now().as_micros(), capacity);
    let wakee = if park_direct {
        Wakee::Direct(wakee)
    } else {
        let fd = wakee.into_raw_fd();
        // SAFETY: `into_raw_fd` gave up the std stream's ownership of `fd`, which nothing else
        // owns, so the stream made here becomes its sole owner.
        Wakee::Reactor(unsafe { glommio::net::UnixStream::from_raw_fd(fd) })
    };
    let paging = match &store {
        StoreSeed::Journal(cfg, _) => cfg.page_horizon.map(|h| {
            let dir = crate::page::pages_dir(&cfg.dir).join(format!("shard-{id}"));
            let exit = cfg.on_failure == crate::store::journal::OnFailure::Exit;
            (dir, h, cfg.disk.clone(), exit)
        }),
        _ => None,
    };
    let store = match open_store(store, id, shards, holders.clone(), &metrics, &pulse).await {
        Ok(store) => store,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // A follow-up wakes the shard if it parked meanwhile.
    let waker = ring.clone();
    let inbox = Followups::with_history(Box::new(move || waker.nudge()), history);
    let sinks = make_sinks(id, handler, webhooks, &inbox, &metrics);
    let pager = match paging {
        Some((dir, horizon, disk, exit)) => {
            let waker = ring.clone();
            let now = clock.now().as_micros();
            let nudge = Box::new(move || waker.nudge());
            match Pager::open(dir.clone(), id, horizon, now, disk, exit, nudge).await {
                Ok(p) => Some(p),
                Err(e) => {
                    let reason = format!("paging: cannot open {}: {e}", dir.display());
                    let _ = ready.send(Err(Error::ShardStart { shard: id, reason }));
                    return;
                }
            }
        }
        None => None,
    };
    let shard = Shard {
        id,
        ring,
        table,
        clock,
        spin,
        sinks,
        store,
        metrics,
        stop,
        pulse,
        quotas,
        queues: crate::shard::ShardQueues::new(queues),
        recovered_occurrences: Default::default(),
        deliveries: Deliveries {
            inbox,
            ..Default::default()
        },
        spent: Default::default(),
        gate: Gate::new(holders),
        purging: None,
        pager,
        deferred: Default::default(),
    };
    shard.publish_initial();
    if let Some(hook) = hook {
        hook();
    }
    let _ = ready.send(Ok(id));
    shard.run(wakee).await;
}

/// The shard's store, made on its thread. A journal loads and checks its files first, under
/// the watchdog's guard (it may take minutes); an error stops the start.
async fn open_store(
    store: StoreSeed,
    id: usize,
    shards: usize,
    holders: Option<Arc<dyn Holders>>,
    metrics: &Arc<ShardMetrics>,
    pulse: &Pulse,
) -> Result<Box<dyn Store>> {
    Ok(match store {
        StoreSeed::Memory => Box::new(MemoryStore),
        StoreSeed::Redis(cfg, endpoint) => match holders {
            Some(h) => Box::new(RedisStore::fenced(
                cfg,
                endpoint,
                id,
                shards,
                metrics.clone(),
                h,
            )),
            None => Box::new(RedisStore::new(cfg, endpoint, id, shards, metrics.clone())),
        },
        StoreSeed::Journal(cfg, data) => {
            let open = JournalStore::open(cfg, data, id, shards, metrics.clone());
            Box::new(pulse.guard_start(open).await?)
        }
    })
}

/// The shard's sinks: the engine's fire handler, if any, then webhook delivery, if
/// configured, which hands its outcomes to the shard through `inbox`.
fn make_sinks(
    id: usize,
    handler: Option<FireHandler>,
    webhooks: Option<Arc<WebhookSettings>>,
    inbox: &Followups,
    metrics: &Arc<ShardMetrics>,
) -> Vec<Box<dyn Sink>> {
    let mut sinks: Vec<Box<dyn Sink>> = handler
        .map(|h| Box::new(HandlerSink(h)) as Box<dyn Sink>)
        .into_iter()
        .collect();
    if let Some(settings) = webhooks {
        sinks.push(Box::new(WebhookSink::new(
            id,
            settings,
            metrics.clone(),
            inbox.clone(),
        )));
    }
    sinks
}

/// Runs a shard's body under glommio preemption timer `timer`. glommio 0.9 parks an executor
/// whose preemption timer expired before a scheduling round began, runnable tasks or not (the
/// shard module doc): a timer shorter than the executor's first round would park it before the
/// shard's first task registers with the watchdog, and then nothing could wake it. So the
/// executor starts under the default timer, and a shorter one applies only after that
/// registration, to a task queue of the shard's own, which every task the shard spawns
/// inherits (glommio takes the shortest latency of the queues that are active).
///
/// The body then runs as a task of its own, and both hand-overs between it and this task (the
/// body's first poll; this task's wake when the body ends) can be slept through by the same
/// bug, outside the shard loop's guards: a park's timer ends one sleep, and then the executor
/// may sleep again with no timer left (a shutdown was left behind that way under a 20 µs
/// timer). So the watchdog guards both: this task, registered first (`Pulse::register_home`),
/// expects the body to run at once, and the body's loop hands the watchdog back this task's
/// waker, expecting it to run at once, when it ends (`Pulse::hand_back`).
async fn run_under_preempt_timer(
    timer: Duration,
    pulse: &Pulse,
    body: impl std::future::Future<Output = ()> + 'static,
) {
    if timer >= PREEMPT_TIMER {
        return body.await;
    }
    let queue = glommio::executor().create_task_queue(
        glommio::Shares::default(),
        glommio::Latency::Matters(timer),
        "punctual-shard",
    );
    match glommio::spawn_local_into(body, queue) {
        Ok(task) => {
            pulse.expect_by(Duration::ZERO);
            task.await
        }
        // Cannot happen (the queue was just made); the start then times out, naming the shard.
        Err(e) => tracing::error!(error = %e, "shard: cannot run in its own task queue"),
    }
}
