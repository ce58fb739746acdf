//! The shard watchdog: a backstop that wakes a shard whose executor went to sleep while the
//! shard's loop was ready to run.
//!
//! # Why it exists
//!
//! glommio 0.9's executor can park its thread while a task is runnable: `run_task_queues`
//! answers "ran nothing" when the preemption timer has already expired on entry, and `run`
//! then sleeps in io_uring until some *new* completion or timer arrives. The wake-up that made
//! the task runnable was consumed just before, so nothing may come for seconds. The window
//! opens whenever one reactor pass (arming the preemption timer, submitting and reaping I/O)
//! takes longer than the preemption timer. With a sub-millisecond timer that is common on a
//! busy host; with glommio's default of 100 ms it needs a 100 ms stall of the thread itself.
//! The upstream fix ("do not park the executor while a task queue is still runnable") is in no
//! release on crates.io (glommio 0.9.0 and glommio-ng 0.12.0 both lack it). When a release
//! with it is adopted, this module can go.
//!
//! The shard therefore keeps glommio's default preemption timer (the engine never sets a
//! shorter one) and yields to its executor cooperatively (see the shard module). This
//! watchdog bounds what is left: before each `await` on its loop, a shard publishes the
//! monotonic time by which it expects to run again ([`Pulse::expect_by`]); when it runs, it
//! clears it. One thread per engine looks every [`PERIOD`]: a shard still waiting
//! [`GRACE`] past its time gets its task's waker woken from this thread. glommio delivers a
//! wake from another thread through its notifier `eventfd`, whose read the executor re-arms on
//! every scheduling round, so the wake ends the sleep even in the state described above.
//!
//! # Episodes, stalls and start-up
//!
//! - **Only a sleeping executor is woken.** When the late shard's thread is asleep in
//!   `io_uring_enter` (`/proc/self/task/TID/syscall` and state `S` in its `stat`), its
//!   executor slept with the shard's work due: glommio's bug. That episode (from `expect_by`
//!   to the next `running` or `expect_by`) counts once in `punctual_executor_stalls_total`,
//!   and every look wakes it again (a sleeping executor takes each wake, and drops its clone,
//!   at once) until the shard runs.
//! - **A busy thread is left alone.** A late shard whose thread runs a task or waits for a
//!   CPU is not woken: a wake would not make it run sooner, each one is a cross-thread wake
//!   through glommio's notifier (a trigger of the stall itself), and its clones would pile up
//!   on glommio's task count, an `AtomicI16`, until the thread came back.
//! - **From the first instant.** The watchdog starts before the shards. A shard registers
//!   its thread and waker as its first act, and while its store opens
//!   ([`Pulse::guard_start`]) it is nudged every [`START_NUDGE`] (never with two nudges
//!   outstanding while its thread is busy). A shard whose executor never ran its first poll
//!   cannot be woken (it has no waker yet): the engine's start limit reports it instead.
//! - **Off the shards' cores.** The thread is pinned to the cores no shard is pinned to,
//!   when there are any: a watchdog that shares a stalled shard's core competes with it.
//!
//! A shard that parks in `ppoll` (it runs nothing but its loop) never hands the thread to
//! glommio's scheduler and is not watched.
//!
//! # Cost
//!
//! The shard: two relaxed stores and a `CLOCK_MONOTONIC` read per `await`, none per fire.
//! The watchdog: one wake-up every [`PERIOD`] (1,000 a second) that reads one atomic per
//! shard, and a read of one `/proc` file per late shard. A wake it sends is counted
//! (`punctual_shard_watchdog_wakes_total`) and logged: each means a shard's executor slept
//! through its work (the episode is counted once as a stall).

use crate::clock::clock_ns;
use crate::metrics::ShardMetrics;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the watchdog looks.
pub const PERIOD: Duration = Duration::from_millis(1);

/// How long past its time a waiting shard may stay asleep before it is woken.
pub const GRACE: Duration = Duration::from_millis(1);

/// How often a shard still starting (its store opening) is nudged: one spurious poll of its
/// start, harmless if it was not stalled.
pub const START_NUDGE: Duration = Duration::from_millis(100);

/// "Not waiting on anything the watchdog should check."
const RUNNING: u64 = u64::MAX;

/// "Starting": nudged every [`START_NUDGE`] rather than held to a time.
const STARTING: u64 = u64::MAX - 2;

/// "Woken for this wait, and found asleep in io_uring": a stall, counted already.
const STALLED: u64 = u64::MAX - 3;

/// What a look at a shard did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Look {
    Nothing,
    /// Woke a shard whose executor slept in io_uring past its time: a stall. `runnable`: what
    /// the shard waited on had already woken it [`GRACE`] or more before, so its executor
    /// slept with the shard's task runnable (glommio's park bug itself), rather than waiting
    /// for a timer or an I/O that came late.
    Stalled {
        runnable: bool,
    },
    /// Woke again a stall already counted.
    WokenAgain,
}

/// What a shard tells the watchdog; shared between the shard's thread and the watchdog's.
pub(crate) struct Pulse {
    /// `CLOCK_MONOTONIC` ns by which the shard expects to run again, or [`RUNNING`],
    /// [`STALLED`] or [`STARTING`].
    due_ns: AtomicU64,
    /// The shard thread's id (0 until it runs), for [`asleep_in_io_uring`].
    tid: AtomicI32,
    /// Polls of the shard's start so far; a nudge is sent only once the last one was
    /// answered by a poll, so at most one is ever outstanding.
    start_polls: AtomicU64,
    /// `start_polls` when the watchdog last nudged, and when (`CLOCK_MONOTONIC` ns).
    nudged: Mutex<(u64, u64)>,
    /// The shard task's waker, set at its first poll and taken at its end.
    waker: Mutex<Option<Waker>>,
    /// The waker of the task that runs the shard's executor (see [`Pulse::register_home`]).
    home: Mutex<Option<Waker>>,
    /// What the shard's waits hand to what they wait on ([`Pulse::noted`]), and the same as a
    /// waker, made once.
    noter: Arc<Noter>,
    noter_waker: Waker,
}

/// The waker a shard's wait hands to the timer or socket it waits on: notes when the shard
/// became runnable (the first wake since its `expect_by`), then wakes the shard's task. The
/// watchdog compares that time with the executor's sleep: asleep in io_uring with the task
/// runnable is glommio's park bug; asleep before anything woke it is a late timer or I/O.
struct Noter {
    /// `CLOCK_MONOTONIC` ns of the first wake since the last `expect_by`; 0 for none.
    woken_ns: AtomicU64,
    task: Mutex<Option<Waker>>,
}

impl std::task::Wake for Noter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.woken_ns.compare_exchange(
            0,
            monotonic_ns().max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        if let Some(w) = self.task.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            w.wake_by_ref();
        }
    }
}

/// See [`Pulse::noted`].
pub(crate) struct Noted<'a, F> {
    pulse: &'a Pulse,
    fut: F,
}

impl<F: Future + Unpin> Future for Noted<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        {
            let mut task = this
                .pulse
                .noter
                .task
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        let mut noted = Context::from_waker(&this.pulse.noter_waker);
        Pin::new(&mut this.fut).poll(&mut noted)
    }
}

impl Default for Pulse {
    fn default() -> Self {
        let noter = Arc::new(Noter {
            woken_ns: AtomicU64::new(0),
            task: Mutex::new(None),
        });
        Pulse {
            noter_waker: Waker::from(noter.clone()),
            noter,
            due_ns: AtomicU64::new(RUNNING),
            tid: AtomicI32::new(0),
            start_polls: AtomicU64::new(0),
            nudged: Mutex::new((u64::MAX, 0)),
            waker: Mutex::new(None),
            home: Mutex::new(None),
        }
    }
}

impl Pulse {
    /// The shard's task registers the waker the watchdog may wake.
    pub fn set_waker(&self, waker: Option<Waker>) {
        // A poisoned lock only means a panic elsewhere; the slot itself is still valid.
        let mut slot = self.waker.lock().unwrap_or_else(|p| p.into_inner());
        *slot = waker;
    }

    /// The task that runs the shard's executor registers itself, first of all: the watchdog
    /// wakes it until the shard's loop registers, and again once the shard is done
    /// ([`Pulse::hand_back`]).
    pub async fn register_home(&self) {
        let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        *self.home.lock().unwrap_or_else(|p| p.into_inner()) = Some(waker.clone());
        self.set_waker(Some(waker));
    }

    /// The shard is done (its loop ended, or it never started): the task that runs its
    /// executor must run once more, at once, to end it, and glommio may sleep through that
    /// wake as through any other, so the watchdog watches that task now.
    pub fn hand_back(&self) {
        let home = self.home.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.set_waker(home);
        self.expect_by(Duration::ZERO);
    }

    /// The executor is about to end: nothing is left to watch. Called from its last task,
    /// so that the wakers are dropped where they live: the watchdog's thread may hold the
    /// pulse last, and a glommio waker released on another thread races its task's drop
    /// (`doorbell`).
    pub fn leave(&self) {
        self.running();
        self.set_waker(None);
        drop(self.home.lock().unwrap_or_else(|p| p.into_inner()).take());
        drop(
            self.noter
                .task
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }

    /// The executor is gone (its thread unwinds from a panic): the watchdog must not wake its
    /// tasks. The wakers are leaked, not dropped: dropping a glommio waker outside its
    /// executor may try to schedule it.
    pub fn abandon(&self) {
        self.running();
        std::mem::forget(self.waker.lock().unwrap_or_else(|p| p.into_inner()).take());
        std::mem::forget(self.home.lock().unwrap_or_else(|p| p.into_inner()).take());
        std::mem::forget(
            self.noter
                .task
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }

    /// The shard is about to wait: it expects to run again within `within`.
    #[inline]
    pub fn expect_by(&self, within: Duration) {
        let within = within.as_nanos().min(u128::from(STALLED - 1)) as u64;
        let due = monotonic_ns().saturating_add(within).min(STALLED - 1);
        self.noter.woken_ns.store(0, Ordering::Relaxed);
        self.due_ns.store(due, Ordering::Relaxed);
    }

    /// `wait` (a park or a yield of the shard's loop, after [`Pulse::expect_by`]) with its
    /// wakes noted, so that a stall can tell a runnable shard from one whose timer or I/O
    /// came late (see [`Noter`]). Cost per poll: one uncontended lock.
    pub fn noted<F: Future + Unpin>(&self, wait: F) -> Noted<'_, F> {
        Noted {
            pulse: self,
            fut: wait,
        }
    }

    /// The shard runs again.
    #[inline]
    pub fn running(&self) {
        self.due_ns.store(RUNNING, Ordering::Relaxed);
    }

    /// Runs `start` (the shard's store opening) under the watchdog: while it is pending the
    /// shard is nudged every [`START_NUDGE`], so that a glommio stall during start-up cannot
    /// strand it. Registers the task's waker at the first poll.
    pub async fn guard_start<F: Future>(&self, start: F) -> F::Output {
        let mut start = std::pin::pin!(start);
        std::future::poll_fn(|cx| self.poll_start(start.as_mut(), cx)).await
    }

    fn poll_start<F: Future>(&self, start: Pin<&mut F>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.start_polls.fetch_add(1, Ordering::Relaxed);
        {
            let mut slot = self.waker.lock().unwrap_or_else(|p| p.into_inner());
            if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *slot = Some(cx.waker().clone());
            }
        }
        self.due_ns.store(STARTING, Ordering::Relaxed);
        let r = start.poll(cx);
        if r.is_ready() {
            self.running();
        }
        r
    }

    /// The shard's thread is about to run its executor: remembers its id, so that the
    /// watchdog can tell an executor asleep in io_uring from a thread busy in a task.
    pub fn on_this_thread(&self) {
        // SAFETY: gettid takes no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        self.tid.store(tid, Ordering::Relaxed);
    }

    /// Looks at the shard: wakes it if it is waiting more than `grace` past its time while its
    /// executor sleeps in io_uring (`asleep`): glommio slept with the shard's work due. That
    /// stall counts once per episode (from `expect_by` to the next `running` or `expect_by`),
    /// and each look wakes it again until it runs: a sleeping executor takes each wake, and
    /// drops the waker clone it holds, at once. A late shard whose thread is busy (a task holds
    /// it, or it waits for a CPU) is not woken: a wake would not make it run sooner, and its
    /// clones would pile up on glommio's task count, an `AtomicI16`, until the thread came
    /// back. Also nudges a start (see [`Pulse::guard_start`]).
    fn check(&self, now_ns: u64, grace: Duration, asleep: impl Fn(i32) -> bool) -> Look {
        let due = self.due_ns.load(Ordering::Relaxed);
        let (next, look) = match due {
            RUNNING => return Look::Nothing,
            STARTING => {
                self.nudge_start(now_ns, || asleep(self.tid.load(Ordering::Relaxed)));
                return Look::Nothing;
            }
            STALLED => {
                if !asleep(self.tid.load(Ordering::Relaxed)) {
                    return Look::Nothing;
                }
                (STALLED, Look::WokenAgain)
            }
            _ if now_ns <= due.saturating_add(grace.as_nanos() as u64) => return Look::Nothing,
            _ if asleep(self.tid.load(Ordering::Relaxed)) => {
                let woken = self.noter.woken_ns.load(Ordering::Relaxed);
                let runnable =
                    woken != 0 && now_ns >= woken.saturating_add(grace.as_nanos() as u64);
                (STALLED, Look::Stalled { runnable })
            }
            // Late, but its thread is running a task or waiting for a CPU: a wake cannot make
            // it run sooner, and each one would be a cross-thread wake through glommio's
            // notifier (one of the stall's own triggers, see the shard module doc).
            _ => return Look::Nothing,
        };
        // Lost to the shard's own `running` or `expect_by` in between: it ran.
        if self
            .due_ns
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return Look::Nothing;
        }
        if self.wake() {
            look
        } else {
            Look::Nothing
        }
    }

    fn nudge_start(&self, now_ns: u64, asleep: impl Fn() -> bool) {
        let polls = self.start_polls.load(Ordering::Relaxed);
        let mut nudged = self.nudged.lock().unwrap_or_else(|p| p.into_inner());
        let (last_polls, last_at) = *nudged;
        if now_ns.saturating_sub(last_at) < START_NUDGE.as_nanos() as u64 {
            return;
        }
        // At most one nudge outstanding while the thread is busy (see `check`).
        if last_polls != polls || asleep() {
            *nudged = (polls, now_ns);
            drop(nudged);
            self.wake();
        }
    }

    fn wake(&self) -> bool {
        let slot = self.waker.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            Some(w) => {
                w.wake_by_ref();
                true
            }
            None => false,
        }
    }
}

fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The watchdog thread; stopped and joined on drop.
pub(crate) struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// One watched shard: what it tells the watchdog, and where its wakes are counted.
pub(crate) type Watched = (Arc<Pulse>, Arc<ShardMetrics>);

impl Watchdog {
    /// Watches `shards`, looking every `period`, on a thread kept off `shard_cores` (the
    /// cores the shards are pinned to) when other cores are available: a watchdog that
    /// shares a stalled shard's core competes with it for the time it is meant to rescue.
    pub fn spawn(
        shards: Vec<Watched>,
        period: Duration,
        grace: Duration,
        shard_cores: &[usize],
    ) -> std::io::Result<Watchdog> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let others: Vec<usize> = crate::cpus::available_cores()
            .into_iter()
            .filter(|c| !shard_cores.contains(c))
            .collect();
        let thread = std::thread::Builder::new()
            .name("punctual-watchdog".into())
            .spawn(move || {
                // A failure leaves the thread where it was: it still watches, only closer.
                if let Err(e) = crate::cpus::pin_current_thread(&others) {
                    tracing::warn!(error = %e, "cannot pin the watchdog off the shards' cores");
                }
                watch(&shards, &flag, period, grace)
            })?;
        Ok(Watchdog {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn watch(shards: &[Watched], stop: &AtomicBool, period: Duration, grace: Duration) {
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(period);
        let now = monotonic_ns();
        for (id, (pulse, metrics)) in shards.iter().enumerate() {
            let look = pulse.check(now, grace, asleep_in_io_uring);
            if look == Look::Nothing {
                continue;
            }
            let n = metrics.watchdog_wakes_total.fetch_add(1, Ordering::Relaxed) + 1;
            if let Look::Stalled { runnable } = look {
                metrics
                    .executor_stalls_total
                    .fetch_add(1, Ordering::Relaxed);
                if runnable {
                    metrics
                        .executor_runnable_sleeps_total
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            // The first few, then one in a thousand: a host that keeps hitting this
            // should be told, not flooded.
            if look != Look::WokenAgain && (n <= 3 || n % 1000 == 0) {
                tracing::warn!(
                    shard = id,
                    wakes = n,
                    stalled = look != Look::WokenAgain,
                    grace_ms = grace.as_millis() as u64,
                    "shard had not run {} ms after it was due; woke it ({})",
                    grace.as_millis(),
                    match look {
                        Look::Stalled { runnable: true } => "its executor slept in io_uring with the shard's task runnable: glommio's park bug",
                        Look::Stalled { runnable: false } => "its executor slept in io_uring past the shard's time, with the timer or I/O it waited on not yet come",
                        _ => "woken again",
                    }
                );
            }
        }
    }
}

/// Whether thread `tid` of this process is asleep in `io_uring_enter`: a glommio executor
/// sleeping. Read from `/proc/self/task/TID/syscall` (its first field is the syscall the
/// thread is blocked in) and `stat` (its state: `S`, sleeping, not `R`, woken and waiting for
/// a CPU, which is the host's delay, not glommio's); false when either cannot be read.
fn asleep_in_io_uring(tid: i32) -> bool {
    if tid <= 0 {
        return false;
    }
    let task = format!("/proc/self/task/{tid}");
    let Ok(syscall) = std::fs::read_to_string(format!("{task}/syscall")) else {
        return false;
    };
    let in_uring = syscall
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<libc::c_long>().ok())
        == Some(libc::SYS_io_uring_enter);
    if !in_uring {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("{task}/stat")) else {
        return false;
    };
    // "TID (COMM) STATE ...": the name may hold spaces and parentheses, the state follows
    // the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        == Some("S")
}

#[cfg(test)]
#[path = "watchdog_tests.rs"]
mod tests;
