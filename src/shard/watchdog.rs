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
//! A shard that parks in `ppoll` (it runs nothing but its loop) never hands the thread to
//! glommio's scheduler and is not watched.
//!
//! # Cost
//!
//! The shard: two relaxed stores and a `CLOCK_MONOTONIC` read per `await`, none per fire.
//! The watchdog: one wake-up every [`PERIOD`] (200 a second) that reads one atomic per shard.
//! A wake it sends is counted (`punctual_shard_watchdog_wakes_total`) and logged: a non-zero
//! count means a shard's executor slept through its work, or another task on that shard held
//! the thread for longer than [`GRACE`].

use crate::clock::clock_ns;
use crate::metrics::ShardMetrics;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the watchdog looks.
pub const PERIOD: Duration = Duration::from_millis(5);

/// How long past its time a waiting shard may stay asleep before it is woken.
pub const GRACE: Duration = Duration::from_millis(5);

/// "Not waiting on anything the watchdog should check."
const RUNNING: u64 = u64::MAX;

/// What a shard tells the watchdog; shared between the shard's thread and the watchdog's.
pub(crate) struct Pulse {
    /// `CLOCK_MONOTONIC` ns by which the shard expects to run again, or [`RUNNING`].
    due_ns: AtomicU64,
    /// The shard loop task's waker, set once when the loop starts and taken at its end.
    waker: Mutex<Option<Waker>>,
}

impl Default for Pulse {
    fn default() -> Self {
        Pulse {
            due_ns: AtomicU64::new(RUNNING),
            waker: Mutex::new(None),
        }
    }
}

impl Pulse {
    /// The shard's loop task registers the waker the watchdog may wake.
    pub fn set_waker(&self, waker: Option<Waker>) {
        // A poisoned lock only means a panic elsewhere; the slot itself is still valid.
        let mut slot = self.waker.lock().unwrap_or_else(|p| p.into_inner());
        *slot = waker;
    }

    /// The shard is about to wait: it expects to run again within `within`.
    #[inline]
    pub fn expect_by(&self, within: Duration) {
        let due = monotonic_ns().saturating_add(within.as_nanos().min(u64::MAX as u128) as u64);
        self.due_ns.store(due, Ordering::Relaxed);
    }

    /// The shard runs again.
    #[inline]
    pub fn running(&self) {
        self.due_ns.store(RUNNING, Ordering::Relaxed);
    }

    /// Wakes the shard if it is waiting more than `grace` past its time; whether it did.
    fn check(&self, now_ns: u64, grace: Duration) -> bool {
        let due = self.due_ns.load(Ordering::Relaxed);
        if due == RUNNING || now_ns <= due.saturating_add(grace.as_nanos() as u64) {
            return false;
        }
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

impl Watchdog {
    /// Watches `shards` (each shard's pulse and metrics), looking every `period`.
    pub fn spawn(
        shards: Vec<(Arc<Pulse>, Arc<ShardMetrics>)>,
        period: Duration,
        grace: Duration,
    ) -> std::io::Result<Watchdog> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("punctual-watchdog".into())
            .spawn(move || watch(&shards, &flag, period, grace))?;
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

fn watch(
    shards: &[(Arc<Pulse>, Arc<ShardMetrics>)],
    stop: &AtomicBool,
    period: Duration,
    grace: Duration,
) {
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(period);
        let now = monotonic_ns();
        for (id, (pulse, metrics)) in shards.iter().enumerate() {
            if pulse.check(now, grace) {
                let n = metrics.watchdog_wakes_total.fetch_add(1, Ordering::Relaxed) + 1;
                // The first few, then one in a thousand: a host that keeps hitting this
                // should be told, not flooded.
                if n <= 3 || n % 1000 == 0 {
                    tracing::warn!(
                        shard = id,
                        wakes = n,
                        grace_ms = grace.as_millis() as u64,
                        "shard had not run {} ms after it was due; woke it (its executor slept with work ready, a task held the thread, or the host did not run it)",
                        grace.as_millis()
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_shard_past_its_time_is_woken_and_a_running_one_is_not() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let pulse = Pulse::default();
        pulse.set_waker(Some(Waker::from(count.clone())));
        let grace = Duration::from_millis(5);
        let now = monotonic_ns();
        assert!(
            !pulse.check(now + 60_000_000_000, grace),
            "running: never woken"
        );
        pulse.expect_by(Duration::from_millis(1));
        assert!(!pulse.check(monotonic_ns(), grace), "not yet due");
        assert!(pulse.check(monotonic_ns() + 10_000_000, grace));
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        pulse.running();
        assert!(!pulse.check(monotonic_ns() + 10_000_000, grace));
        pulse.set_waker(None);
        pulse.expect_by(Duration::ZERO);
        assert!(
            !pulse.check(monotonic_ns() + 10_000_000, grace),
            "no waker: nothing to wake"
        );
    }

    #[test]
    fn the_watchdog_thread_wakes_a_stuck_shard_and_counts_it() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let pulse = Arc::new(Pulse::default());
        pulse.set_waker(Some(Waker::from(count.clone())));
        let metrics = Arc::new(ShardMetrics::default());
        pulse.expect_by(Duration::ZERO);
        let dog = Watchdog::spawn(
            vec![(pulse.clone(), metrics.clone())],
            Duration::from_millis(1),
            Duration::from_millis(1),
        )
        .expect("watchdog thread");
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while count.0.load(Ordering::Relaxed) == 0 && std::time::Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(dog);
        assert!(count.0.load(Ordering::Relaxed) >= 1);
        assert!(metrics.watchdog_wakes_total.load(Ordering::Relaxed) >= 1);
    }
}
