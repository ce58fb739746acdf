//! A process-wide watch on the system clock being *set*, so every shard re-anchors at once.
//!
//! Each shard re-anchors every 100 ms on its own schedule. When the system clock is stepped
//! (`clock_settime`, `settimeofday`, chrony's `makestep`, a resume from suspend), shards that
//! have not re-anchored yet still map the old time: for up to an interval they disagree with
//! each other and with the system clock. The kernel can say when this happens: a
//! `timerfd_create(CLOCK_REALTIME)` timer armed with `TFD_TIMER_ABSTIME |
//! TFD_TIMER_CANCEL_ON_SET` is cancelled whenever CLOCK_REALTIME is set, and a `read` of it
//! then fails with `ECANCELED`. An NTP *slew* (a rate change) does not cancel it; the anchors'
//! rate tracking covers slews.
//!
//! ```text
//!   thread "punctual-clock-set":
//!     arm the timerfd: CLOCK_REALTIME, absolute, cancel on set, 100 years ahead
//!     loop: poll(timerfd, stop eventfd)
//!       stop readable      -> return
//!       read(timerfd) = ECANCELED:
//!         re-arm (a set from here on cancels it again)
//!         generation += 1 (Release)
//!         on_set()          (the engine wakes every shard)
//! ```
//!
//! A shard that follows the generation (`Clock::follow_sets`) finds an anchor due at its next
//! pass, and the anchor treats the span since the last one as broken by the set. Re-arming
//! before the bump loses nothing: a set before the re-arm is seen by the anchors this bump
//! triggers, a set after it cancels the timer again.
//!
//! Errors never panic: `spawn` returns them; in the thread they are logged and the watch
//! ends, leaving the shards to their regular anchors. Dropping the `SetWatch` stops the
//! thread through the eventfd and joins it.
//!
//! Cost: one sleeping thread per process; nothing on any shard's path but the relaxed load
//! in `Clock::anchor_due`.

use super::source::clock_ns;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How far ahead the cancel-on-set timer is armed: it is not meant to expire.
const FAR_AHEAD_S: i64 = 100 * 365 * 86_400;

/// The watch thread and the means to stop it. One per process.
pub struct SetWatch {
    generation: Arc<AtomicU64>,
    /// Written once on drop: the thread returns when it becomes readable.
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl SetWatch {
    /// Arms the timer and starts the thread; `on_set` runs on that thread after each set, once
    /// the generation has moved. Keep it short: it should only wake the shards.
    pub fn spawn<F>(on_set: F) -> io::Result<SetWatch>
    where
        F: Fn() + Send + 'static,
    {
        let timer = timerfd()?;
        arm(timer.as_fd())?;
        let stop = eventfd()?;
        let stop_seen = stop.try_clone()?;
        let generation = Arc::new(AtomicU64::new(0));
        let bumped = generation.clone();
        let on_set: Box<dyn Fn() + Send> = Box::new(on_set);
        let thread = std::thread::Builder::new()
            .name("punctual-clock-set".into())
            .spawn(move || watch(timer, stop_seen, bumped, on_set))?;
        Ok(SetWatch {
            generation,
            stop,
            thread: Some(thread),
        })
    }

    /// The counter of sets seen, for `Clock::follow_sets` (one clone per shard).
    pub fn generation(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }

    /// How many sets the watch has seen.
    pub fn sets(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

impl Drop for SetWatch {
    fn drop(&mut self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: `self.stop` is an open eventfd owned by this struct; `one` is 8 readable
        // bytes, the size an eventfd write takes, alive for the call.
        let rc = unsafe { libc::write(self.stop.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        if rc != one.len() as isize {
            // The thread cannot be told to stop; leave it sleeping rather than hang on join.
            tracing::error!(
                error = %io::Error::last_os_error(),
                "clock set watch: could not signal its thread to stop; leaving it"
            );
            return;
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("clock set watch: its thread panicked");
            }
        }
    }
}

/// The thread: waits for a set or for the stop signal.
fn watch(timer: OwnedFd, stop: OwnedFd, generation: Arc<AtomicU64>, on_set: Box<dyn Fn() + Send>) {
    loop {
        let mut fds = [
            libc::pollfd {
                fd: timer.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is an array of two initialised pollfd, writable and alive for the
        // call, and its length is passed with it; both descriptors are open (owned here).
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return give_up("poll failed", &e);
        }
        if fds[1].revents != 0 {
            return;
        }
        let revents = fds[0].revents;
        if revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            let e = io::Error::other(format!("timerfd poll revents {revents:#x}"));
            return give_up("the timerfd failed", &e);
        }
        if revents & libc::POLLIN == 0 {
            continue;
        }
        match read_expirations(timer.as_fd()) {
            Err(e) if e.raw_os_error() == Some(libc::ECANCELED) => {
                let rearmed = arm(timer.as_fd());
                generation.fetch_add(1, Ordering::Release);
                tracing::info!("system clock was set: every shard re-anchors now");
                if catch_unwind(AssertUnwindSafe(&on_set)).is_err() {
                    tracing::error!("clock set watch: the on-set callback panicked");
                }
                if let Err(e) = rearmed {
                    return give_up("re-arming the timerfd failed", &e);
                }
            }
            // A hundred years passed, or the clock was set beyond them: arm again from now.
            Ok(_) => {
                if let Err(e) = arm(timer.as_fd()) {
                    return give_up("re-arming the timerfd failed", &e);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return give_up("reading the timerfd failed", &e),
        }
    }
}

fn give_up(what: &str, e: &io::Error) {
    tracing::error!(
        error = %e,
        "clock set watch stopped: {what}; shards notice a set of the system clock only at \
         their next regular anchor"
    );
}

fn timerfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; the call returns a new descriptor or -1.
    let fd = unsafe {
        libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by timerfd_create and nothing else holds it, so the
    // OwnedFd becomes its only owner and closes it once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; the call returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd and nothing else holds it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Arms `timer` to expire far in the future, cancelled by any set of CLOCK_REALTIME.
fn arm(timer: BorrowedFd<'_>) -> io::Result<()> {
    let now_s = (clock_ns(libc::CLOCK_REALTIME) / 1_000_000_000) as i64;
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: now_s.saturating_add(FAR_AHEAD_S),
            tv_nsec: 0,
        },
    };
    // SAFETY: `timer` is an open timerfd; `spec` is a valid itimerspec alive for the call,
    // and a null old-value pointer is allowed.
    let rc = unsafe {
        libc::timerfd_settime(
            timer.as_raw_fd(),
            libc::TFD_TIMER_ABSTIME | libc::TFD_TIMER_CANCEL_ON_SET,
            &spec,
            std::ptr::null_mut(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads the timer's expiration count; `ECANCELED` when the clock was set.
fn read_expirations(timer: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: `timer` is an open timerfd; `buf` is 8 writable bytes, the size a timerfd read
    // needs, alive for the call.
    let rc = unsafe { libc::read(timer.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if rc != buf.len() as isize {
        return Err(io::Error::other(format!(
            "timerfd read returned {rc} bytes"
        )));
    }
    Ok(u64::from_ne_bytes(buf))
}

#[cfg(test)]
#[path = "set_watch_tests.rs"]
mod tests;
