//! Power cuts that lose one unsynced write, each in turn. Writeback has no order: under
//! `--fsync never` or `everysec` any unsynced block may be missing after a cut while later
//! ones reached the disk. The matrix's `power cut, hole` loses only the oldest unsynced
//! write; here every one of a new segment's life is lost alone, which is how a new segment
//! whose header were not synced before its first commit would show: a later commit on disk
//! behind a header that is not, a segment the start refuses.

use super::super::faults::Fault;
use super::super::harness::{faulty, on_executor, prepare, Node};
use super::super::Fsync;
use super::{recover, FAR};
use std::time::Duration;

/// Opens a fresh journal under `never` (its first segment created at the open), acknowledges
/// two commits, dies, and cuts the power losing the unsynced write `lose` alone (`None`:
/// none); the keys recovered, or why the start failed, and the unsynced writes there were.
fn cut_losing(lose: Option<usize>) -> (Result<Vec<String>, String>, usize) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("d");
    let (cfg, faults) = faulty(&dir, Fsync::Never);
    let data = prepare(&cfg, 1).expect("prepare");
    on_executor(async {
        let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
        for (key, version) in [("a", 7), ("b", 8)] {
            let answer = node.schedule(key, version, FAR, b"");
            node.pass();
            assert!(answer.acknowledged(Duration::from_secs(30)).await);
        }
        // The process dies here: the close below changes nothing on disk.
        faults.fail_at(faults.count(), Fault::Die);
        node.close().await;
    });
    let unsynced = faults.unsynced_writes();
    faults.power_cut(|i| Some(i) != lose).expect("power cut");
    let found = recover(&dir, Fsync::Never, (1, b"payload".len()))
        .map(|f| f[0].0.pending.keys().cloned().collect());
    (found, unsynced)
}

#[test]
fn a_new_segment_is_whole_on_disk_before_its_first_commit_whatever_write_a_power_cut_loses() {
    let (all, unsynced) = cut_losing(None);
    assert_eq!(all, Ok(vec!["a".to_string(), "b".to_string()]));
    assert!(
        unsynced >= 2,
        "both commits unsynced under never: {unsynced}"
    );
    for lose in 0..unsynced {
        let (found, _) = cut_losing(Some(lose));
        let found = found.unwrap_or_else(|why| {
            panic!("losing unsynced write {lose} of {unsynced} refused the start: {why}")
        });
        let prefixes: [&[&str]; 3] = [&[], &["a"], &["a", "b"]];
        assert!(
            prefixes.iter().any(|p| found == *p),
            "losing unsynced write {lose} of {unsynced} recovered {found:?}, no prefix of a, b"
        );
    }
}
