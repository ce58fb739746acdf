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
mod tests {
    use super::*;
    use crate::units::UtcMicros;

    /// Level-2 slots are 4,096 µs wide: a wheel at `START` puts deadlines 3 slots on, in one
    /// level-2 slot.
    const START: u64 = 1 << 30;
    const SLOT: u64 = START + 3 * 4_096;

    /// Warms at `now`, `steps` at a time, until a call walks nothing; every entry walked.
    fn warm_all(wheel: &mut Wheel<u32>, now: u64, steps: usize) -> usize {
        let mut walked = 0;
        for _ in 0..100_000 {
            match wheel.warm(now, steps) {
                0 => return walked,
                n => walked += n,
            }
        }
        panic!("warming never ran out of work");
    }

    #[test]
    fn a_slot_is_walked_once_its_cascade_comes_within_reach_and_then_not_again() {
        let n = 1_000u32;
        let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(START), n as usize);
        for i in 0..n {
            wheel
                .insert(UtcMicros(SLOT + 100 + u64::from(i)), i)
                .expect("in range");
        }
        assert_eq!(wheel.occupancy()[2], n, "all on level 2, in one slot");
        let due = wheel.next_deadline().expect("pending").0;
        let ahead = u64::from(n) * WARM_NS_PER_ENTRY / 1_000;
        assert_eq!(
            warm_all(&mut wheel, due - ahead - 1, 8),
            0,
            "not within reach yet"
        );
        assert_eq!(warm_all(&mut wheel, due - ahead, 8), n as usize);
        assert_eq!(wheel.warm(due - ahead + 1, 8), 0, "walked already");
        // Warming changed nothing: the cascade and the fires are as without it.
        let mut fired = Vec::new();
        wheel.poll(UtcMicros(SLOT + 100 + u64::from(n)), |_, d, v| {
            fired.push((d.0, v))
        });
        let want: Vec<(u64, u32)> = (0..n).map(|i| (SLOT + 100 + u64::from(i), i)).collect();
        assert_eq!(fired, want);
    }

    /// A wheel at `START` with `n` entries in the level-2 slot at `SLOT`, in deadline order.
    fn one_slot(n: u32) -> (Wheel<u32>, Vec<crate::wheel::EntryRef>) {
        let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(START), n as usize);
        let refs = (0..n)
            .map(|i| {
                wheel
                    .insert(UtcMicros(SLOT + u64::from(i)), i)
                    .expect("in range")
            })
            .collect();
        (wheel, refs)
    }

    #[test]
    fn a_walk_whose_last_entry_left_the_list_starts_again_from_the_head() {
        let (mut wheel, refs) = one_slot(64);
        assert_eq!(wheel.warm(SLOT, 10), 10, "entries 0 to 9");
        // Entries 5 to 63 go, the last one walked with them, latest first: the freed entry 9
        // now points on through the free list to 10, 11, … 63, which a walk that followed it
        // would take for the list.
        for r in refs[5..].iter().rev() {
            wheel.remove(*r).expect("pending");
        }
        assert_eq!(
            warm_all(&mut wheel, SLOT, 3),
            5,
            "entries 0 to 4, from the head"
        );
    }

    #[test]
    fn a_walk_whose_last_entry_went_to_another_timer_starts_again_from_the_head() {
        let (mut wheel, refs) = one_slot(64);
        assert_eq!(wheel.warm(SLOT, 10), 10, "entries 0 to 9");
        // Entry 9's index goes to a new timer in the same slot, at the list's tail: a walk
        // that went on from it would end there and miss entries 10 to 63.
        wheel.remove(refs[9]).expect("pending");
        let again = wheel.insert(UtcMicros(SLOT + 1_000), 99).expect("in range");
        assert_eq!(again.index, refs[9].index, "the index was given again");
        assert_eq!(
            warm_all(&mut wheel, SLOT, 8),
            64,
            "the whole list, from the head"
        );
    }

    #[test]
    fn entries_appended_after_a_walk_are_walked_next() {
        let (mut wheel, _) = one_slot(64);
        assert_eq!(warm_all(&mut wheel, SLOT, 8), 64);
        assert_eq!(wheel.warm(SLOT, 8), 0, "nothing left");
        wheel.insert(UtcMicros(SLOT + 1_000), 99).expect("in range");
        wheel
            .insert(UtcMicros(SLOT + 1_001), 100)
            .expect("in range");
        assert_eq!(warm_all(&mut wheel, SLOT, 8), 2, "only the two new ones");
        let mut fired = Vec::new();
        wheel.poll(UtcMicros(SLOT + 1_001), |_, _, v| fired.push(v));
        let want: Vec<u32> = (0..64).chain([99, 100]).collect();
        assert_eq!(fired, want, "warming changed nothing a poll sees");
    }

    #[test]
    fn a_slot_too_large_to_keep_cached_is_left_alone() {
        let n = WARM_MAX + 1;
        let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(START), n as usize);
        for i in 0..n {
            wheel.insert(UtcMicros(SLOT), i).expect("in range");
        }
        assert_eq!(warm_all(&mut wheel, SLOT, 64), 0);
    }
}
