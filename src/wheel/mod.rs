//! A hierarchical timing wheel: one per shard, single-threaded, no locks.
//!
//! # Levels
//!
//! Deadlines are UTC microseconds. Nine levels of 64 slots each; the slot width of level
//! `n` is `64^n` µs:
//!
//! | level | slot width  | level span   |
//! |-------|-------------|--------------|
//! | 0     | 1 µs        | 64 µs        |
//! | 1     | 64 µs       | 4.1 ms       |
//! | 2     | 4.1 ms      | 262 ms       |
//! | 3     | 262 ms      | 16.8 s       |
//! | 4     | 16.8 s      | 17.9 min     |
//! | 5     | 17.9 min    | 19.1 h       |
//! | 6     | 19.1 h      | 50.9 days    |
//! | 7     | 50.9 days   | 8.9 years    |
//! | 8     | 8.9 years   | 571 years    |
//!
//! Level-0 slots are one microsecond wide, the precision we promise, so an entry in a level-0
//! slot is due exactly at that slot's start. An entry sits on the level of the highest base-64
//! digit in which its deadline differs from `elapsed` (the wheel's current time). When
//! `elapsed` reaches the start of a slot on level `n > 0`, the slot is *cascaded*: each of its
//! entries moves to a lower level, since its deadline now shares that digit with `elapsed`. An
//! entry cascades at most eight times over its life; each move is O(1).
//!
//! # A walk-through
//!
//! `elapsed` = 1,000,000 µs; a timer is due at 1,300,000 (300 ms later). The two values first
//! differ in base-64 digit 3, so the timer goes to level 3, slot `(1_300_000 >> 18) & 63 = 4`,
//! which starts at 1,048,576. `next_deadline()` reports 1,048,576: the shard wakes then, the
//! poll cascades slot 4, and the timer lands on level 2 (slot 15, starting at 1,298,432). At
//! that instant it cascades again to level 1 (slot 24 at 1,299,968), then to level 0 slot 32,
//! which starts at 1,300,000: it fires there, not a microsecond before.
//!
//! # Cascading ahead
//!
//! A cascade is work that fires nothing: a million timers due at one instant sit in one slot
//! far out, and each step down moves all of them. Done at the slot's start, the last steps
//! (the level-1 slot starts at most 63 µs before the deadline) would make the whole burst wait.
//! So a slot above level 0 is due for its cascade *ahead* of its start, by what the cascade is
//! expected to cost: `entries × level × MOVE_NS` (each slot keeps a count of its entries). A
//! slot of a few entries cascades at its start, as before; a slot of a million on level 2
//! cascades about 80 ms ahead, so that at the deadline the shard only fires.
//!
//! Cascading ahead moves `elapsed` to the slot's start, past the clock. Nothing pending is
//! skipped: the slot is the lowest level's earliest, and every entry in it is due at or after
//! its start. A timer inserted meanwhile with a deadline before `elapsed` goes to the expired
//! list, which fires by the clock (below), so nothing fires early and deadline order holds:
//! everything on the expired list is due before everything on the levels.
//!
//! # Re-arming
//!
//! A poll's caller may keep an entry it fired: [`Wheel::poll_keeping`] re-arms it in its own
//! slab entry, linked as the poll ends (`rearm.rs`).
//!
//! # Invariants
//!
//! - Every entry on the levels has `deadline >= elapsed`, and every occupied slot starts at or
//!   after `elapsed`'s slot on its level, so `next_occupied` never wraps.
//! - A level holds only deadlines later than every deadline on the levels below it, so the
//!   earliest slot of the lowest non-empty level holds the earliest deadline.
//! - Entries inserted with a deadline before `elapsed` go to the *expired* list. They fire
//!   at the next `poll` whose `now` reaches their deadline: normally the very next one, but
//!   after the clock stepped backwards, or while a cascade ahead has put `elapsed` past the
//!   clock (`now < elapsed`), they wait, so nothing fires early. Arrivals out of deadline
//!   order are sorted first, [`SORT_STEP`] per poll (`expired.rs`): more than that wait for
//!   the polls that sort them, each of which reports more due, with `next_deadline` at or
//!   before its `now`, so the caller polls again at once instead of parking.
//!
//! # Cost model
//!
//! insert, remove and re-arm: O(1), no allocation once the slab and the expired list's runs
//! have grown to their peak. `next_deadline`: O(levels), one `trailing_zeros` per level.
//! Memory: 64 slots × 9 levels × 12 bytes (head, tail, count). `poll`: O(fired + cascaded),
//! plus the sorting of at most [`SORT_STEP`] expired entries that arrived out of order, and
//! O(log runs) per fire while the expired list is sorted into more than one run.

mod expired;
mod fired;
mod index;
mod keys;
mod level;
mod list;
mod rearm;
mod slab;
mod table;
mod warm;

use crate::units::UtcMicros;
use expired::Runs;
use level::{level_for, slot_for, Level};
use list::{Pos, SlotList, NIL};
use slab::Slab;
use warm::Warming;

pub use expired::SORT_STEP;
pub use rearm::Fate;
pub use slab::EntryRef;
pub use table::{TimerRecord, TimerTable, TimerView, UpsertError, Upserted, PURGE_CHECK};

/// Number of levels; 9 levels of 6 bits cover 2^54 µs, about 571 years.
pub const LEVELS: usize = 9;

/// Why an insert was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// The deadline lies beyond what the levels can hold, seen from `elapsed`.
    OutOfRange,
    /// The slab has used all of its `u32` index space.
    Full,
}

pub struct Wheel<T> {
    elapsed: u64,
    levels: Box<[Level; LEVELS]>,
    /// Expired entries not sorted into a run yet, in arrival order (`expired.rs`).
    expired: SlotList,
    /// A lower bound on the earliest deadline on the expired list and its runs, exact after
    /// a poll that fired from them (`u64::MAX` when they are empty).
    expired_min: u64,
    /// The expired list is in deadline order (pushes in order keep it so; one out of order
    /// clears it, and the polls that follow sort it into runs, a step at a time).
    expired_sorted: bool,
    /// The sorted runs of expired entries, and the heap of their heads.
    runs: Runs,
    /// Entries re-armed by the poll under way, linked when it ends.
    rearmed: SlotList,
    /// Entries on each level, and on the expired list (the last), for the occupancy gauges.
    occupancy: [u32; LEVELS + 1],
    slab: Slab<T>,
    /// Cost of moving one entry down one level, in ns: how far ahead of its start a slot is
    /// cascaded (see "Cascading ahead").
    move_ns: u64,
    /// The walks of the next cascades' lists ahead of time (`warm.rs`).
    warming: Warming,
}

/// What moving one entry down one level may cost, in ns. `cargo run --release --example
/// burst_fire` measures 2 ns when the entries sit in slab order; after churn has scattered
/// them over the slab, each move is a cache miss or two. 40 ns errs towards cascading early,
/// which costs nothing but a lead of `elapsed` over the clock. A slot of `n` entries on level
/// `l` is cascaded `n × l × MOVE_NS` ahead of its start.
pub const MOVE_NS: u64 = 40;

impl<T> Wheel<T> {
    /// A wheel whose current time is `now`, with room for `capacity` entries before the slab
    /// grows.
    pub fn new(now: UtcMicros, capacity: usize) -> Wheel<T> {
        Wheel {
            elapsed: now.0,
            levels: Box::new(std::array::from_fn(|l| Level::new(l as u32))),
            expired: SlotList::EMPTY,
            expired_min: u64::MAX,
            expired_sorted: true,
            runs: Runs::new(),
            rearmed: SlotList::EMPTY,
            occupancy: [0; LEVELS + 1],
            slab: Slab::with_capacity(capacity),
            move_ns: MOVE_NS,
            warming: Warming::new(),
        }
    }

    /// Sets the per-entry cost behind "Cascading ahead" (tests use large values, so that small
    /// populations cascade far ahead).
    #[cfg(test)]
    pub(crate) fn set_move_ns(&mut self, ns: u64) {
        self.move_ns = ns;
    }

    /// Sets how many expired entries one poll sorts at most (tests use a few, so that small
    /// lists take many steps).
    #[cfg(test)]
    pub(crate) fn set_sort_step(&mut self, step: usize) {
        self.runs.set_step(step);
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }

    /// Every slab index handed out so far is below this.
    pub(crate) fn index_bound(&self) -> usize {
        self.slab.index_bound()
    }

    /// The wheel's current time: everything due at or before it has fired.
    pub fn elapsed(&self) -> UtcMicros {
        UtcMicros(self.elapsed)
    }

    /// Heap bytes of the wheel's own structures (slab, level arrays, the expired list's
    /// runs), not the values' heap data.
    pub fn heap_bytes(&self) -> usize {
        self.slab.heap_bytes() + std::mem::size_of::<[Level; LEVELS]>() + self.runs.heap_bytes()
    }

    /// Entries on each level (0 to 8), then on the expired list: where the pending timers sit.
    pub fn occupancy(&self) -> [u32; LEVELS + 1] {
        self.occupancy
    }

    /// Whether `deadline` fits on the levels as seen from the current time.
    pub fn in_range(&self, deadline: UtcMicros) -> bool {
        deadline.0 <= self.elapsed || (level_for(self.elapsed, deadline.0) as usize) < LEVELS
    }

    /// Whether [`Wheel::insert`] of an entry due at `deadline` would succeed.
    pub fn fits(&self, deadline: UtcMicros) -> bool {
        self.in_range(deadline) && self.slab.has_room()
    }

    /// Schedules `value` at `deadline`.
    pub fn insert(&mut self, deadline: UtcMicros, value: T) -> Result<EntryRef, InsertError> {
        if !self.in_range(deadline) {
            return Err(InsertError::OutOfRange);
        }
        let index = self
            .slab
            .insert(deadline.0, value)
            .ok_or(InsertError::Full)?;
        self.link(index);
        Ok(self.slab.entry_ref(index))
    }

    /// Cancels the entry behind `entry`; `None` when it already fired or was removed.
    pub fn remove(&mut self, entry: EntryRef) -> Option<T> {
        let index = self.slab.resolve(entry)?;
        Some(self.remove_index(index))
    }

    pub(crate) fn remove_index(&mut self, index: u32) -> T {
        self.unlink(index);
        self.slab.remove(index)
    }

    /// The deadline and value behind `entry`, when it is still pending.
    pub fn get(&self, entry: EntryRef) -> Option<(UtcMicros, &T)> {
        let index = self.slab.resolve(entry)?;
        self.get_index(index)
    }

    pub(crate) fn get_index(&self, index: u32) -> Option<(UtcMicros, &T)> {
        let entry = self.slab.get(index);
        entry.value.as_ref().map(|v| (UtcMicros(entry.deadline), v))
    }

    /// A lower bound on the earliest pending deadline: exact for level-0 entries and, after a
    /// poll that fired from it, the expired list; the start of the slot for entries further
    /// out (the shard wakes there, cascades, and asks again). While a poll has stopped with
    /// expired entries left to sort, at or before that poll's `now`, so the shard polls again
    /// at once. `None` when the wheel is empty. O(levels).
    pub fn next_deadline(&self) -> Option<UtcMicros> {
        let wheel_next = self.next_slot().map(|s| s.due_at);
        match (wheel_next, self.expired_min) {
            (None, u64::MAX) => None,
            (None, e) => Some(UtcMicros(e)),
            (Some(w), e) => Some(UtcMicros(w.min(e))),
        }
    }

    /// Fires every entry due at or before `now`, in deadline order, and moves the wheel's time
    /// to `now`. `fire` gets the slab index the entry had, its deadline and its value.
    /// A `now` before `elapsed` (the clock stepped back) fires only expired-list entries that
    /// are due by `now`, and leaves `elapsed` where it is. Unbounded: it sorts the whole
    /// expired list if it must ([`Wheel::poll_at_most`] is the bounded step).
    pub fn poll(&mut self, now: UtcMicros, mut fire: impl FnMut(u32, UtcMicros, T)) {
        while self.poll_at_most(now, usize::MAX, &mut fire) {}
    }

    /// Like [`Wheel::poll`], but fires at most `budget` entries and sorts at most
    /// [`SORT_STEP`] expired ones. Returns true when it stopped with more due: the budget ran
    /// out, or expired entries are left to sort (then it fired nothing, and
    /// [`Wheel::next_deadline`] is at or before `now`). The next call resumes where this one
    /// stopped, in deadline order (the rest of a level-0 slot stays in its slot, the expired
    /// list's sorted runs stay sorted). Cascades are not counted against the budget.
    pub fn poll_at_most(
        &mut self,
        now: UtcMicros,
        budget: usize,
        mut fire: impl FnMut(u32, UtcMicros, T),
    ) -> bool {
        self.poll_keeping(now, budget, |index, deadline, value| {
            fire(index, deadline, value);
            Fate::Done
        })
    }

    /// The poll behind both: fires what is due by `now`, within `budget`, each entry settled
    /// as `fire` answers; true when more is due.
    fn poll_due(
        &mut self,
        now: u64,
        budget: usize,
        fire: &mut impl FnMut(u32, UtcMicros, T) -> Fate<T>,
    ) -> bool {
        let mut budget = budget;
        if self.expired_min <= now {
            if self.fire_expired(now, &mut budget, fire) {
                // Sorting left: the levels' entries are all due later than the expired list's.
                return true;
            }
            if budget == 0 && self.expired_min <= now {
                return true;
            }
        }
        while let Some((level, slot, start)) = self.next_slot_due(now) {
            if budget == 0 {
                return true;
            }
            // A slot above level 0 may start after `now` (cascading ahead): the wheel's time
            // moves to its start all the same, and nothing is due before it.
            self.elapsed = start;
            let (list, count) = self.levels[level].take(slot);
            if level == 0 {
                let before = budget;
                let rest = self.fire_list(list, &mut budget, fire);
                if rest.head != NIL {
                    // Out of budget inside the slot: the rest stays where it was.
                    let left = count - (before - budget) as u32;
                    self.levels[0].put_back(slot, rest, left);
                    return true;
                }
            } else {
                self.cascade_list(level, list);
            }
        }
        self.elapsed = self.elapsed.max(now);
        false
    }

    /// The earliest occupied slot of the lowest non-empty level: the wheel's next event.
    fn next_slot(&self) -> Option<NextSlot> {
        let (level, level_ref) = self
            .levels
            .iter()
            .enumerate()
            .find(|(_, l)| !l.is_empty())?;
        let (start, slot) = level_ref.next_occupied(self.elapsed)?;
        let due_at = if level == 0 {
            start
        } else {
            let lead = self.cascade_lead(level, level_ref.count(slot));
            // Not bounded below by `elapsed`: after a cascade ahead, `elapsed` is the start of
            // the slot just cascaded, in the future, and the next level's cascade must not wait
            // for it (a million timers' last step down would then begin as little as the
            // level-2 slot width, 4 ms, before their deadline).
            start.saturating_sub(lead)
        };
        Some(NextSlot {
            level,
            slot,
            start,
            due_at,
        })
    }

    /// How far ahead of its start a slot of `count` entries on `level` (above 0) is cascaded,
    /// in µs: its expected cost (see "Cascading ahead").
    fn cascade_lead(&self, level: usize, count: u32) -> u64 {
        (u64::from(count) * level as u64)
            .saturating_mul(self.move_ns)
            .div_ceil(1_000)
    }

    /// The next slot, when it is due by `now` (a level-0 slot to fire, or a slot above to
    /// cascade, possibly ahead of its start).
    fn next_slot_due(&self, now: u64) -> Option<(usize, usize, u64)> {
        let next = self.next_slot()?;
        (next.due_at <= now).then_some((next.level, next.slot, next.start))
    }

    /// Fires the entries of a level-0 slot's list until `budget` runs out; returns what is
    /// left of the list (empty when all fired).
    fn fire_list(
        &mut self,
        list: SlotList,
        budget: &mut usize,
        fire: &mut impl FnMut(u32, UtcMicros, T) -> Fate<T>,
    ) -> SlotList {
        let mut index = list.head;
        while index != NIL {
            if *budget == 0 {
                self.slab.get_mut(index).prev = NIL;
                return SlotList {
                    head: index,
                    tail: list.tail,
                };
            }
            let next = self.slab.get(index).next;
            let deadline = UtcMicros(self.slab.get(index).deadline);
            debug_assert!(
                deadline.0 == self.elapsed,
                "level-0 entry {index} due at {} fired at elapsed {}",
                deadline.0,
                self.elapsed
            );
            let value = self.slab.take(index);
            self.occupancy[0] -= 1;
            *budget -= 1;
            let fate = fire(index, deadline, value);
            self.settle(index, fate);
            index = next;
        }
        SlotList::EMPTY
    }

    /// Moves every entry of a slot of `level` down to where its deadline now belongs.
    fn cascade_list(&mut self, level: usize, list: SlotList) {
        let mut index = list.head;
        while index != NIL {
            let next = self.slab.get(index).next;
            self.occupancy[level] -= 1;
            self.link(index);
            index = next;
        }
    }

    /// Puts the (unlinked) entry `index` on the list its deadline calls for.
    fn link(&mut self, index: u32) {
        self.warming.changed();
        let when = self.slab.get(index).deadline;
        // `when == elapsed` goes to level 0, in the current slot, which `next_occupied` still
        // sees; only deadlines strictly behind the wheel's time need the expired list.
        if when < self.elapsed {
            self.push_expired(index);
            return;
        }
        let level = level_for(self.elapsed, when);
        let slot = slot_for(when, level);
        debug_assert!(
            (level as usize) < LEVELS,
            "deadline {when} out of range from elapsed {}",
            self.elapsed
        );
        let list = *self.levels[level as usize].slot(slot);
        *self.levels[level as usize].slot_mut(slot) =
            self.append(list, index, Pos::slot(level, slot));
        self.levels[level as usize].mark_occupied(slot);
        self.levels[level as usize].add_count(slot, 1);
        self.occupancy[level as usize] += 1;
    }

    /// Appends `index` to `list` and returns the new list.
    fn append(&mut self, list: SlotList, index: u32, pos: Pos) -> SlotList {
        let entry = self.slab.get_mut(index);
        entry.prev = list.tail;
        entry.next = NIL;
        entry.pos = pos;
        if list.tail == NIL {
            SlotList {
                head: index,
                tail: index,
            }
        } else {
            self.slab.get_mut(list.tail).next = index;
            SlotList {
                head: list.head,
                tail: index,
            }
        }
    }

    /// Takes the entry `index` out of whichever list holds it.
    fn unlink(&mut self, index: u32) {
        self.warming.changed();
        let (prev, next, pos) = {
            let e = self.slab.get(index);
            (e.prev, e.next, e.pos)
        };
        if pos == Pos::RUN_HEAD || pos == Pos::RUN {
            self.unlink_from_run(pos, prev, next);
            return;
        }
        if prev != NIL {
            self.slab.get_mut(prev).next = next;
        }
        if next != NIL {
            self.slab.get_mut(next).prev = prev;
        }
        debug_assert!(
            pos != Pos::FREE && pos != Pos::REARMED,
            "unlink of entry {index} at {pos:?}, on no list"
        );
        let list = if pos == Pos::EXPIRED {
            self.occupancy[LEVELS] -= 1;
            &mut self.expired
        } else {
            let (level, slot) = pos.level_and_slot();
            self.occupancy[level as usize] -= 1;
            self.levels[level as usize].add_count(slot, -1);
            self.levels[level as usize].slot_mut(slot)
        };
        if list.head == index {
            list.head = next;
        }
        if list.tail == index {
            list.tail = prev;
        }
        let now_empty = list.head == NIL;
        if pos == Pos::EXPIRED {
            self.expired_left();
        } else if now_empty {
            let (level, slot) = pos.level_and_slot();
            self.levels[level as usize].mark_empty(slot);
        }
    }
}

/// The wheel's next event: a slot to fire (level 0) or to cascade, and when it is due.
struct NextSlot {
    level: usize,
    slot: usize,
    start: u64,
    /// The slot's start on level 0; above it, the start less the cascade's expected cost.
    due_at: u64,
}

#[cfg(test)]
mod expired_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
