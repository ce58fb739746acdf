//! A shard: one thread, one glommio `LocalExecutor` pinned to its core, owning its timer table,
//! its clock and the consuming end of its ring. Nothing here is shared or locked.
//!
//! # The loop
//!
//! ```text
//!   loop:
//!     drain the ring (at most DRAIN_BATCH ops)
//!     re-anchor the clock if 100 ms have passed
//!     poll the table at now: fire what is due, in deadline order
//!     if the ring has more: yield, go round
//!     next = min(next deadline, next anchor)
//!     if next - now > spin window: park (io_uring: timer + ring wake-up read)
//!                                  until `next - spin window`
//!     else: spin reading the TSC until `next`, or until the ring has work
//! ```
//!
//! The park is glommio's timer raced against a read of the ring's wake-up socket; a producer
//! writes a byte only when the shard is parked (see `ring`), so ingest does not wait for
//! glommio's preemption timer or its low-priority queues.
//!
//! Cost per fired timer: the wheel's removal, an index removal, one clock read for `fired_at`,
//! the histogram update and the handler.
//!
//! # With a durable store
//!
//! When Redis is configured the shard has a `store::ShardStore`: before the loop it recovers
//! its partitions (`store::apply`), ops go through `apply_durable` (replies wait for Redis),
//! each fire also queues its stream entry, and after each pass the store task is kicked. The
//! in-memory shard checks `Option<ShardStore>` once per drained batch and once per poll.

use crate::clock::{Clock, TimeSource};
use crate::error::Error;
use crate::metrics::ShardMetrics;
use crate::ring::{Cancelled, Op, Ring, Scheduled, TimerInfo};
use crate::sink::FiredEntry;
use crate::store::ShardStore;
use crate::units::{UtcMicros, UtcNanos};
use crate::wheel::table::{TimerTable, UpsertError};
use futures_lite::AsyncReadExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Ops taken from the ring before the shard looks at its clock again.
const DRAIN_BATCH: usize = 4096;

/// The same for a shard with a store: shorter passes, so that the store task (on the same
/// executor) reads Redis's replies between them instead of after a 4,096-op pass.
const DURABLE_DRAIN_BATCH: usize = 512;

/// What the handler sees of a fired timer. It runs on the shard's thread: keep it short.
#[derive(Debug, Clone, Copy)]
pub struct FiredTimer<'a> {
    pub shard: usize,
    pub tenant: &'a str,
    pub key: &'a str,
    pub version: u64,
    pub deadline: UtcMicros,
    pub fired_at: UtcNanos,
    pub payload: &'a [u8],
}

pub type FireHandler = Arc<dyn Fn(&FiredTimer<'_>) + Send + Sync>;

pub(crate) struct Shard<S: TimeSource> {
    pub id: usize,
    pub ring: Arc<Ring>,
    pub table: TimerTable,
    pub clock: Clock<S>,
    pub spin: Duration,
    pub handler: FireHandler,
    pub metrics: Arc<ShardMetrics>,
    pub stop: Arc<AtomicBool>,
    /// The durable store; `None` for the in-memory engine.
    pub store: Option<ShardStore>,
}

impl<S: TimeSource> Shard<S> {
    /// Runs until `stop` is set. `wakee` is the socket the ring's producers write to.
    pub async fn run(mut self, mut wakee: Wakee) {
        let mut buf = [0u8; 64];
        if !self.recover_first().await {
            self.ring.unpark();
            return;
        }
        while !self.stop.load(Ordering::Acquire) {
            self.drain();
            let t = self.clock.source().ticks();
            if self.clock.anchor_due(t) {
                self.clock.anchor();
                self.publish_clock();
            }
            self.fire_due();
            if let Some(store) = &self.store {
                store.kick();
            }
            if !self.ring.is_empty() {
                // Let the shard's other tasks (HTTP connections) run between batches.
                futures_lite::future::yield_now().await;
                continue;
            }
            let now = self.clock.now();
            let next = self.next_wake();
            let wait = Duration::from_nanos(next.0.saturating_sub(now.0));
            if wait > self.spin {
                if self.ring.prepare_park() {
                    let nap = wait - self.spin;
                    match &mut wakee {
                        Wakee::Reactor(stream) => {
                            futures_lite::future::or(
                                async {
                                    let _ = stream.read(&mut buf).await;
                                },
                                glommio::timer::sleep(nap),
                            )
                            .await
                        }
                        Wakee::Direct(stream) => park_direct(stream, nap, &mut buf),
                    }
                    self.ring.unpark();
                }
            } else {
                self.spin_until(next);
            }
        }
        if let Some(mut store) = self.store.take() {
            store.close().await;
        }
        self.ring.unpark();
    }

    /// The earlier of the next deadline and the next anchor, in UTC ns.
    fn next_wake(&self) -> UtcNanos {
        let anchor = self.clock.next_anchor_at();
        match self.table.next_deadline() {
            Some(d) => anchor.min(d.as_nanos()),
            None => anchor,
        }
    }

    fn spin_until(&self, target: UtcNanos) {
        while self.clock.now() < target {
            if !self.ring.is_empty() || self.stop.load(Ordering::Relaxed) {
                return;
            }
            std::hint::spin_loop();
        }
    }

    fn drain(&mut self) {
        if let Some(store) = &self.store {
            store.stamp();
            for _ in 0..DURABLE_DRAIN_BATCH {
                let Some(op) = self.ring.pop() else { break };
                self.apply_durable(op);
            }
        } else {
            for _ in 0..DRAIN_BATCH {
                let Some(op) = self.ring.pop() else { break };
                self.apply(op);
            }
        }
        self.metrics
            .pending
            .store(self.table.len() as u64, Ordering::Relaxed);
    }

    pub(crate) fn apply(&mut self, op: Op) {
        match op {
            Op::Schedule {
                timer,
                deadline,
                reply,
            } => {
                let now = self.clock.now().as_micros();
                let result = match self.table.upsert(timer, deadline, now) {
                    Ok(u) => Ok(Scheduled {
                        version: u.version,
                        deadline,
                        replaced: u.replaced,
                    }),
                    Err(UpsertError::Capacity) => Err(Error::CapacityExceeded {
                        shard: self.id,
                        capacity: self.table.capacity(),
                    }),
                    Err(UpsertError::OutOfRange) => Err(Error::DeadlineOutOfRange {
                        deadline_us: deadline.0,
                    }),
                };
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                } else if let Err(e) = result {
                    tracing::warn!(shard = self.id, error = %e, "detached schedule refused");
                }
            }
            Op::Cancel { timer, reply } => {
                let answer = match self.table.cancel(timer.identity()) {
                    Some((deadline, record)) => Cancelled::Cancelled {
                        version: record.version,
                        deadline,
                    },
                    None => Cancelled::NotFound,
                };
                let _ = reply.send(Ok(answer));
            }
            Op::Get { timer, reply } => {
                let info = self.table.get(timer.identity()).map(|v| TimerInfo {
                    deadline: v.deadline,
                    version: v.version,
                    payload: v.timer.payload().to_vec(),
                });
                let _ = reply.send(info);
            }
        }
    }

    fn fire_due(&mut self) {
        let now = self.clock.now().as_micros();
        // With a store, every fire also queues its stream entry.
        let mut sink = self
            .store
            .as_ref()
            .map(|store| (store.outbox(), store.stream_maxlen()));
        let fired = poll_table(
            &mut self.table,
            &self.clock,
            &self.handler,
            &self.metrics,
            self.id,
            now,
            |f| {
                if let Some((outbox, maxlen)) = &mut sink {
                    let entry = FiredEntry {
                        tenant: f.tenant,
                        key: f.key,
                        version: f.version,
                        fire_at: f.deadline,
                        fired_at: f.fired_at,
                        payload: f.payload,
                    };
                    crate::store::fire(outbox, &entry, *maxlen);
                }
            },
        );
        drop(sink);
        if fired > 0 {
            self.metrics.fired_total.fetch_add(fired, Ordering::Relaxed);
            self.metrics
                .pending
                .store(self.table.len() as u64, Ordering::Relaxed);
        }
    }

    pub fn publish_initial(&self) {
        self.publish_clock();
    }

    fn publish_clock(&self) {
        let s = self.clock.stats();
        self.metrics
            .clock_offset_ns
            .store(s.offset_ns, Ordering::Relaxed);
        self.metrics
            .clock_steps_total
            .store(s.steps, Ordering::Relaxed);
        let fallback = self.clock.kind() == crate::clock::SourceKind::ClockGettime;
        self.metrics
            .clock_fallback
            .store(u64::from(fallback), Ordering::Relaxed);
    }
}

/// Fires what is due at `now` in deadline order: the handler, then `also` (the store's
/// queueing, or nothing). Returns how many fired.
fn poll_table<S: TimeSource>(
    table: &mut TimerTable,
    clock: &Clock<S>,
    handler: &FireHandler,
    metrics: &ShardMetrics,
    shard: usize,
    now: UtcMicros,
    mut also: impl FnMut(&FiredTimer<'_>),
) -> u64 {
    let mut fired = 0u64;
    table.poll(now, |deadline, record| {
        let fired_at = clock.now();
        metrics.observe_lateness(fired_at.0.saturating_sub(deadline.as_nanos().0));
        let f = FiredTimer {
            shard,
            tenant: record.timer.tenant(),
            key: record.timer.key(),
            version: record.version,
            deadline,
            fired_at,
            payload: record.timer.payload(),
        };
        handler(&f);
        also(&f);
        fired += 1;
    });
    fired
}

/// How a parked shard waits for its ring.
///
/// - `Reactor`: through glommio (a read of the wake socket raced against a glommio timer), so
///   the shard's other tasks (HTTP connections, the store's Redis I/O) keep running while it
///   parks. glommio's sleep path (ring linking, a `membarrier` that interrupts the process's
///   other cores) costs about 50 µs more per wake-up than the kernel's own on a VM.
/// - `Direct`: the shard thread blocks in `ppoll` on the wake socket with the park's timeout.
///   Used when the shard runs nothing but its loop (the library engine without a store or
///   hook): wake-ups and timeouts cost what the kernel's do, and no other core is disturbed.
pub(crate) enum Wakee {
    Reactor(glommio::net::UnixStream),
    Direct(std::os::unix::net::UnixStream),
}

/// Blocks until the wake socket is readable or `nap` has passed.
fn park_direct(stream: &std::os::unix::net::UnixStream, nap: Duration, buf: &mut [u8]) {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: nap.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: nap.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfd` is one valid pollfd for a socket this shard owns, `ts` a valid timespec,
    // and a null signal mask keeps the thread's mask; all outlive the call.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if rc > 0 {
        // The socket is non-blocking: drain the wake bytes until it would block.
        let mut reader = stream;
        while matches!(reader.read(buf), Ok(n) if n > 0) {}
    }
}

/// Makes the calling thread's timers exact: the default 50 µs timer slack would delay every
/// park by up to 50 µs.
pub(crate) fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long argument and touches only the calling
    // thread's scheduling attributes.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        tracing::warn!(
            "could not set timer slack: {}",
            std::io::Error::last_os_error()
        );
    }
}
