//! The expired list: entries linked with a deadline already behind the wheel's time, fired
//! by the clock in deadline order, ties in the order they arrived.
//!
//! # Shape
//!
//! - **Arrivals** (`Wheel::expired`, `Pos::EXPIRED`): a list in arrival order. While every
//!   push comes in deadline order it is sorted as it stands (`Wheel::expired_sorted`), and
//!   fires from its head.
//! - **Runs** (`Pos::RUN_HEAD`, `Pos::RUN`): lists sorted by (deadline, arrival), made
//!   from the arrivals' front [`SORT_STEP`] entries at a time. A run's head has no
//!   predecessor, so its `prev` holds the run's id: a cancel of the head finds its run in
//!   O(1). Every run holds earlier arrivals than the runs made after it, and than the
//!   arrivals still on the list.
//! - **Heads** (`Runs::heads`): a binary heap of (deadline, run's sequence number, id), one
//!   per run. A cancel that moves a run's head on leaves its key as it was: a lower bound,
//!   raised when it reaches the top.
//!
//! # A walk-through
//!
//! A million overdue timers arrive in scrambled order. The first poll that may fire takes
//! the 16,384 at the arrivals' front, sorts them by (deadline, place in the list), relinks
//! them as run 0, and returns "more due" without firing: another arrival, not sorted yet,
//! may be due earlier than all of run 0. `next_deadline()` still reports the old lower
//! bound, at or before that poll's `now`, so the shard polls again at once; it does not park.
//! Sixty polls later the arrivals are down to 576; the sixty-second poll sorts those into
//! run 61 and fires: each fire takes the earliest head among the runs (and the arrivals,
//! were any to come in order), the heap's top, and the run's next entry becomes its head.
//!
//! # Invariants
//!
//! - Nothing fires while arrivals wait to be sorted: one of them may be the earliest.
//! - The heap's top, once checked against its run, is the earliest run head; ties go to the
//!   earlier run, and between runs and arrivals to the runs, so ties keep arrival order.
//! - Every entry on the list and the runs has a deadline below `elapsed` and at or above
//!   `Wheel::expired_min`.
//!
//! # Cost model
//!
//! Push, cancel: O(1). A poll sorts at most [`SORT_STEP`] entries (O(S log S) plus a walk
//! of S entries scattered over the slab). A fire from the runs costs O(log runs), a fire
//! from the arrivals O(1). Memory: the sort's scratch, 16 bytes per entry of one step, and
//! per run 16 bytes, a 24-byte heap key and 4 bytes of free id, all reused once grown.

use super::list::{Pos, NIL};
use super::{Fate, Wheel, LEVELS};
use crate::units::UtcMicros;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Most entries one poll sorts. A million scattered over the slab took 75–137 ms in one
/// sort, 75–137 ns an entry, most of it the walk and the relinking; a step of 16,384 is then
/// about a millisecond (`cargo run --release --example overdue_sort` measures 36–39 ms for
/// the 61 steps of a million, and 0.9–1.4 ms for the longest poll, on a 2-core VM). That is
/// a few of a shared thread's 200 µs slices, far from the tens of milliseconds this bound
/// removes; a smaller step would add steps, each with its fixed cost (a heap push, a look at
/// the arrivals, a poll that fires nothing), for no gain the shard could see.
pub const SORT_STEP: usize = 16_384;

/// One sorted run: its head (`NIL` once empty, its id then free) and its sequence number,
/// which orders runs by arrival.
#[derive(Clone, Copy, Debug)]
struct Run {
    head: u32,
    seq: u64,
}

/// The runs the arrivals were sorted into, and the heap of their heads.
pub(super) struct Runs {
    runs: Vec<Run>,
    /// Ids of emptied runs, given to the next runs made.
    free: Vec<u32>,
    /// (a lower bound on the run's head deadline, its `seq`, its id). An entry whose run is
    /// empty, or whose id went to a later run, is dropped when it reaches the top.
    heads: BinaryHeap<Reverse<(u64, u64, u32)>>,
    next_seq: u64,
    /// Entries one poll sorts at most ([`SORT_STEP`]; tests lower it).
    step: usize,
    /// (deadline, place in the step, index), reused by every step.
    scratch: Vec<(u64, u32, u32)>,
    /// Entries sorted since the wheel was made, for tests that bound a poll's sorting.
    #[cfg(test)]
    pub sorted: usize,
}

impl Runs {
    pub fn new() -> Runs {
        Runs {
            runs: Vec::new(),
            free: Vec::new(),
            heads: BinaryHeap::new(),
            next_seq: 0,
            step: SORT_STEP,
            scratch: Vec::new(),
            #[cfg(test)]
            sorted: 0,
        }
    }

    #[cfg(test)]
    pub fn set_step(&mut self, step: usize) {
        self.step = step;
    }

    #[cfg(test)]
    pub fn scratch_capacity(&self) -> usize {
        self.scratch.capacity()
    }

    pub fn heap_bytes(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<Run>()
            + self.free.capacity() * std::mem::size_of::<u32>()
            + self.heads.capacity() * std::mem::size_of::<Reverse<(u64, u64, u32)>>()
            + self.scratch.capacity() * std::mem::size_of::<(u64, u32, u32)>()
    }

    /// Forgets every run: the expired list is empty. O(1): nothing here needs dropping.
    fn clear(&mut self) {
        self.runs.clear();
        self.free.clear();
        self.heads.clear();
        self.next_seq = 0;
    }

    /// Run `r`'s head was fired or cancelled; `next` follows it (`NIL`: the run is empty).
    fn advance(&mut self, r: u32, next: u32) {
        if let Some(run) = self.runs.get_mut(r as usize) {
            run.head = next;
            if next == NIL {
                self.free.push(r);
            }
        }
    }
}

impl<T> Wheel<T> {
    /// Appends the (unlinked) entry `index` to the arrivals.
    pub(super) fn push_expired(&mut self, index: u32) {
        let deadline = self.slab.get(index).deadline;
        let tail = self.expired.tail;
        if tail != NIL && self.slab.get(tail).deadline > deadline {
            self.expired_sorted = false;
        }
        self.expired = self.append(self.expired, index, Pos::EXPIRED);
        self.expired_min = self.expired_min.min(deadline);
        self.occupancy[LEVELS] += 1;
    }

    /// Fires the expired entries due by `now`, earliest first, until `budget` runs out; or,
    /// while arrivals wait to be sorted, sorts one step of them. True when it stopped with
    /// arrivals still to sort (and so fired nothing): the caller reports more due.
    pub(super) fn fire_expired(
        &mut self,
        now: u64,
        budget: &mut usize,
        fire: &mut impl FnMut(u32, UtcMicros, T) -> Fate<T>,
    ) -> bool {
        if *budget == 0 {
            // Nothing may fire (the store has no room for fires): sorting now would leave the
            // shard's passes no shorter while it holds its fires back.
            return false;
        }
        if !self.expired_sorted {
            self.sort_step();
            if !self.expired_sorted {
                return true;
            }
        }
        while *budget > 0 {
            let run = self.run_top();
            let list = self.list_head_deadline();
            // Ties go to the runs: they hold the earlier arrivals.
            let (deadline, index) = match (run, list) {
                (Some((d, r)), l) if l.is_none_or(|l| d <= l) => {
                    if d > now {
                        break;
                    }
                    (d, self.take_run_head(r))
                }
                (_, Some(l)) => {
                    if l > now {
                        break;
                    }
                    (l, self.take_list_head())
                }
                (_, None) => break,
            };
            let value = self.slab.take(index);
            self.occupancy[LEVELS] -= 1;
            *budget -= 1;
            let fate = fire(index, UtcMicros(deadline), value);
            self.settle(index, fate);
        }
        let run = self.run_top().map_or(u64::MAX, |(d, _)| d);
        self.expired_min = run.min(self.list_head_deadline().unwrap_or(u64::MAX));
        if self.occupancy[LEVELS] == 0 {
            self.runs.clear();
        }
        false
    }

    /// Sorts up to a step of arrivals from the list's front into a new run. The list is
    /// sorted (empty) once the step took its last entry.
    fn sort_step(&mut self) {
        let mut scratch = std::mem::take(&mut self.runs.scratch);
        scratch.clear();
        let step = self.runs.step.max(1);
        let mut index = self.expired.head;
        let mut place = 0u32;
        while index != NIL && scratch.len() < step {
            let entry = self.slab.get(index);
            scratch.push((entry.deadline, place, index));
            place = place.wrapping_add(1);
            index = entry.next;
        }
        self.list_starts_at(index);
        if index == NIL {
            self.expired_sorted = true;
        }
        // Unstable, with the place in the list breaking ties: no buffer of half the step, as
        // a stable sort's, and ties keep their arrival order all the same.
        scratch.sort_unstable_by_key(|&(deadline, place, _)| (deadline, place));
        #[cfg(test)]
        {
            self.runs.sorted += scratch.len();
        }
        self.make_run(&scratch);
        self.runs.scratch = scratch;
    }

    /// Links the sorted `(deadline, place, index)` entries as a new run.
    fn make_run(&mut self, sorted: &[(u64, u32, u32)]) {
        let Some(&(first, _, head)) = sorted.first() else {
            return;
        };
        let seq = self.runs.next_seq;
        self.runs.next_seq += 1;
        let run = Run { head, seq };
        // Non-empty runs are fewer than the slab's entries, so an id is always below `NIL`.
        let r = match self.runs.free.pop() {
            Some(r) => {
                self.runs.runs[r as usize] = run;
                r
            }
            None => {
                self.runs.runs.push(run);
                (self.runs.runs.len() - 1) as u32
            }
        };
        let mut prev = r;
        for (i, &(_, _, index)) in sorted.iter().enumerate() {
            let next = sorted.get(i + 1).map_or(NIL, |&(_, _, n)| n);
            let entry = self.slab.get_mut(index);
            entry.prev = prev;
            entry.next = next;
            entry.pos = if i == 0 { Pos::RUN_HEAD } else { Pos::RUN };
            prev = index;
        }
        self.runs.heads.push(Reverse((first, seq, r)));
    }

    /// The earliest run head, as (deadline, run id). Drops the heap's entries of emptied
    /// runs and raises keys left low by a cancelled head, until the top is exact: then it is
    /// the earliest, since every other key is at or below its run's head deadline.
    fn run_top(&mut self) -> Option<(u64, u32)> {
        loop {
            let &Reverse((key, seq, r)) = self.runs.heads.peek()?;
            let run = self.runs.runs.get(r as usize).copied();
            let head = match run {
                Some(run) if run.seq == seq && run.head != NIL => run.head,
                _ => {
                    self.runs.heads.pop();
                    continue;
                }
            };
            let deadline = self.slab.get(head).deadline;
            if deadline == key {
                return Some((deadline, r));
            }
            debug_assert!(
                deadline > key,
                "run {r} head {head} due {deadline} before its key {key}"
            );
            if let Some(mut top) = self.runs.heads.peek_mut() {
                *top = Reverse((deadline, seq, r));
            }
        }
    }

    /// Takes the head of run `r` (the heap's exact top) off the run; its successor becomes the
    /// head, and the top's key follows it.
    fn take_run_head(&mut self, r: u32) -> u32 {
        let index = self.runs.runs[r as usize].head;
        let next = self.slab.get(index).next;
        self.runs.advance(r, next);
        if next == NIL {
            self.runs.heads.pop();
        } else {
            let entry = self.slab.get_mut(next);
            entry.prev = r;
            entry.pos = Pos::RUN_HEAD;
            let key = (entry.deadline, self.runs.runs[r as usize].seq, r);
            if let Some(mut top) = self.runs.heads.peek_mut() {
                *top = Reverse(key);
            }
        }
        index
    }

    /// Takes the first arrival off the list.
    fn take_list_head(&mut self) -> u32 {
        let index = self.expired.head;
        self.list_starts_at(self.slab.get(index).next);
        index
    }

    /// Cuts the arrivals before `index` off the list (`NIL`: all of them).
    fn list_starts_at(&mut self, index: u32) {
        self.expired.head = index;
        if index == NIL {
            self.expired.tail = NIL;
        } else {
            self.slab.get_mut(index).prev = NIL;
        }
    }

    /// The first arrival's deadline, if any.
    fn list_head_deadline(&self) -> Option<u64> {
        (self.expired.head != NIL).then(|| self.slab.get(self.expired.head).deadline)
    }

    /// Takes an entry at `pos` on a run, between `prev` and `next`, off its run. A head's
    /// `prev` is its run's id.
    pub(super) fn unlink_from_run(&mut self, pos: Pos, prev: u32, next: u32) {
        if pos == Pos::RUN_HEAD {
            self.runs.advance(prev, next);
            if next != NIL {
                let entry = self.slab.get_mut(next);
                entry.prev = prev;
                entry.pos = Pos::RUN_HEAD;
            }
        } else {
            self.slab.get_mut(prev).next = next;
            if next != NIL {
                self.slab.get_mut(next).prev = prev;
            }
        }
        self.occupancy[LEVELS] -= 1;
        self.expired_left();
    }

    /// After an entry left the list or a run: forgets the runs once nothing is left.
    /// `expired_min` otherwise stays a lower bound, made exact by the next fire.
    pub(super) fn expired_left(&mut self) {
        if self.expired.head == NIL {
            self.expired_sorted = true;
        }
        if self.occupancy[LEVELS] == 0 {
            self.expired_min = u64::MAX;
            self.runs.clear();
        }
    }

    /// Whether arrivals wait to be sorted before the expired list may fire.
    #[cfg(test)]
    pub(crate) fn sorting_left(&self) -> bool {
        !self.expired_sorted
    }
}
