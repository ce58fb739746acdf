//! The version lease: a ceiling, durable in the journal, above every version the shard's
//! timers may fire with.
//!
//! Versions come from the clock (`max(now µs, previous + 1)`, `TimerTable::next_version`)
//! and must only grow, across restarts too, with the clock stepped back. Recovery's version floor is the
//! highest version of every record it reads. That covers every timer whose record reached
//! the disk, but not one that fired before its schedule's commit was durable: its webhook may
//! have gone out with its version, and a crash can lose both its schedule and its fire. A new
//! schedule after the restart could then be given the same version again.
//!
//! ```text
//!   the store is handed version v:   v + AHEAD/2 > queued?  queue `lease(v + AHEAD)` first
//!   the commit carrying a lease:     durable = its ceiling
//!   fire_room():                     0 while seen > durable (no timer fires under a version
//!                                    that no durable record covers)
//!   recovery:                        floor ≥ every lease read ≥ every version that fired
//! ```
//!
//! A walk-through, AHEAD = 10 s of versions. A start recovers floor F: durable = queued = F.
//! The first schedule gets v = now ≥ F + 1: a lease L = v + 10 s is queued ahead of it, and
//! fires wait (seen = v > durable) until that one commit is durable — then every version up
//! to L is covered. Schedules go on without a lease record until a version passes L − 5 s;
//! that one queues the next lease, while the versions between L − 5 s and L still fire under
//! the durable L. A crash at any instant leaves a lease at least as high as every version
//! that fired, and the next start's versions begin above it.
//!
//! # A fire waits for its own record
//!
//! The lease bounds the versions that may fire; it does not say that a timer's own record is
//! durable. A replacement (v2 of a key whose v1 is durable) due at once must not fire before
//! v2's record is: a crash in between brings v1 back, which fires later, and the receiver sees
//! v2, then v1. So a timer fires only under a version whose record is durable
//! ([`VersionCeiling::written`]). Versions are handed out in the order their records are queued, so
//! one number says it: the highest version of the records durable so far. After each shard
//! pass that queued a new version, a mark (where the outbox's stream ends, the highest
//! version by then) is queued ([`VersionCeiling::mark`]); a commit that makes a mark's position durable
//! makes its version written, and a commit that empties the outbox makes every version written.
//! A fire of a version not written yet is held until its commit (a group commit, about a
//! millisecond with `fsync = always`).
//!
//! Cost: one 17-byte record per 5 s of version growth (5 s of clock under steady writes), and
//! a hold of fires only while versions outrun the durable lease: for the first commit after
//! a start, or after the clock jumps forward by more than AHEAD/2. Under `--fsync everysec`
//! or `never` a lease is "durable" as an acknowledged commit is: a power cut may take it,
//! with the acknowledged schedules of the same second.

use std::collections::VecDeque;

/// How far a lease reaches past the version that renewed it: 10 s of µs versions.
pub const AHEAD: u64 = 10_000_000;

#[derive(Debug, Default)]
pub struct VersionCeiling {
    /// The highest ceiling known durable: the recovered floor, or a committed lease.
    durable: u64,
    /// The highest ceiling queued.
    queued: u64,
    /// The highest version handed to the store.
    seen: u64,
    /// Leases queued and not yet durable: (the outbox stream position after the record, its
    /// ceiling), oldest first.
    pending: VecDeque<(u64, u64)>,
    /// The highest version whose record is durable (see the module doc).
    written: u64,
    /// The highest version among `marks`.
    marked: u64,
    /// (the outbox stream position at the end of a shard pass, the highest version queued by
    /// then), oldest first: one per pass that queued a new version.
    marks: VecDeque<(u64, u64)>,
}

impl VersionCeiling {
    /// After recovery: `floor` covers every version the journal ever carried.
    pub fn recovered(floor: u64) -> VersionCeiling {
        VersionCeiling {
            durable: floor,
            queued: floor,
            written: floor,
            marked: floor,
            ..VersionCeiling::default()
        }
    }

    /// A shard pass ended with the outbox's stream at `end`: the versions queued so far are
    /// written once `end` is durable.
    pub fn mark(&mut self, end: u64) {
        if self.seen > self.marked {
            self.marked = self.seen;
            self.marks.push_back((end, self.seen));
        }
    }

    /// Whether the record of `version` is durable: a timer under it may fire.
    pub fn written(&self, version: u64) -> bool {
        version <= self.written
    }

    /// The store is about to write a record of `version`: the ceiling of the lease to queue
    /// before it, if the lease must grow.
    pub fn note(&mut self, version: u64) -> Option<u64> {
        self.seen = self.seen.max(version);
        if version.saturating_add(AHEAD / 2) <= self.queued {
            return None;
        }
        self.queued = version.saturating_add(AHEAD);
        Some(self.queued)
    }

    /// The lease of `ceiling` was queued, its record ending at stream position `end`.
    pub fn queued_at(&mut self, end: u64, ceiling: u64) {
        self.pending.push_back((end, ceiling));
    }

    /// The outbox's stream is durable up to `committed`; `drained`: nothing is queued after it.
    pub fn committed(&mut self, committed: u64, drained: bool) {
        while let Some(&(end, ceiling)) = self.pending.front() {
            if end > committed {
                break;
            }
            self.durable = self.durable.max(ceiling);
            self.pending.pop_front();
        }
        while let Some(&(end, version)) = self.marks.front() {
            if end > committed {
                break;
            }
            self.written = self.written.max(version);
            self.marks.pop_front();
        }
        if drained {
            self.written = self.written.max(self.seen);
            self.marks.clear();
            self.marked = self.marked.max(self.seen);
        }
    }

    /// Whether every version handed to the store is under a durable ceiling: timers may fire.
    pub fn covers(&self) -> bool {
        self.seen <= self.durable
    }
}

#[cfg(test)]
#[path = "ceiling_tests.rs"]
mod tests;
