//! The shard's timer table: the wheel plus an index from (tenant, key) to the wheel entry,
//! upsert semantics, and the version counter.
//!
//! A timer's tenant, key and payload travel as one [`PackedTimer`] allocation (`crate::timer`),
//! made by the caller's thread and moved (not copied) into the wheel. The index (`index.rs`)
//! holds slab indices, 4 bytes a bucket; it stores no key bytes and no hash of its own, and
//! compares against the bytes in the slab entry.
//!
//! Versions: each table hands out `max(now in µs, previous + 1)`, so a version is positive,
//! increases strictly on every (re)schedule, and keeps increasing across restarts (the clock
//! has moved on) and across recovery ([`TimerTable::observe_version`]).
//!
//! A fired timer that its caller keeps pending (a webhook's next step) is re-armed in one
//! call, [`TimerTable::poll_keeping`]: the caller answers the fire with [`Fate::Rearm`] and a
//! timer of the same identity, and the timer stays in its slab entry, under its version and
//! its index entry; only its deadline and its bytes change. No lookup, no removal, no insert.
//!
//! The key order (`keys.rs`) keeps each tenant's slab indices sorted by key, for listings by
//! key prefix ([`TimerTable::walk_keys`]): every insert places its timer there, every way out
//! (a cancel, a fire that is done, a purge) takes it out, and a re-arm leaves it be.
//!
//! Memory per pending timer: one slab entry (40 bytes: deadline, links, generation, position,
//! version and the packed timer's one pointer) plus one index bucket (8 bytes and a control byte, 7/16 to
//! 7/8 full), besides the packed bytes themselves; one bit per slab entry, to sweep the
//! index after a poll that fired many; and 8 to 12 bytes in the key order.

use super::fired::{FiredBits, FiredList};
use super::index::Index;
use super::keys::KeyIndex;
use super::{Fate, InsertError, Wheel};
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::hash::BuildHasher;

/// What the wheel holds per timer.
pub struct TimerRecord {
    pub version: u64,
    pub timer: PackedTimer,
}

/// A pending timer, as `get` shows it.
#[derive(Debug, Clone, Copy)]
pub struct TimerView<'a> {
    pub deadline: UtcMicros,
    pub version: u64,
    pub timer: &'a PackedTimer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upserted {
    pub version: u64,
    /// A pending timer under the same key was replaced.
    pub replaced: bool,
    /// Where the timer now sits (see [`TimerTable::timer_at`]).
    pub slot: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpsertError {
    /// The table already holds `capacity` timers and this one would be new.
    Capacity,
    OutOfRange,
}

pub struct TimerTable {
    wheel: Wheel<TimerRecord>,
    index: Index,
    /// Each tenant's slab indices by key.
    keys: KeyIndex,
    /// Seeded at random per table (foldhash's `RandomState`: a per-process random global seed
    /// and a per-instance one). Keys are chosen by clients: with a fixed seed, a client who
    /// knows it could send keys that all land in one probe sequence and turn every insert and
    /// cancel into a linear scan. foldhash is fast, not cryptographic: its random seed defeats
    /// precomputed collisions, not an attacker who can observe timings at length.
    hasher: foldhash::fast::RandomState,
    last_version: u64,
    capacity: usize,
    /// (hash, slab index) of the timers one `poll` fired, for their index removal one by one;
    /// reused. Holds at most `record_max()` during a poll, in chunks (`fired.rs`); a little
    /// room is kept afterwards.
    fired: FiredList,
    /// One bit per slab index, set for the timers the current `poll` fired: a poll that fires
    /// more than `fired` may hold sweeps the index once with it. All clear between polls.
    fired_bits: FiredBits,
    /// `RECORD_MIN`, lowered by tests to reach the sweep with small tables.
    record_min: usize,
}

/// The index hash of the timer in slab slot `i`, for a part that grows.
fn slot_hash(wheel: &Wheel<TimerRecord>, hasher: &foldhash::fast::RandomState, i: u32) -> u64 {
    wheel
        .get_index(i)
        .map_or(0, |(_, r)| hasher.hash_one(r.timer.identity()))
}

/// Slab entries a sliced purge looks at between two asks whether to stop
/// ([`TimerTable::purge_from`]): a few nanoseconds each, a few microseconds between asks, so
/// the ask (a clock read, about 20 ns) costs about 1%.
pub const PURGE_CHECK: u32 = 256;

/// A poll removes its fired timers' index entries one by one (a random probe each, about
/// 100 ns at a million timers) up to `pending / SWEEP_RATIO` of them; past that, one
/// sequential sweep of the index's buckets (a bit test each, a few ns) is cheaper.
const SWEEP_RATIO: usize = 32;

/// Fired timers a poll removes one by one at least, however small the index.
const RECORD_MIN: usize = 4096;

impl TimerTable {
    /// An empty table that will hold at most `capacity` timers. Nothing is reserved for them:
    /// the slab and the index grow in small steps as timers arrive.
    pub fn new(now: UtcMicros, capacity: usize) -> TimerTable {
        TimerTable {
            wheel: Wheel::new(now, 0),
            index: Index::new(capacity),
            keys: KeyIndex::default(),
            hasher: foldhash::fast::RandomState::default(),
            last_version: 0,
            capacity,
            fired: FiredList::default(),
            fired_bits: FiredBits::default(),
            record_min: RECORD_MIN,
        }
    }

    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn next_deadline(&self) -> Option<UtcMicros> {
        self.wheel.next_deadline()
    }

    /// Walks up to `steps` entries of the next cascades' lists ahead of time (`Wheel::warm`);
    /// how many it walked, 0 when nothing is left to warm.
    pub fn warm(&mut self, now: UtcMicros, steps: usize) -> usize {
        self.wheel.warm(now.0, steps)
    }

    /// The latest deadline a timer re-armed by the next poll may take (`Wheel::horizon`).
    pub fn horizon(&self) -> UtcMicros {
        self.wheel.horizon()
    }

    /// See `Wheel::set_move_ns`.
    #[cfg(test)]
    pub(crate) fn set_move_ns(&mut self, ns: u64) {
        self.wheel.set_move_ns(ns);
    }

    /// See `Wheel::set_sort_step`.
    #[cfg(test)]
    pub(crate) fn set_sort_step(&mut self, step: usize) {
        self.wheel.set_sort_step(step);
    }

    /// Lowers the number of fired timers a poll removes from the index one by one before it
    /// sweeps instead.
    #[cfg(test)]
    pub(crate) fn set_record_min(&mut self, n: usize) {
        self.record_min = n;
    }

    /// Entries in the (tenant, key) index: equal to `len()` between polls.
    #[cfg(test)]
    pub(crate) fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Entries in the key order: equal to `len()` between polls.
    #[cfg(test)]
    pub(crate) fn keys_len(&self) -> usize {
        self.keys.len()
    }

    /// Lowers the most slab indices a run of the key order holds (`keys.rs`).
    #[cfg(test)]
    pub(crate) fn set_key_run_max(&mut self, n: usize) {
        self.keys.set_run_max(n);
    }

    /// Pending timers on each level of the wheel, then on its expired list.
    pub fn occupancy(&self) -> [u32; super::LEVELS + 1] {
        self.wheel.occupancy()
    }

    pub fn elapsed(&self) -> UtcMicros {
        self.wheel.elapsed()
    }

    /// Heap bytes of the engine's own structures: wheel slab, levels and index buckets. The
    /// packed tenant/key/payload allocations are not included.
    pub fn heap_bytes(&self) -> usize {
        self.wheel.heap_bytes()
            + self.index.allocation_size()
            + self.fired.heap_bytes()
            + self.fired_bits.heap_bytes()
            + self.keys.heap_bytes()
    }

    fn hash(&self, identity: &[u8]) -> u64 {
        self.hasher.hash_one(identity)
    }

    #[cfg(test)]
    pub(crate) fn hash_of(&self, identity: &[u8]) -> u64 {
        self.hash(identity)
    }

    /// Makes room in the index for `additional` more timers (up to the capacity) in one step:
    /// for a recovery that knows how many it loads, so that its inserts grow no part. Loading
    /// ten million timers into a table grown part by part spent 16% of the time rehashing
    /// (`cargo bench --bench pending -- --timers 10000000`, profiled).
    pub fn reserve(&mut self, additional: usize) {
        let additional = additional.min(self.capacity.saturating_sub(self.len()));
        let (wheel, hasher) = (&self.wheel, &self.hasher);
        self.index
            .reserve(additional, |i| slot_hash(wheel, hasher, i));
    }

    /// The slab index of the pending timer `identity`, whose hash is `hash`.
    fn find(&self, hash: u64, identity: &[u8]) -> Option<u32> {
        let wheel = &self.wheel;
        self.index.find(hash, |i| is_timer(wheel, i, identity))
    }

    /// The next version: `max(now, previous + 1)`.
    pub fn next_version(&mut self, now: UtcMicros) -> u64 {
        self.last_version = now.0.max(self.last_version + 1);
        self.last_version
    }

    /// Raises the version counter past `version` (a version recovered from the store).
    pub fn observe_version(&mut self, version: u64) {
        self.last_version = self.last_version.max(version);
    }

    /// Schedules `timer` at `deadline`, replacing a pending timer under the same key.
    pub fn upsert(
        &mut self,
        timer: PackedTimer,
        deadline: UtcMicros,
        now: UtcMicros,
    ) -> Result<Upserted, UpsertError> {
        let version = self.next_version(now);
        self.insert_with_version(timer, deadline, version)
    }

    /// Like `upsert`, with the version given (recovery). Raises the counter past it.
    pub fn insert_with_version(
        &mut self,
        timer: PackedTimer,
        deadline: UtcMicros,
        version: u64,
    ) -> Result<Upserted, UpsertError> {
        self.insert_as(timer, deadline, version, true)
    }

    /// Like `insert_with_version`, past the capacity too: a paged timer loaded into the
    /// wheel, which the capacity counted while it was paged (`page`).
    pub fn insert_loaded(
        &mut self,
        timer: PackedTimer,
        deadline: UtcMicros,
        version: u64,
    ) -> Result<Upserted, UpsertError> {
        self.insert_as(timer, deadline, version, false)
    }

    /// Whether a timer due at `deadline` fits on the wheel.
    pub fn in_range(&self, deadline: UtcMicros) -> bool {
        self.wheel.in_range(deadline)
    }

    /// Whether [`TimerTable::insert_loaded`] of a timer due at `deadline` would succeed: its
    /// deadline in range, and room in the slab.
    pub fn fits(&self, deadline: UtcMicros) -> bool {
        self.wheel.fits(deadline)
    }

    fn insert_as(
        &mut self,
        timer: PackedTimer,
        deadline: UtcMicros,
        version: u64,
        bounded: bool,
    ) -> Result<Upserted, UpsertError> {
        if !self.wheel.in_range(deadline) {
            return Err(UpsertError::OutOfRange);
        }
        let hash = self.hash(timer.identity());
        let existing = self.find(hash, timer.identity());
        if bounded && existing.is_none() && self.len() >= self.capacity {
            return Err(UpsertError::Capacity);
        }
        self.observe_version(version);
        if let Some(old) = existing {
            // Replace: the old entry leaves the wheel (its slab slot is free, so the insert
            // below cannot fail), and its index bucket and its place in the key order are
            // pointed at the new entry.
            self.wheel.remove_index(old);
        }
        let index = match self.wheel.insert(deadline, TimerRecord { version, timer }) {
            Ok(handle) => handle.index,
            Err(e) => {
                if let Some(old) = existing {
                    self.index.remove(hash, |i| i == old);
                    self.keys.remove(old);
                }
                return Err(match e {
                    InsertError::OutOfRange => UpsertError::OutOfRange,
                    InsertError::Full => UpsertError::Capacity,
                });
            }
        };
        // Grown here, as the slab grows, one chunk at a time, never in a poll: a burst's
        // first fire must not wait for fresh pages (`bitmap.rs`).
        self.fired_bits.cover(index);
        if !existing.is_some_and(|old| self.index.replace(hash, old, index)) {
            let (wheel, hasher) = (&self.wheel, &self.hasher);
            self.index
                .insert(hash, index, |i| slot_hash(wheel, hasher, i));
        }
        match existing {
            Some(old) if old == index => {}
            Some(old) => self.keys.replace(old, index),
            None => {
                let (wheel, keys) = (&self.wheel, &mut self.keys);
                if let Some((_, r)) = wheel.get_index(index) {
                    let (tenant, key) = (r.timer.tenant(), r.timer.key().as_bytes());
                    keys.insert(tenant, key, index, |i| key_in(wheel, i));
                }
            }
        }
        Ok(Upserted {
            version,
            replaced: existing.is_some(),
            slot: index,
        })
    }

    /// Cancels the pending timer `identity`; its deadline and version, or `None`.
    pub fn cancel(&mut self, identity: &[u8]) -> Option<(UtcMicros, TimerRecord)> {
        let hash = self.hash(identity);
        let wheel = &self.wheel;
        let index = self.index.remove(hash, |i| is_timer(wheel, i, identity))?;
        let deadline = self.wheel.get_index(index).map(|(d, _)| d)?;
        self.keys.remove(index);
        Some((deadline, self.wheel.remove_index(index)))
    }

    /// Removes every pending timer that `pick` picks, handing each to `removed` with its
    /// deadline; how many. One look at every slab entry handed out so far (O(slab), a few
    /// nanoseconds an entry), so it is for rare events (a partition dropped or reloaded), never
    /// for the firing path; a caller purges many groups of timers in one call, or in slices
    /// with [`TimerTable::purge_from`].
    pub fn purge(
        &mut self,
        pick: impl FnMut(&PackedTimer) -> bool,
        removed: impl FnMut(UtcMicros, TimerRecord),
    ) -> usize {
        let mut n = 0;
        self.purge_from(0, self.slab_bound(), pick, removed, &mut n, || false);
        n
    }

    /// Slab entries handed out so far: a purge looks at the indexes below it.
    pub fn slab_bound(&self) -> u32 {
        u32::try_from(self.wheel.index_bound()).unwrap_or(u32::MAX)
    }

    /// [`TimerTable::purge`] of the slab entries from index `from` up to `bound`, adding how
    /// many it removed to `n`, and stopping once `stop` answers true (asked every
    /// [`PURGE_CHECK`] entries): the index to go on from, or `None` once `bound` is reached.
    /// Indexes are stable, so a purge may go on later from where it stopped; an entry
    /// inserted meanwhile below that index is not looked at (the caller keeps the picked
    /// timers out of the table until the purge ends).
    pub fn purge_from(
        &mut self,
        from: u32,
        bound: u32,
        mut pick: impl FnMut(&PackedTimer) -> bool,
        mut removed: impl FnMut(UtcMicros, TimerRecord),
        n: &mut usize,
        mut stop: impl FnMut() -> bool,
    ) -> Option<u32> {
        let bound = bound.min(self.slab_bound());
        for i in from..bound {
            if i > from && (i - from) % PURGE_CHECK == 0 && stop() {
                return Some(i);
            }
            let hash = match self.wheel.get_index(i) {
                Some((_, r)) if pick(&r.timer) => self.hash(r.timer.identity()),
                _ => continue,
            };
            self.index.remove(hash, |j| j == i);
            self.keys.remove(i);
            if let Some((deadline, _)) = self.wheel.get_index(i) {
                removed(deadline, self.wheel.remove_index(i));
                *n += 1;
            }
        }
        None
    }

    /// The pending timer in `slot` (from [`Upserted::slot`]), without a lookup by key.
    pub fn timer_at(&self, slot: u32) -> Option<&PackedTimer> {
        self.wheel.get_index(slot).map(|(_, r)| &r.timer)
    }

    /// Visits the pending timers of `tenant` by key, from the first whose key is `start` or
    /// comes after it (strictly after when `after`), for as long as `visit` answers true. A
    /// walk reads only the timers it visits and the search to the first (`keys.rs`).
    pub fn walk_keys(
        &self,
        tenant: &str,
        start: &str,
        after: bool,
        mut visit: impl FnMut(TimerView<'_>) -> bool,
    ) {
        let wheel = &self.wheel;
        let key_of = |i| key_in(wheel, i);
        self.keys
            .walk(tenant, start.as_bytes(), after, key_of, |i| {
                match wheel.get_index(i) {
                    Some((deadline, record)) => visit(TimerView {
                        deadline,
                        version: record.version,
                        timer: &record.timer,
                    }),
                    None => true,
                }
            });
    }

    pub fn get(&self, identity: &[u8]) -> Option<TimerView<'_>> {
        let index = self.find(self.hash(identity), identity)?;
        let (deadline, record) = self.wheel.get_index(index)?;
        Some(TimerView {
            deadline,
            version: record.version,
            timer: &record.timer,
        })
    }

    /// Fires every timer due at or before `now`, in deadline order; unbounded, as
    /// `Wheel::poll`.
    pub fn poll(&mut self, now: UtcMicros, mut fire: impl FnMut(UtcMicros, TimerRecord)) {
        while self.poll_at_most(now, usize::MAX, &mut fire) {}
    }

    /// Fires at most `budget` timers due at or before `now`, in deadline order, sorting at
    /// most a step of overdue ones; true when more are due (call again to go on: see
    /// `Wheel::poll_at_most`).
    pub fn poll_at_most(
        &mut self,
        now: UtcMicros,
        budget: usize,
        mut fire: impl FnMut(UtcMicros, TimerRecord),
    ) -> bool {
        self.poll_records(now, budget, |deadline, record| {
            fire(deadline, record);
            Fate::Done
        })
    }

    /// Like [`TimerTable::poll_at_most`], with each timer's fate decided at its fire. `fire`
    /// sees the fired timer and answers [`Fate::Done`] (it leaves the table) or
    /// [`Fate::Rearm`] with its deadline, at most [`TimerTable::horizon`] as read before the
    /// poll, and the timer it becomes: the same tenant and key, new bytes otherwise (made with
    /// `PackedTimer::with_new_meta`). A re-armed timer keeps its version, its slab entry and
    /// its index entry, and is due again from the end of the poll. Either way the fired
    /// timer's bytes go to `spent`, for the caller to free when it likes.
    pub fn poll_keeping(
        &mut self,
        now: UtcMicros,
        budget: usize,
        mut fire: impl FnMut(UtcMicros, &TimerRecord) -> Fate<PackedTimer>,
        mut spent: impl FnMut(PackedTimer),
    ) -> bool {
        self.poll_records(now, budget, |deadline, record| {
            match fire(deadline, &record) {
                Fate::Done => {
                    spent(record.timer);
                    Fate::Done
                }
                Fate::Rearm(at, timer) => {
                    debug_assert!(
                        timer.identity() == record.timer.identity(),
                        "{:?} re-armed as another timer, {:?}",
                        record.timer,
                        timer
                    );
                    let version = record.version;
                    spent(record.timer);
                    Fate::Rearm(at, TimerRecord { version, timer })
                }
            }
        })
    }

    /// The poll behind both: fired timers that leave have their index entries removed after
    /// the wheel's poll; re-armed ones keep theirs.
    fn poll_records(
        &mut self,
        now: UtcMicros,
        budget: usize,
        mut fire: impl FnMut(UtcMicros, TimerRecord) -> Fate<TimerRecord>,
    ) -> bool {
        // Index entries of fired timers are removed after the wheel's poll, not during it, so
        // that the fires of a burst are not spaced out by index probes. Until then the index
        // holds stale slab indices; nothing reads it while the wheel polls, and no slab entry
        // is reused before the removal (the handler cannot insert, and a re-armed timer keeps
        // its own entry and its index entry).
        // The pending count stands for the sweep's length (buckets are 8/7 to 16/7 of it):
        // counting the parts' buckets would cost more than a small poll.
        let record_max = (self.len() / SWEEP_RATIO).max(self.record_min);
        debug_assert!(self.fired_bits.covered() >= self.wheel.index_bound());
        let fired = &mut self.fired;
        let mut fired_count = 0usize;
        let (hasher, bits) = (&self.hasher, &mut self.fired_bits);
        let more = self
            .wheel
            .poll_keeping(now, budget, |slab_index, deadline, record| {
                // Hashed before the fire, which may hand the timer on.
                let hash =
                    (fired_count < record_max).then(|| hasher.hash_one(record.timer.identity()));
                let fate = fire(deadline, record);
                if matches!(fate, Fate::Done) {
                    fired_count += 1;
                    bits.set(slab_index);
                    if let Some(hash) = hash {
                        fired.push((hash, slab_index));
                    }
                }
                fate
            });
        if fired_count > record_max {
            let bits = &self.fired_bits;
            self.index.retain(|i| !bits.get(i));
            self.keys.retain(|i| !bits.get(i));
            self.fired_bits.clear_all();
        } else {
            for &(hash, slab_index) in self.fired.iter() {
                self.index.remove(hash, |i| i == slab_index);
                self.keys.remove(slab_index);
                self.fired_bits.clear(slab_index);
            }
        }
        self.fired.clear();
        more
    }
}

/// The key of the pending timer in slab entry `i` (the key order compares through it).
fn key_in(wheel: &Wheel<TimerRecord>, i: u32) -> &[u8] {
    wheel
        .get_index(i)
        .map_or(&[][..], |(_, r)| r.timer.key().as_bytes())
}

/// Whether slab entry `i` is the pending timer `identity` (index buckets compare through it).
fn is_timer(wheel: &Wheel<TimerRecord>, i: u32, identity: &[u8]) -> bool {
    wheel
        .get_index(i)
        .is_some_and(|(_, r)| r.timer.identity() == identity)
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
