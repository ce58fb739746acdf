//! Name resolution that never blocks a shard or the journal: a small pool of resolver threads
//! of its own, shared by the whole process (webhook connects, Redis reconnects).
//!
//! # Why threads, and why these
//!
//! Lookups go through the C library's `getaddrinfo`, so a host name means what it means to
//! every other program on the host (`/etc/hosts`, `nsswitch.conf`, `resolv.conf` and its
//! timeouts). `getaddrinfo` blocks, and a name server that never answers holds it for the
//! resolver's timeout times its attempts (glibc: 5 s × 2 by default). So it must run on a
//! thread that nothing else needs: not a shard's (its wheel would stop), and not the
//! executor's blocking thread (one per shard, which the journal's writes went through when
//! a black-holed lookup held it for seconds). An async
//! resolver (`hickory-resolver`) would need a tokio runtime beside glommio's executors, and
//! would read only `resolv.conf`, not `nsswitch.conf`.
//!
//! ```text
//!  caller (Store, or Tenant(t)) ── lookup(host) ──▶ its lane's cache
//!        fresh answer (< ttl) ─────────────────────────────────▶ addresses
//!        last good answer, past ttl but < ttl + stale ──▶ addresses now, and a refresh queued
//!        fresh failure (< negative_ttl) ────────────────────────▶ error
//!                                  │ miss
//!                                  ▼
//!                   single-flight: one lookup per host and lane, the others wait on it
//!                                  │ new host; the lane's queue full, or t's share used → Busy
//!                                  ▼
//!       store lane:   bounded queue ──▶ its own thread
//!       webhook lane: bounded queue ──▶ THREADS threads; a tenant runs at most
//!                                       `per_owner_running`, and one thread is kept for
//!                                       tenants that run none (`line.rs`)
//! ```
//!
//! # What one tenant (or a few together) can do to another
//!
//! A tenant's callbacks may name hosts whose name server black-holes queries: each such
//! lookup holds a thread for the C library's whole timeout (10 s), and failures are kept
//! only `negative_ttl`, so its retries keep coming. Three rules keep that to the tenant:
//!
//! - **Stale while revalidate.** An answer past its `ttl` is still served, at once, for up to
//!   `stale` (10 min) more while a refresh runs in the background (one at a time; a refresh
//!   that fails keeps the old answer and is retried after `negative_ttl`). A healthy name
//!   answered once keeps answering however saturated the lane, and a name server that goes
//!   away for less than 10 minutes is not noticed.
//! - **Lanes.** The store's reconnects have a lane of their own (their own queue, cache and
//!   thread): no webhook lookup can take it (a store that cannot reconnect would fail every
//!   tenant).
//! - **Shares.** In the webhook lane, one tenant has at most `per_owner` lookups queued and
//!   running together (more get `Busy`) and at most `per_owner_running` running; and a
//!   tenant that already runs a lookup starts another only while more than `reserved` (1)
//!   threads are free, so one stays for tenants that run none (`line.rs`). No tenant takes the whole queue, and
//!   no two take every thread: with 4 threads it takes 4 black-holed tenants at once to
//!   hold them all. A lookup joined by another tenant's caller (single-flight) counts only
//!   to the tenant that started it.
//!
//! # Invariants and bounds
//!
//! - At most one lookup per host name and lane runs at a time (single-flight); every caller
//!   waits on it, up to `MAX_WAITERS` per host (more get `Busy`).
//! - Per lane, at most `threads` lookups run at once and at most `queue` host names wait for
//!   a thread. A full queue or a used-up share fails the caller at once with `Busy`, never
//!   blocks it.
//! - A caller waits at most `deadline` (its own bound may be shorter). A lookup still
//!   running after `deadline` answers every new caller `Timeout` at once, until it ends: a
//!   black-holed name server costs one thread, never a caller's time beyond the deadline.
//! - A failed lookup is remembered for `negative_ttl` (callers with no good answer within
//!   `ttl + stale` get the error at once), an answer for `ttl + stale`. Each lane's cache
//!   holds at most `cache` names (the oldest go first; a name being looked up is never
//!   evicted).
//! - The threads are started on first use and are not pinned to a shard's core: they run on
//!   the CPUs the process was given (`cpus::available_cores`, which respects a `taskset` or
//!   `CPUAffinity` mask) that no shard is pinned to, or on all of them when the shards take
//!   every one (`cpus::off_shard_cores`), never on others (they mostly sleep in `poll`).
//!
//! Cost of a cached lookup: one mutex lock and a hash lookup. IP literals skip the resolver.

mod line;

pub use line::LaneLimits;
use line::Line;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The most callers waiting on one host's lookup.
pub const MAX_WAITERS: usize = 4096;

/// Who asks: the lane its lookups run in, and whose share of that lane they use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller<'a> {
    /// The store's (re)connects: a lane of their own.
    Store,
    /// A webhook delivery of this tenant.
    Tenant(&'a str),
}

impl Caller<'_> {
    fn lane(self) -> usize {
        match self {
            Caller::Store => 0,
            Caller::Tenant(_) => 1,
        }
    }

    fn owner(self) -> Option<String> {
        match self {
            Caller::Store => None,
            Caller::Tenant(t) => Some(t.to_string()),
        }
    }
}

/// How the resolver is sized; [`Limits::default`] is what the process uses.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The store's lane.
    pub store: LaneLimits,
    /// The webhooks' lane, shared by the tenants.
    pub webhook: LaneLimits,
    /// The longest a caller waits for an answer.
    pub deadline: Duration,
    /// How long an answer is served without asking again.
    pub ttl: Duration,
    /// How long past `ttl` the last good answer is still served while a refresh runs.
    pub stale: Duration,
    /// How long a failure is kept.
    pub negative_ttl: Duration,
    /// Host names kept per lane, answers and failures together.
    pub cache: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            store: LaneLimits {
                threads: 1,
                queue: 16,
                per_owner: usize::MAX,
                per_owner_running: usize::MAX,
                reserved: 0,
            },
            webhook: LaneLimits {
                threads: 4,
                queue: 256,
                per_owner: 32,
                per_owner_running: 2,
                reserved: 1,
            },
            deadline: Duration::from_secs(5),
            ttl: Duration::from_secs(30),
            stale: Duration::from_secs(600),
            negative_ttl: Duration::from_secs(5),
            cache: 4096,
        }
    }
}

impl Limits {
    fn lane(&self, lane: usize) -> &LaneLimits {
        if lane == 0 {
            &self.store
        } else {
            &self.webhook
        }
    }
}

/// Why a name gave no address. Every variant is worth retrying later.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("resolve {host}: {reason}")]
    Failed { host: String, reason: String },
    #[error("resolve {host}: no address")]
    NoAddress { host: String },
    #[error("resolve {host}: no answer within {ms} ms")]
    Timeout { host: String, ms: u128 },
    #[error("resolve {host}: the resolver is saturated (too many lookups waiting)")]
    Busy { host: String },
}

type Answer = Result<Arc<[IpAddr]>, ResolveError>;
type Waiter = futures_channel::oneshot::Sender<Answer>;
/// The blocking lookup the threads run (`getaddrinfo`, or a test's stand-in).
pub type LookupFn = dyn Fn(&str) -> Result<Vec<IpAddr>, String> + Send + Sync;

/// What is known of one host name in one lane.
#[derive(Default)]
struct Entry {
    /// The last good answer, and when it came.
    good: Option<(Instant, Arc<[IpAddr]>)>,
    /// The last failure, if it came after `good`.
    failed: Option<(Instant, ResolveError)>,
    running: Option<Running>,
}

struct Running {
    since: Instant,
    waiters: Vec<Waiter>,
}

#[derive(Default)]
struct Lane {
    names: HashMap<String, Entry>,
    /// The names waiting for a thread, and who may take one next (`line.rs`).
    line: Line,
    /// Threads started.
    threads: usize,
}

#[derive(Default)]
struct State {
    lanes: [Lane; 2],
    closed: bool,
}

/// What the resolver and its threads share: the limits, the lookup, the lanes under their
/// lock, and the condition idle threads wait on.
struct Pool {
    limits: Limits,
    lookup: Box<LookupFn>,
    state: Mutex<State>,
    work: Condvar,
}

/// The resolver: cheap to ask, safe from any thread.
pub struct Resolver {
    shared: Arc<Pool>,
}

/// What [`Resolver::start`] gives: an answer now, or one to wait for.
pub enum Lookup {
    Ready(Answer),
    Waiting(futures_channel::oneshot::Receiver<Answer>),
}

/// The process's resolver (the system's `getaddrinfo`, default limits).
pub fn global() -> &'static Resolver {
    static GLOBAL: OnceLock<Resolver> = OnceLock::new();
    GLOBAL.get_or_init(|| Resolver::new(Limits::default(), Box::new(system_lookup)))
}

/// `host:port`'s addresses through [`global`], waiting at most the resolver's deadline (on a
/// glommio executor).
pub async fn resolve(
    host: &str,
    port: u16,
    caller: Caller<'_>,
) -> Result<Vec<SocketAddr>, ResolveError> {
    global().resolve(host, port, caller).await
}

/// `getaddrinfo` through std.
fn system_lookup(host: &str) -> Result<Vec<IpAddr>, String> {
    use std::net::ToSocketAddrs;
    (host, 0)
        .to_socket_addrs()
        .map(|a| a.map(|s| s.ip()).collect())
        .map_err(|e| e.to_string())
}

/// What the cache says of a name, before anything is queued.
enum Known {
    Answer(Answer),
    /// The last good answer, past its TTL: serve it, and refresh it if nothing runs.
    Stale(Arc<[IpAddr]>, bool),
    Join,
    Unknown,
}

impl Resolver {
    pub fn new(limits: Limits, lookup: Box<LookupFn>) -> Resolver {
        Resolver {
            shared: Arc::new(Pool {
                limits,
                lookup,
                state: Mutex::new(State::default()),
                work: Condvar::new(),
            }),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// `host:port`'s addresses, waiting at most the deadline (on a glommio executor).
    pub async fn resolve(
        &self,
        host: &str,
        port: u16,
        caller: Caller<'_>,
    ) -> Result<Vec<SocketAddr>, ResolveError> {
        let deadline = self.shared.limits.deadline;
        let answer = match self.start(host, caller) {
            Lookup::Ready(a) => a,
            Lookup::Waiting(rx) => {
                // The answer comes from a resolver thread: through the shard's doorbell (a
                // main-ring read with this task behind it), not glommio's foreign wake, whose
                // stale-flag eventfd write can put the executor to sleep with work runnable
                // (the shard module's doc).
                let answer = async {
                    crate::runtime::doorbell::relay(rx)
                        .await
                        .unwrap_or_else(|_| {
                            Err(ResolveError::Failed {
                                host: host.to_string(),
                                reason: "the resolver stopped".into(),
                            })
                        })
                };
                let expire = async {
                    glommio::timer::sleep(deadline).await;
                    Err(ResolveError::Timeout {
                        host: host.to_string(),
                        ms: deadline.as_millis(),
                    })
                };
                futures_lite::future::or(answer, expire).await
            }
        };
        Ok(answer?
            .iter()
            .map(|ip| SocketAddr::new(*ip, port))
            .collect())
    }

    /// Starts (or joins) the lookup of `host` for `caller`: never blocks beyond the state's
    /// lock.
    pub fn start(&self, host: &str, caller: Caller<'_>) -> Lookup {
        if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
            return Lookup::Ready(Ok(Arc::from([ip])));
        }
        let limits = &self.shared.limits;
        let now = Instant::now();
        let mut st = self.lock();
        let lane = &mut st.lanes[caller.lane()];
        let known = match lane.names.get(host) {
            None => Known::Unknown,
            Some(e) => known(e, limits, now),
        };
        let waiter = match known {
            Known::Answer(a) => return Lookup::Ready(a),
            Known::Stale(ips, refresh) => {
                if refresh {
                    // A refresh the lane has no room for waits for a later caller.
                    let _ = self.enqueue(st, host, caller, None);
                }
                return Lookup::Ready(Ok(ips));
            }
            Known::Join => {
                let running = lane.names.get_mut(host).and_then(|e| e.running.as_mut());
                return match running {
                    Some(r) if now.saturating_duration_since(r.since) >= limits.deadline => {
                        Lookup::Ready(Err(ResolveError::Timeout {
                            host: host.to_string(),
                            ms: limits.deadline.as_millis(),
                        }))
                    }
                    Some(r) if r.waiters.len() < MAX_WAITERS => {
                        let (tx, rx) = futures_channel::oneshot::channel();
                        r.waiters.push(tx);
                        Lookup::Waiting(rx)
                    }
                    _ => Lookup::Ready(Err(ResolveError::Busy { host: host.into() })),
                };
            }
            Known::Unknown => futures_channel::oneshot::channel(),
        };
        let (tx, rx) = waiter;
        match self.enqueue(st, host, caller, Some(tx)) {
            Ok(()) => Lookup::Waiting(rx),
            Err(e) => Lookup::Ready(Err(e)),
        }
    }

    /// Queues a lookup of `host` for `caller` (with its first waiter), within the lane's
    /// bounds, and starts a thread if the lane has fewer than its limit.
    fn enqueue(
        &self,
        mut st: MutexGuard<'_, State>,
        host: &str,
        caller: Caller<'_>,
        waiter: Option<Waiter>,
    ) -> Result<(), ResolveError> {
        let limits = &self.shared.limits;
        let lane_limits = limits.lane(caller.lane());
        let lane = &mut st.lanes[caller.lane()];
        let owner = caller.owner();
        if !lane.line.admits(owner.as_deref(), lane_limits) {
            return Err(ResolveError::Busy { host: host.into() });
        }
        if !lane.names.contains_key(host) && lane.names.len() >= limits.cache {
            evict_oldest(&mut lane.names);
        }
        lane.names.entry(host.to_string()).or_default().running = Some(Running {
            since: Instant::now(),
            waiters: waiter.into_iter().collect(),
        });
        lane.line.push(host, owner);
        let spawn = lane.threads < lane_limits.threads;
        if spawn {
            lane.threads += 1;
        }
        drop(st);
        if spawn {
            self.spawn_thread(caller.lane());
        }
        self.shared.work.notify_all();
        Ok(())
    }

    /// Host names waiting for a thread, and lookups running, all lanes (for `/metrics`).
    pub fn queued_and_running(&self) -> (usize, usize) {
        let st = self.lock();
        st.lanes.iter().fold((0, 0), |(q, r), lane| {
            (q + lane.line.queued(), r + lane.line.running())
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared)
    }

    fn spawn_thread(&self, lane: usize) {
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("punctual-resolve".into())
            .spawn(move || {
                unpin_current_thread();
                work(&shared, lane);
            });
        if let Err(e) = started {
            // The lookups queued wait for another thread (or their callers' deadline).
            lock(&self.shared).lanes[lane].threads -= 1;
            tracing::error!(error = %e, "resolver: a resolver thread could not be started");
        }
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        self.lock().closed = true;
        self.shared.work.notify_all();
    }
}

/// What `e` answers at `now`: a fresh answer or failure, the last good answer past its TTL
/// (within `stale`), a lookup to join, or nothing usable.
fn known(e: &Entry, limits: &Limits, now: Instant) -> Known {
    let age = |at: &Instant| now.saturating_duration_since(*at);
    let failed_fresh = e
        .failed
        .as_ref()
        .filter(|(at, _)| age(at) < limits.negative_ttl);
    if let Some((at, ips)) = &e.good {
        if age(at) < limits.ttl {
            return Known::Answer(Ok(ips.clone()));
        }
        if age(at) < limits.ttl.saturating_add(limits.stale) {
            let refresh = e.running.is_none() && failed_fresh.is_none();
            return Known::Stale(ips.clone(), refresh);
        }
    }
    if let Some((_, err)) = failed_fresh {
        return Known::Answer(Err(err.clone()));
    }
    if e.running.is_some() {
        return Known::Join;
    }
    Known::Unknown
}

/// A poisoned lock only means a lookup function panicked on another thread; the state
/// itself is always left consistent (every change is made whole under the lock).
fn lock(shared: &Pool) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

fn evict_oldest(names: &mut HashMap<String, Entry>) {
    let oldest = names
        .iter()
        .filter(|(_, e)| e.running.is_none())
        .map(|(k, e)| {
            let good = e.good.as_ref().map(|(at, _)| *at);
            let failed = e.failed.as_ref().map(|(at, _)| *at);
            (good.max(failed), k)
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, k)| k.clone());
    if let Some(k) = oldest {
        names.remove(&k);
    }
}

/// A resolver thread of `lane`: takes the next host name, looks it up, answers its waiters.
fn work(shared: &Pool, lane: usize) {
    let limits = shared.limits.lane(lane);
    loop {
        let next = {
            let mut st = lock(shared);
            loop {
                if st.closed {
                    return;
                }
                if let Some(q) = st.lanes[lane].line.take(limits) {
                    break q;
                }
                st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        let host = next.host.clone();
        let answer: Answer = match (shared.lookup)(&host) {
            Ok(ips) if ips.is_empty() => Err(ResolveError::NoAddress { host: host.clone() }),
            Ok(ips) => Ok(Arc::from(ips)),
            Err(reason) => Err(ResolveError::Failed {
                host: host.clone(),
                reason,
            }),
        };
        let waiters = {
            let mut st = lock(shared);
            let l = &mut st.lanes[lane];
            l.line.done(&next);
            let e = l.names.entry(host).or_default();
            let at = Instant::now();
            match &answer {
                Ok(ips) => {
                    e.good = Some((at, ips.clone()));
                    e.failed = None;
                }
                Err(err) => e.failed = Some((at, err.clone())),
            }
            e.running.take().map(|r| r.waiters).unwrap_or_default()
        };
        // A thread and a tenant's share are free again: queued lookups may run now.
        shared.work.notify_all();
        for w in waiters {
            let _ = w.send(answer.clone());
        }
    }
}

/// Moves the calling thread onto the CPUs the process may use that no shard is pinned to
/// (`cpus::off_shard_cores`: all of them when the shards take every one; the mask the process
/// started with, `taskset`'s included): a thread started from a pinned shard inherits that
/// shard's one core, and a resolver thread has no business there. A failure leaves the
/// inherited mask, which still works.
fn unpin_current_thread() {
    if let Err(e) = crate::cpus::pin_current_thread(&crate::cpus::off_shard_cores()) {
        tracing::warn!(error = %e, "resolver: a resolver thread keeps the CPUs it inherited");
    }
}

#[cfg(test)]
mod tests;
