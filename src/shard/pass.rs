//! What one pass of the shard's loop may do and what it leaves: its budget of fires on a
//! shared thread ([`FIRE_BATCH`]), what it left to fire ([`More`]) and how long the loop naps
//! when the store held it back ([`HELD_BACK_NAP`]), and the memory of the timers it fired,
//! freed once the burst is over ([`Spent`]). The loop (`mod.rs`) reads these; the fire pass
//! (`fire.rs`) fills them. They live apart from both so that the loop's file and the pass's
//! need not import each other.
//!
//! Cost: holding a fired timer is one push onto a vector reserved when the shard starts;
//! freeing is [`FREE_BATCH`] drops after a pass that left nothing due.

use crate::timer::PackedTimer;
use std::time::Duration;

/// Timers fired in one pass by a shard that shares its thread. A burst (a million timers due
/// at one instant) is fired over many passes, with the other tasks running in between; a
/// shard alone on its thread fires a burst in one go.
pub(super) const FIRE_BATCH: usize = 4096;

/// Fired timers' memory freed per pass once a burst is over (see [`Spent`]).
pub(super) const FREE_BATCH: usize = 4096;

/// Fired timers held for freeing at most (512 KiB of one-pointer handles, reserved when the
/// shard starts: growing the hold in the middle of a burst would copy it between two fires).
/// Past it, a fired timer is freed at once, and a pass frees some even while more is due.
pub(super) const SPENT_MAX: usize = 65_536;

/// How long a shard whose store holds as many fires as it may waits before it looks again.
pub(super) const HELD_BACK_NAP: Duration = Duration::from_millis(1);

/// What a pass left to fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum More {
    /// Nothing due.
    No,
    /// More due: the pass's budget ran out.
    Due,
    /// More due, held back until the store has room for their writes.
    HeldBack,
}

/// The memory of fired timers, freed after the burst they fired in rather than between its
/// fires. A timer's packed bytes were allocated by the thread that scheduled it, so freeing
/// them on the shard is a cross-thread free (an atomic push onto the owning heap's list and a
/// cache miss on its page header): 15% of a million-timer burst's time when done per fire.
/// At most [`SPENT_MAX`] are held.
pub(crate) struct Spent(pub(super) Vec<PackedTimer>);

impl Default for Spent {
    /// Room for all it may hold from the start (512 KiB of address space, its pages touched
    /// as a burst fills them): grown by doubling, the first long burst waited between two
    /// fires while up to 256 KiB was copied.
    fn default() -> Spent {
        Spent(Vec::with_capacity(SPENT_MAX))
    }
}

impl Spent {
    /// Holds a fired timer's memory for freeing after the burst, or frees it at once when
    /// [`SPENT_MAX`] are held.
    pub(super) fn keep(&mut self, timer: PackedTimer) {
        if self.0.len() < SPENT_MAX {
            self.0.push(timer);
        }
    }

    /// After a pass: frees a batch once nothing more is due, or while the hold is full; how
    /// many it freed.
    pub(super) fn after_pass(&mut self, more: More) -> usize {
        if more == More::No || self.0.len() >= SPENT_MAX {
            self.free(FREE_BATCH)
        } else {
            0
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Frees up to `n` timers; how many.
    pub(super) fn free(&mut self, n: usize) -> usize {
        let n = n.min(self.0.len());
        self.0.truncate(self.0.len() - n);
        n
    }
}
