//! Re-arming a fired entry: the caller of a poll keeps what it fired, in the same slab entry.
//!
//! The caller of [`Wheel::poll_keeping`] decides each entry's [`Fate`] at its fire: done (its
//! slab entry is freed) or re-armed at a new deadline with a new value, in the same slab entry
//! (same index, same generation). A re-armed entry is held off the levels until the poll
//! ends, then linked like an insert made right after it: so it never fires twice in one poll,
//! and the levels never change under the poll's walk. Its deadline must not lie past
//! [`Wheel::horizon`] as read before the poll (one that does is held at the horizon); every
//! deadline up to it is in range from any later `elapsed`, since `elapsed` only grows.
//!
//! Cost: a re-arm is O(1) and allocates nothing: the entry is never freed, so its index
//! (and whatever the caller keys by it, like the table's index entry) stays as it was, and
//! linking it at the end of the poll is the link an insert makes.

use super::list::{Pos, SlotList, NIL, SLOT_BITS};
use super::{Wheel, LEVELS};
use crate::units::UtcMicros;

/// The bits of a deadline below the levels' reach, `LEVELS` base-64 digits (see
/// [`Wheel::horizon`]).
const HORIZON_MASK: u64 = (1 << (SLOT_BITS as usize * LEVELS)) - 1;

/// What becomes of an entry a poll fired (see the module doc).
#[derive(Debug, PartialEq, Eq)]
pub enum Fate<T> {
    /// It leaves the wheel.
    Done,
    /// It stays in its slab entry, due at this deadline, holding this value.
    Rearm(UtcMicros, T),
}

impl<T> Wheel<T> {
    /// The latest deadline in range from now on: deadlines up to it are in range from the
    /// current time and from any later one up to them (the levels cover the 2^54 µs that share
    /// `elapsed`'s digits above them).
    pub fn horizon(&self) -> UtcMicros {
        UtcMicros(self.elapsed | HORIZON_MASK)
    }

    /// Like [`Wheel::poll_at_most`], with the entry's [`Fate`] decided at its fire: a
    /// re-armed entry keeps its slab entry and is linked at its new deadline when the poll
    /// ends (see the module doc).
    pub fn poll_keeping(
        &mut self,
        now: UtcMicros,
        budget: usize,
        mut fire: impl FnMut(u32, UtcMicros, T) -> Fate<T>,
    ) -> bool {
        let horizon = self.horizon();
        let more = self.poll_due(now.0, budget, &mut |index, deadline, value| match fire(
            index, deadline, value,
        ) {
            Fate::Done => Fate::Done,
            Fate::Rearm(at, value) => {
                debug_assert!(
                    at <= horizon,
                    "entry {index} re-armed at {} past the horizon {}",
                    at.0,
                    horizon.0
                );
                Fate::Rearm(at.min(horizon), value)
            }
        });
        self.link_rearmed();
        more
    }

    /// Frees the fired entry `index` (its value taken), or holds it re-armed until the poll
    /// ends.
    pub(super) fn settle(&mut self, index: u32, fate: Fate<T>) {
        match fate {
            Fate::Done => self.slab.release(index),
            Fate::Rearm(deadline, value) => {
                self.slab.refill(index, deadline.0, value);
                self.rearmed = self.append(self.rearmed, index, Pos::REARMED);
            }
        }
    }

    /// Links the entries re-armed by the poll that is ending, as inserts after it.
    fn link_rearmed(&mut self) {
        let mut index = std::mem::replace(&mut self.rearmed, SlotList::EMPTY).head;
        while index != NIL {
            let next = self.slab.get(index).next;
            self.link(index);
            index = next;
        }
    }
}
