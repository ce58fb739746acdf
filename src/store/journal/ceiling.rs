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
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_queued_ahead_and_covers_only_once_its_commit_is_durable() {
        let mut l = VersionCeiling::recovered(100);
        assert!(l.covers(), "recovered versions are under the floor");
        assert_eq!(l.note(50), Some(50 + AHEAD), "the first write renews");
        l.queued_at(10, 50 + AHEAD);
        assert!(l.covers(), "50 is under the recovered floor");
        let v = 1_000;
        assert_eq!(l.note(v), None, "under half the lease ahead: no renewal");
        assert!(!l.covers(), "v is past the durable floor: fires wait");
        l.committed(9, false);
        assert!(!l.covers(), "the lease's record is not durable yet");
        l.committed(10, false);
        assert!(l.covers());
        let near = 50 + AHEAD / 2 + 1;
        assert_eq!(l.note(near), Some(near + AHEAD), "past half: renewed");
        l.queued_at(20, near + AHEAD);
        assert!(l.covers(), "still under the durable lease");
        assert_eq!(l.note(u64::MAX), Some(u64::MAX), "saturates");
        assert!(!l.covers());
    }

    /// A version is written once a mark at or after its record is durable, or the outbox
    /// drained; never before.
    #[test]
    fn a_version_is_written_once_its_pass_mark_or_a_drained_outbox_is_durable() {
        let mut l = VersionCeiling::recovered(100);
        assert!(l.written(100) && !l.written(101), "the floor is written");
        l.note(200);
        l.mark(50);
        l.note(300);
        l.mark(50);
        l.note(400);
        assert!(!l.written(200));
        l.committed(49, false);
        assert!(!l.written(200), "its pass's mark is not durable");
        l.committed(50, false);
        assert!(
            l.written(300) && !l.written(301),
            "the mark carries the pass's highest"
        );
        l.mark(80);
        l.committed(70, false);
        assert!(!l.written(400));
        l.note(500);
        l.committed(70, true);
        assert!(l.written(500), "an outbox drained holds nothing unwritten");
        l.committed(80, false);
        assert!(l.written(500), "a late mark never lowers it");
    }
}

#[cfg(test)]
mod store_tests {
    use super::super::faults::Fault;
    use super::super::harness::{config, faulty, on_executor, prepare, reopen, Node};
    use super::super::Fsync;
    use super::AHEAD;
    use crate::store::Store;
    use std::time::Duration;

    const FAR: u64 = u64::MAX / 4;
    const WAIT: Duration = Duration::from_secs(30);

    #[test]
    fn a_version_past_the_durable_lease_holds_fires_until_its_lease_is_durable() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = config(tmp.path());
        let data = prepare(&cfg, 1).expect("prepare");
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            assert!(node.store.fire_room() > 0);
            let a = node.schedule("a", 1_000, FAR, b"");
            assert_eq!(
                node.store.fire_room(),
                0,
                "1,000 is above every durable lease"
            );
            node.pass();
            assert!(a.acknowledged(WAIT).await);
            assert!(node.store.fire_room() > 0, "its lease is durable");
            let far_ahead = 1_000 + AHEAD + 1;
            let b = node.schedule("b", far_ahead, FAR, b"");
            assert_eq!(node.store.fire_room(), 0, "past the lease: held again");
            node.pass();
            assert!(b.acknowledged(WAIT).await);
            assert!(node.store.fire_room() > 0);
            node.close().await;
        });
    }

    /// A failed sync abandons the lease queued with the records it carried: the journal then
    /// fires from memory (what was written), as it says, and does not hold every fire until a
    /// restart for a lease that can never be durable.
    #[test]
    fn a_journal_that_failed_with_a_lease_pending_keeps_firing_what_was_written() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (cfg, faults) = faulty(&tmp.path().join("d"), Fsync::Always);
        let data = prepare(&cfg, 1).expect("prepare");
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            let a = node.schedule("a", 1_000, FAR, b"");
            node.pass();
            assert!(a.acknowledged(WAIT).await);
            // The next commit carries a new lease; its write succeeds, its fdatasync fails.
            faults.fail_at(faults.count() + 1, Fault::Eio);
            let b = node.schedule("b", 1_000 + AHEAD + 1, FAR, b"");
            node.pass();
            assert!(!b.acknowledged(WAIT).await);
            assert!(node.store.fire_room() > 0, "fires from memory");
            assert!(node.store.may_fire(1_000), "a was written");
            assert!(!node.store.may_fire(1_000 + AHEAD + 1), "b never was");
            node.close().await;
        });
    }

    #[test]
    fn a_timer_fired_before_its_commit_was_durable_stays_under_the_floor_after_a_crash() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (cfg, faults) = faulty(&tmp.path().join("d"), Fsync::Always);
        let data = prepare(&cfg, 1).expect("prepare");
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            let a = node.schedule("a", 1_000, FAR, b"");
            node.pass();
            assert!(a.acknowledged(WAIT).await);
            // b is due at once and fires while its schedule waits for its commit; the process
            // dies before that commit reaches the disk, so both its records are lost.
            let b = node.schedule("b", 2_000, 5, b"");
            if node.store.fire_room() > 0 {
                node.fired("b", 2_000);
            }
            faults.fail_at(faults.count(), Fault::Die);
            node.pass();
            assert!(!b.acknowledged(WAIT).await);
            node.close().await;
        });
        let floor = reopen(&cfg, |n| n.store.version_floor());
        assert!(
            floor >= 2_000,
            "b may have fired with version 2,000; the floor is {floor}"
        );
    }
}
