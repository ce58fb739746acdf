//! Parking: how a shard waits between passes. Parked until its next deadline (less the spin
//! window) or a ring wake-up, spinning on the TSC when the deadline is closer than the spin
//! window, and, on a thread shared with other tasks, bounded so that they run: a nap lasts at
//! most [`MAX_NAP`], a spin at most [`MAX_UNYIELDED`] before a yield (the shard module doc
//! says why). Briefly handing the thread to the executor's other tasks is
//! `cooperate::yield_to_reactor`, reported to the watchdog around it.
//!
//! Time to spare, in a spin or before a park, walks the wheel's next cascades ahead of time
//! (`wheel/warm.rs`): a few entries per spin turn with more than [`WARM_SPARE`] to go, and up
//! to [`WARM_BEFORE_PARK`] before a park, which a shared thread's spin then has that much less
//! of before it yields.
//!
//! Cost: a park is a glommio timer raced against a read of the wake socket (`Wakee::Reactor`)
//! or one `ppoll` (`Wakee::Direct`); a spin reads the TSC through the clock's mapping and looks
//! at the ring once per turn. Warming: one comparison per turn while nothing is due to be
//! warmed, otherwise [`WARM_STEP`] entries (about a microsecond cold).

use super::wakee::Wakee;
use super::Shard;
use crate::clock::TimeSource;
use crate::runtime::cooperate::ShardAway;
use crate::units::UtcNanos;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Longest a shard that shares its thread spins without yielding to its other tasks: a slice.
const MAX_UNYIELDED: Duration = crate::runtime::cooperate::SLICE;

/// Longest a shard that shares its thread parks in one go. glommio 0.9 may sleep with a task
/// runnable (see the shard module doc); the park's timer is what ends such a sleep for the
/// shard's other tasks, so this bounds it. Cost: an idle shard wakes 500 times a second, a few
/// microseconds each.
const MAX_NAP: Duration = Duration::from_millis(2);

impl<S: TimeSource> Shard<S> {
    /// Parks until the next deadline (less the spin window) or a ring wake-up, or spins when
    /// the next deadline is closer than the spin window.
    pub(super) async fn wait(&mut self, wakee: &mut Wakee, buf: &mut [u8]) {
        let next = self.next_wake();
        let spin = self.spin.window();
        // Time to spare before the spin window warms the wheel's next cascades first, as the
        // spin's own turns do; a shard that spins little or not at all would not warm them.
        let spin_ns = u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX);
        let (now, warmed) = self.warm_before(UtcNanos(next.mapped.0.saturating_sub(spin_ns)));
        let wait = Duration::from_nanos(next.mapped.0.saturating_sub(now.0));
        if wait > spin {
            let mut nap = wait - spin;
            if wakee.cooperative() {
                // Bounds how long glommio may sleep with another task runnable (see the
                // module doc): the nap's timer ends any such sleep.
                nap = nap.min(MAX_NAP);
            }
            self.nap(wakee, nap, buf).await;
            // How late the park resumed: an adaptive spin window follows it (`spin.rs`); a
            // fixed one needs no clock read.
            if self.spin.is_adaptive() {
                let intended = now.0.saturating_add(nap.as_nanos() as u64);
                self.spin.parked(intended, self.clock.now().0);
            }
        } else if wakee.cooperative() {
            // Spin for at most MAX_UNYIELDED, less what warming took, then let the other
            // tasks run and come back, asking them to hand the thread back by the deadline.
            if !self.spin_until(next, MAX_UNYIELDED.saturating_sub(warmed)) {
                let left = next.mapped.0.saturating_sub(self.clock.now().0);
                let _away = ShardAway::until(Instant::now() + Duration::from_nanos(left));
                self.yield_now().await;
            }
        } else {
            self.spin_until(next, Duration::MAX);
        }
    }

    /// Parks for `nap` or until a ring wake-up (unless work arrived meanwhile).
    pub(super) async fn nap(&self, wakee: &mut Wakee, nap: Duration, buf: &mut [u8]) {
        if self.ring.prepare_park() {
            // On a shared thread the other tasks' slices end once the nap is over
            // (`cooperate`).
            let _away = wakee.cooperative().then(|| {
                self.pulse.expect_by(nap);
                ShardAway::until(Instant::now() + nap)
            });
            let park = std::pin::pin!(wakee.park(nap, buf));
            self.pulse.noted(park).await;
            self.pulse.running();
            self.ring.unpark();
        }
    }

    /// Hands the thread to the executor's other tasks and its I/O (see the module doc).
    pub(super) async fn yield_now(&self) {
        self.pulse.expect_by(Duration::ZERO);
        self.pulse
            .noted(crate::runtime::cooperate::yield_to_reactor())
            .await;
        self.pulse.running();
    }

    /// When to stop waiting, as [`Wake`]: the next deadline less the clock's lag allowance,
    /// or the next anchor if that is earlier.
    pub(super) fn next_wake(&self) -> Wake {
        let anchor = self.clock.next_anchor_at();
        let allowance = self.clock.lag_allowance().as_nanos() as u64;
        let deadline = self.table.next_deadline().map(|d| d.as_nanos());
        match deadline.map(|d| UtcNanos(d.0.saturating_sub(allowance))) {
            Some(mapped) if mapped < anchor => Wake { mapped, deadline },
            _ => Wake {
                mapped: anchor,
                deadline: None,
            },
        }
    }

    /// Walks the wheel's next cascades (`wheel::warm`) until `until` is [`WARM_SPARE`] away,
    /// the ring has work, nothing is left to warm, or [`WARM_BEFORE_PARK`] has passed; the
    /// clock's last reading, and how long it took.
    fn warm_before(&mut self, until: UtcNanos) -> (UtcNanos, Duration) {
        let start = self.clock.now();
        let mut now = start;
        while now.0.saturating_sub(start.0) < WARM_BEFORE_PARK.as_nanos() as u64
            && !self.ring.has_work()
            && self.warm_step(now, until)
        {
            now = self.clock.now();
        }
        (now, Duration::from_nanos(now.0.saturating_sub(start.0)))
    }

    /// One warming step at `now` if `until` is more than [`WARM_SPARE`] away: whether it
    /// walked anything.
    fn warm_step(&mut self, now: UtcNanos, until: UtcNanos) -> bool {
        until.0.saturating_sub(now.0) > WARM_SPARE.as_nanos() as u64
            && self.table.warm(now.as_micros(), WARM_STEP) > 0
    }

    /// Spins until the mapped clock reaches `wake.mapped` and then, for a deadline, the system
    /// clock reaches the deadline (true); or until the ring has work, the shard is stopping, or
    /// `limit` has passed (false). The last stretch reads CLOCK_REALTIME (a vDSO call, tens of
    /// nanoseconds, for about [`crate::clock::Clock::lag_allowance`]), so the pass that follows
    /// starts as the deadline passes, not when the mapping, which trails, catches up.
    ///
    /// A turn with more than [`WARM_SPARE`] to go walks [`WARM_STEP`] entries of the wheel's
    /// next cascades (`wheel::warm`), so that a cascade due soon finds its entries cached
    /// instead of missing on each.
    pub(super) fn spin_until(&mut self, wake: Wake, limit: Duration) -> bool {
        let give_up = std::time::Instant::now().checked_add(limit);
        let mut turns = 0u32;
        loop {
            let now = self.clock.now();
            if now >= wake.mapped
                && wake
                    .deadline
                    .is_none_or(|d| self.clock.source().realtime() >= d)
            {
                return true;
            }
            if self.ring.has_work() || self.stop.load(Ordering::Relaxed) {
                return false;
            }
            let warmed = self.warm_step(now, wake.mapped);
            turns = turns.wrapping_add(1);
            // The limit is checked every 64 plain turns, since an `Instant` read costs about
            // as much as a TSC read through the mapping, and after every warming turn, which
            // may take a microsecond.
            if (warmed || turns % 64 == 0)
                && give_up.is_some_and(|g| std::time::Instant::now() >= g)
            {
                return false;
            }
            if !warmed {
                std::hint::spin_loop();
            }
        }
    }
}

/// Entries of the wheel's next cascades a spin turn walks ahead of time: eight cold entries
/// are about a microsecond.
const WARM_STEP: usize = 8;

/// The longest a shard warms before it parks or spins: the walk of about 1,500 cold entries,
/// and what a pass may hold a shared thread for (`cooperate::SLICE`).
const WARM_BEFORE_PARK: Duration = crate::runtime::cooperate::SLICE;

/// How far a spin must be from its end for a turn to warm: several steps' worth, so that a
/// step that misses on every entry, or is interrupted, still ends before the deadline.
const WARM_SPARE: Duration = Duration::from_micros(10);

/// When a shard's wait ends: once the mapped clock reaches `mapped` and, for a deadline, the
/// system clock reaches `deadline` (`Shard::spin_until`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Wake {
    pub mapped: UtcNanos,
    pub deadline: Option<UtcNanos>,
}
