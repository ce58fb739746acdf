//! Warming: the lists the next cascades will move, walked ahead of time while the shard has
//! nothing else to do, so that the cascades themselves find their entries in the cache.
//!
//! A cascade is a walk of a slot's list, and the list is a pointer chase through the slab:
//! each entry's `next` is known only once the entry is loaded. Entries inserted long ago are
//! cold, so each step of the walk is a cache and TLB miss, and nothing can be asked for ahead.
//! The walk runs when the slot becomes the lowest level's earliest, that is once the timers
//! due before it have fired, and the slot's first timers wait for it: spread deadlines (W1 of
//! `benches/jitter/main.rs`, 100,000 timers over 10 s) put 2,600 entries in each 262 ms slot of
//! level 3, and their cascade made the first timer after each slot's start late by a median
//! of 160–230 µs (`docs/bench/2026-12-06/NOTES.md`, "W1: where the tail went"). Cascading
//! earlier is not an option: the level below still holds the slot before.
//!
//! So a shard with time to spare before a deadline (spinning towards it, or about to park)
//! walks, a few entries at a time (`shard/park.rs`), the list of each level's next slot once
//! its cascade is due within [`WARM_NS_PER_ENTRY`] per entry (at least [`WARM_MIN_AHEAD_US`]):
//! about twice what a cold walk of the list takes, and no earlier. Warmed 2 ms ahead, the lists were as cold at the cascade as without
//! warming (a walk of the list just before the cascade still took 130 ns an entry); warmed
//! this close, that walk took 10–15 ns an entry and the cascade a quarter of its time. A
//! cursor per level resumes the walk after the last entry it walked, and takes in entries
//! appended since. Warming only reads: it changes no list, and a cursor whose entry left the
//! list (fired, removed, moved, or its index given to another timer) starts again from the
//! list's head. Slots of more than [`WARM_MAX`] entries are left alone:
//! their lists do not fit the caches the walk would fill, and their cascades run far ahead
//! anyway (a million entries on level 2 cascade 80 ms before their start).
//!
//! Cost: when nothing is left to warm, one comparison per call until the wheel's time moves
//! or the next slot comes within reach; otherwise a look at each level's next slot (8 levels)
//! and one load per entry walked.

use super::list::{Pos, NIL};
use super::{Wheel, LEVELS};

/// How long before its cascade is due a slot is warmed, per entry, in ns: twice what a cold
/// walk took per entry (130 ns on the 2-vCPU guest of `docs/BENCHMARKS.md`), so that a shard
/// that spins only part of the time still ends the walk in time, and no earlier, so that what
/// it warmed is still cached when the cascade runs.
pub const WARM_NS_PER_ENTRY: u64 = 250;

/// How long before its cascade is due a slot of few entries is warmed, in µs.
pub const WARM_MIN_AHEAD_US: u64 = 100;

/// The most entries a slot may hold and still be warmed: about 1 MiB of slab lines.
pub const WARM_MAX: u32 = 16_384;

/// Where the walk of one level's next slot stands.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cursor {
    /// The start (µs) of the slot being walked; `u64::MAX` for none.
    start: u64,
    /// The last entry walked, `NIL` before the first, and its generation then: the walk goes
    /// on from its `next` while it is still the same entry in the same list.
    last: u32,
    generation: u32,
}

impl Cursor {
    pub const NONE: Cursor = Cursor {
        start: u64::MAX,
        last: NIL,
        generation: 0,
    };
}

/// The warming cursors of a wheel, and when a call can next find work.
#[derive(Clone, Debug)]
pub(super) struct Warming {
    cursors: [Cursor; LEVELS],
    /// (`elapsed`, µs): until the wheel's time moves from `elapsed`, the clock reaches the µs,
    /// or a list changes, nothing is left to warm.
    idle: (u64, u64),
}

impl Warming {
    const BUSY: (u64, u64) = (u64::MAX, 0);

    pub fn new() -> Warming {
        Warming {
            cursors: [Cursor::NONE; LEVELS],
            idle: Warming::BUSY,
        }
    }

    /// A list changed (an entry linked or unlinked): the next call looks again.
    #[inline]
    pub fn changed(&mut self) {
        self.idle = Warming::BUSY;
    }
}

impl<T> Wheel<T> {
    /// Walks up to `steps` entries of the slots whose cascades come within reach by `now`
    /// (µs; see the module doc), lowest level first, resuming where the last call
    /// stopped. Returns how many it walked: 0 when nothing is left to warm. Changes nothing
    /// that a poll, an insert or a removal sees.
    pub fn warm(&mut self, now: u64, steps: usize) -> usize {
        let (idle_at, idle_until) = self.warming.idle;
        if idle_at == self.elapsed && now < idle_until {
            return 0;
        }
        let mut left = steps;
        let mut next_work = u64::MAX;
        for level in 1..LEVELS {
            let l = &self.levels[level];
            let Some((start, slot)) = l.next_occupied(self.elapsed) else {
                continue;
            };
            let count = l.count(slot);
            if count > WARM_MAX {
                continue;
            }
            let lead = self.cascade_lead(level, count);
            let ahead = (u64::from(count) * WARM_NS_PER_ENTRY / 1_000).max(WARM_MIN_AHEAD_US);
            let from = start.saturating_sub(lead).saturating_sub(ahead);
            if from > now {
                next_work = next_work.min(from);
                continue;
            }
            let pos = Pos::slot(level as u32, slot);
            let head = l.slot(slot).head;
            let c = &mut self.warming.cursors[level];
            if c.start != start {
                *c = Cursor {
                    start,
                    ..Cursor::NONE
                };
            }
            while left > 0 {
                let next = match self.slab.peek(c.last) {
                    Some(e) if e.pos == pos && e.generation == c.generation => e.next,
                    // Before the first step, or stale: the entry left this list (fired,
                    // removed, moved) or its index went to another timer since.
                    _ => head,
                };
                // Loading the entry is the warming.
                let Some(e) = self.slab.peek(next) else {
                    break;
                };
                left -= 1;
                c.last = next;
                c.generation = e.generation;
            }
            if left == 0 {
                return steps;
            }
        }
        self.warming.idle = (self.elapsed, next_work);
        steps - left
    }
}

#[cfg(test)]
#[path = "warm_tests.rs"]
mod tests;
