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
//!  shard task ── lookup(host) ──▶ cache ── fresh answer ───────────────▶ addresses / error
//!                                  │ miss
//!                                  ▼
//!                   single-flight: one lookup per host, the others wait on it
//!                                  │ new host; the queue full → Busy at once (retriable)
//!                                  ▼
//!                   bounded queue ──▶ THREADS resolver threads (getaddrinfo)
//!                                  │
//!                   answer: cached (TTL, or NEGATIVE_TTL for a failure), every waiter woken
//! ```
//!
//! # Invariants and bounds
//!
//! - At most one lookup per host name runs at a time (single-flight); every caller waits on
//!   it, up to `MAX_WAITERS` per host (more get `Busy`).
//! - At most `threads` lookups run at once; at most `queue` host names wait for a thread.
//!   A full queue fails the caller at once with `Busy`, never blocks it.
//! - A caller waits at most `deadline` (its own bound may be shorter). A lookup still
//!   running after `deadline` answers every new caller `Timeout` at once, until it ends: a
//!   black-holed name server costs one thread, never a caller's time beyond the deadline.
//! - A failed lookup is remembered for `negative_ttl` (callers get the error at once), an
//!   answer for `ttl`. The cache holds at most `cache` names (the oldest answers go first).
//! - The threads are started on first use and are not pinned to a shard's core: they may
//!   run on any CPU the process may use (they mostly sleep in `poll`).
//!
//! Cost of a cached lookup: one mutex lock and a hash lookup. IP literals skip the resolver.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The most callers waiting on one host's lookup.
pub const MAX_WAITERS: usize = 4096;

/// How the resolver is sized; [`Limits::default`] is what the process uses.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Resolver threads (lookups at once).
    pub threads: usize,
    /// Host names waiting for a thread.
    pub queue: usize,
    /// The longest a caller waits for an answer.
    pub deadline: Duration,
    /// How long an answer is kept.
    pub ttl: Duration,
    /// How long a failure is kept.
    pub negative_ttl: Duration,
    /// Host names kept, answers and failures together.
    pub cache: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            threads: 4,
            queue: 256,
            deadline: Duration::from_secs(5),
            ttl: Duration::from_secs(30),
            negative_ttl: Duration::from_secs(5),
            cache: 4096,
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

enum Entry {
    Done {
        at: Instant,
        answer: Answer,
    },
    Running {
        since: Instant,
        waiters: Vec<Waiter>,
    },
}

#[derive(Default)]
struct State {
    names: HashMap<String, Entry>,
    queue: VecDeque<String>,
    threads: usize,
    closed: bool,
}

struct Shared {
    limits: Limits,
    lookup: Box<LookupFn>,
    state: Mutex<State>,
    work: Condvar,
}

/// The resolver: cheap to ask, safe from any thread.
pub struct Resolver {
    shared: Arc<Shared>,
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
pub async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
    global().resolve(host, port).await
}

/// `getaddrinfo` through std.
fn system_lookup(host: &str) -> Result<Vec<IpAddr>, String> {
    use std::net::ToSocketAddrs;
    (host, 0)
        .to_socket_addrs()
        .map(|a| a.map(|s| s.ip()).collect())
        .map_err(|e| e.to_string())
}

impl Resolver {
    pub fn new(limits: Limits, lookup: Box<LookupFn>) -> Resolver {
        Resolver {
            shared: Arc::new(Shared {
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
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
        let deadline = self.shared.limits.deadline;
        let answer = match self.start(host) {
            Lookup::Ready(a) => a,
            Lookup::Waiting(rx) => {
                let answer = async {
                    rx.await.unwrap_or_else(|_| {
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

    /// Starts (or joins) the lookup of `host`: never blocks beyond the state's lock.
    pub fn start(&self, host: &str) -> Lookup {
        if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
            return Lookup::Ready(Ok(Arc::from([ip])));
        }
        let limits = &self.shared.limits;
        let now = Instant::now();
        let mut st = self.lock();
        match st.names.get_mut(host) {
            Some(Entry::Done { at, answer }) => {
                let keep = if answer.is_ok() {
                    limits.ttl
                } else {
                    limits.negative_ttl
                };
                if now.saturating_duration_since(*at) < keep {
                    return Lookup::Ready(answer.clone());
                }
            }
            Some(Entry::Running { since, waiters }) => {
                if now.saturating_duration_since(*since) >= limits.deadline {
                    return Lookup::Ready(Err(ResolveError::Timeout {
                        host: host.to_string(),
                        ms: limits.deadline.as_millis(),
                    }));
                }
                if waiters.len() >= MAX_WAITERS {
                    return Lookup::Ready(Err(ResolveError::Busy { host: host.into() }));
                }
                let (tx, rx) = futures_channel::oneshot::channel();
                waiters.push(tx);
                return Lookup::Waiting(rx);
            }
            None => {}
        }
        if st.queue.len() >= limits.queue {
            return Lookup::Ready(Err(ResolveError::Busy { host: host.into() }));
        }
        if !st.names.contains_key(host) && st.names.len() >= limits.cache {
            evict_oldest(&mut st.names);
        }
        let (tx, rx) = futures_channel::oneshot::channel();
        st.names.insert(
            host.to_string(),
            Entry::Running {
                since: now,
                waiters: vec![tx],
            },
        );
        st.queue.push_back(host.to_string());
        if st.threads < limits.threads {
            st.threads += 1;
            drop(st);
            self.spawn_thread();
        } else {
            drop(st);
        }
        self.shared.work.notify_one();
        Lookup::Waiting(rx)
    }

    /// Host names waiting for a thread, and lookups running (for `/metrics`).
    pub fn queued_and_running(&self) -> (usize, usize) {
        let st = self.lock();
        let running = st
            .names
            .values()
            .filter(|e| matches!(e, Entry::Running { .. }))
            .count();
        (st.queue.len(), running.saturating_sub(st.queue.len()))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared)
    }

    fn spawn_thread(&self) {
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("punctual-resolve".into())
            .spawn(move || {
                unpin_current_thread();
                work(&shared);
            });
        if let Err(e) = started {
            // The lookups queued wait for another thread (or their callers' deadline).
            lock(&self.shared).threads -= 1;
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

/// A poisoned lock only means a lookup function panicked on another thread; the state
/// itself is always left consistent (every change is made whole under the lock).
fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

fn evict_oldest(names: &mut HashMap<String, Entry>) {
    let oldest = names
        .iter()
        .filter_map(|(k, e)| match e {
            Entry::Done { at, .. } => Some((*at, k)),
            Entry::Running { .. } => None,
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, k)| k.clone());
    if let Some(k) = oldest {
        names.remove(&k);
    }
}

/// A resolver thread: takes the next host name, looks it up, answers its waiters.
fn work(shared: &Shared) {
    loop {
        let host = {
            let mut st = lock(shared);
            loop {
                if let Some(h) = st.queue.pop_front() {
                    break h;
                }
                if st.closed {
                    return;
                }
                st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        let answer = match (shared.lookup)(&host) {
            Ok(ips) if ips.is_empty() => Err(ResolveError::NoAddress { host: host.clone() }),
            Ok(ips) => Ok(Arc::from(ips)),
            Err(reason) => Err(ResolveError::Failed {
                host: host.clone(),
                reason,
            }),
        };
        let waiters = {
            let mut st = lock(shared);
            let done = Entry::Done {
                at: Instant::now(),
                answer: answer.clone(),
            };
            match st.names.insert(host, done) {
                Some(Entry::Running { waiters, .. }) => waiters,
                _ => Vec::new(),
            }
        };
        for w in waiters {
            let _ = w.send(answer.clone());
        }
    }
}

/// Lets the calling thread run on every CPU: a thread started from a pinned shard inherits
/// its mask, and a resolver thread has no business on the shard's core alone.
fn unpin_current_thread() {
    // SAFETY: `set` is a plain bitmask owned by this frame; CPU_ZERO/CPU_SET only write
    // inside it, and sched_setaffinity reads `size_of::<cpu_set_t>()` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
        }
        // The kernel keeps only the CPUs the process's cpuset allows; a failure leaves the
        // inherited mask, which still works.
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests;
