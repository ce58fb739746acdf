//! The group commit's own steps: what a batch writes, when its answers go out.

use super::super::faults::Fault;
use super::super::harness::{faulty, on_executor, prepare, reopen, Node};
use super::super::JournalConfig;
use super::*;
use crate::store::Store;
use std::time::Duration;

const FAR: u64 = u64::MAX / 4;
const WAIT: Duration = Duration::from_secs(30);

/// The keys a restart on the real disk recovers.
fn recovered_keys(cfg: &JournalConfig) -> Vec<String> {
    reopen(cfg, |n| n.recovered.iter().map(|f| f.key.clone()).collect())
}

#[test]
fn a_full_disk_at_close_still_syncs_what_was_acknowledged_unsynced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut cfg, faults) = faulty(&tmp.path().join("d"), Fsync::Never);
    cfg.ack_timeout = Duration::from_millis(300);
    let data = prepare(&cfg, 1).expect("prepare");
    on_executor(async {
        let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
        let a = node.schedule("a", 1, FAR, b"");
        node.pass();
        assert!(a.acknowledged(WAIT).await, "written: acknowledged unsynced");
        faults.fail_at(faults.count(), Fault::NoSpace);
        let b = node.schedule("b", 2, FAR, b"");
        node.pass();
        assert!(!b.acknowledged(WAIT).await, "no room: never acknowledged");
        node.close().await;
    });
    faults
        .power_cut(|_| false)
        .expect("power cut after the clean stop");
    assert_eq!(recovered_keys(&cfg), ["a"]);
}

#[test]
fn a_failed_sync_refuses_every_write_at_once_and_queues_nothing_more() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (cfg, faults) = faulty(&tmp.path().join("d"), Fsync::Always);
    let data = prepare(&cfg, 1).expect("prepare");
    on_executor(async {
        let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
        let a = node.schedule("a", 1, FAR, b"");
        node.pass();
        assert!(a.acknowledged(WAIT).await);
        // The next commit's write succeeds; its fdatasync fails.
        faults.fail_at(faults.count() + 1, Fault::Eio);
        let b = node.schedule("b", 2, FAR, b"");
        node.pass();
        assert!(
            !b.acknowledged(WAIT).await,
            "a failed sync acknowledges nothing"
        );
        assert!(!node.admits(), "the failed journal refuses writes");
        node.dead("d", 1, b"");
        node.fired("a", 1);
        let c = node.cancel("a", 1);
        node.pass();
        assert!(!c.acknowledged(WAIT).await);
        assert_eq!(
            node.store.shared.outbox.borrow().len(),
            0,
            "nothing is queued that can never be written"
        );
        assert_eq!(node.store.shared.dropped.get(), 2);
        assert_eq!(
            node.store.fire_room(),
            usize::MAX,
            "timers fire from memory"
        );
        node.close().await;
    });
}

#[test]
fn records_no_caller_waits_for_hold_fires_back_at_their_bound_while_the_disk_is_full() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut cfg, faults) = faulty(&tmp.path().join("d"), Fsync::Always);
    cfg.max_buffered_fires = 8;
    let data = prepare(&cfg, 1).expect("prepare");
    on_executor(async {
        let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
        faults.fail_at(faults.count(), Fault::NoSpace);
        // Dead letters, as a webhook's outcomes make them: no caller waits, no fire.
        for i in 0..8 {
            node.dead(&format!("k{i}"), 1, b"");
        }
        node.pass();
        assert_eq!(
            node.store.fire_room(),
            0,
            "the shard must stop making such records"
        );
        faults.clear();
        node.close().await;
    });
}

#[test]
fn a_failed_sync_says_what_it_may_have_lost_no_stronger_than_the_fsync_mode() {
    let a_second_ago = Instant::now().checked_sub(Duration::from_secs(1));
    let always = lost_by_a_failed_sync(Fsync::Always, a_second_ago);
    assert!(always.contains("recovers every acknowledged"), "{always}");
    for fsync in [Fsync::EverySec, Fsync::Never] {
        let said = lost_by_a_failed_sync(fsync, a_second_ago);
        assert!(
            said.contains("MAY BE LOST") && !said.contains("recovers every"),
            "{said}"
        );
        let synced = lost_by_a_failed_sync(fsync, None);
        assert!(synced.contains("recovers every acknowledged"), "{synced}");
    }
}

/// Set in the child process of the exit test.
const EXIT_CHILD: &str = "PUNCTUAL_JOURNAL_EXIT_CHILD";

#[test]
fn with_on_failure_exit_a_failed_sync_ends_the_process_with_status_1() {
    let name = "store::journal::commit::tests::with_on_failure_exit_a_failed_sync_ends_the_process_with_status_1";
    if std::env::var_os(EXIT_CHILD).is_some() {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .try_init();
        let tmp = tempfile::tempdir().expect("tempdir");
        let (mut cfg, faults) = faulty(&tmp.path().join("d"), Fsync::Always);
        cfg.on_failure = OnFailure::Exit;
        let data = prepare(&cfg, 1).expect("prepare");
        on_executor(async {
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
            faults.fail_at(faults.count() + 1, Fault::Eio);
            let a = node.schedule("a", 1, FAR, b"");
            node.pass();
            a.acknowledged(WAIT).await;
            node.close().await;
        });
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(EXIT_CHILD, "1")
        .output()
        .expect("the child runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("fdatasync failed") && err.contains("exits now"),
        "{err}"
    );
}
