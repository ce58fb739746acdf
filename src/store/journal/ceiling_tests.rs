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

/// The ceiling through the journal store: fires held, faults, a restart.
mod store {
    use super::super::super::faults::Fault;
    use super::super::super::harness::{config, faulty, on_executor, prepare, reopen, Node};
    use super::super::super::Fsync;
    use super::super::AHEAD;
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
