//! A shard held inside a fire handler until the test lets go, and callers left waiting on its
//! ring meanwhile: the set-up of the tests that stop, fail or shut down a busy shard
//! (`tests/liveness.rs`, `tests/shard_cooperation.rs`). Every wait here is bounded.

#![allow(dead_code)] // each test binary uses its own part of this

use punctual::{Error, Handle, Scheduled, UtcMicros};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Far past every limit the tests set: a wait that reaches it means something hung.
pub const HUNG: Duration = Duration::from_secs(60);

/// The test's side of the hold: it learns when a handler entered it, and lets it go.
pub struct Hold {
    release: Arc<AtomicBool>,
    entered: mpsc::Receiver<()>,
}

/// The handler's side: [`Holder::hold`] blocks the shard's thread until the test lets go.
#[derive(Clone)]
pub struct Holder {
    release: Arc<AtomicBool>,
    entered: Arc<Mutex<mpsc::Sender<()>>>,
}

/// A hold and the holder to call from a fire handler.
pub fn hold() -> (Hold, Holder) {
    let release = Arc::new(AtomicBool::new(false));
    let (tx, entered) = mpsc::channel();
    let holder = Holder {
        release: release.clone(),
        entered: Arc::new(Mutex::new(tx)),
    };
    (Hold { release, entered }, holder)
}

impl Holder {
    /// Says it entered, then blocks until the test lets go (checked every millisecond).
    pub fn hold(&self) {
        let _ = self.entered.lock().map(|tx| tx.send(()));
        while !self.release.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Hold {
    /// Schedules `key` due now on `h` and waits (at most [`HUNG`]) until its fire holds the
    /// shard.
    pub fn enter(&self, h: &Handle, key: &str) {
        h.schedule("t", key, UtcMicros(h.now().0), b"")
            .expect("scheduled");
        self.entered
            .recv_timeout(HUNG)
            .expect("the shard entered the handler");
    }

    /// Lets the held handler go.
    pub fn release(&self) {
        self.release.store(true, Ordering::Release);
    }
}

/// `n` callers, each on a thread of its own, scheduling a timer a minute ahead on `h`: with
/// the shard held they wait on its ring. Their answers arrive on the receiver.
pub fn callers(
    h: &Handle,
    n: usize,
) -> (
    mpsc::Receiver<Result<Scheduled, Error>>,
    Vec<JoinHandle<()>>,
) {
    let (tx, rx) = mpsc::channel();
    let threads = (0..n)
        .map(|i| {
            let (h, tx) = (h.clone(), tx.clone());
            std::thread::spawn(move || {
                let r = h.schedule(
                    "t",
                    &format!("k{i}"),
                    UtcMicros(h.now().0 + 60_000_000),
                    b"",
                );
                let _ = tx.send(r);
            })
        })
        .collect();
    (rx, threads)
}

/// Runs `f` on a thread; its result, or `None` if it had not returned within [`HUNG`].
pub fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HUNG).ok()
}
