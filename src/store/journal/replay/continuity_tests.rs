//! Replay's continuity: the version floor, a lost or misplaced segment, short commits and
//! torn tails, headers and snapshot ends, each a refused start or a kept timer, never a
//! resurrected one.

use super::super::file::{segment_name, snapshot_name, BLOCK};
use super::super::harness::{config, on_executor, prepare, Node, TENANT};
use super::super::record::put_batch;
use super::super::shard_dir::{check_dir, read_shard_dir, Owner};
use super::super::testlog::*;
use super::tests::live;
use crate::store::{DeadLetter, Store};
use crate::timer::PackedTimer;
use crate::timer::{FiredTimer, Firing};
use crate::units::{UtcMicros, UtcNanos};
use std::path::Path;
use std::time::Duration;

#[test]
fn the_version_floor_counts_cancelled_fired_and_compacted_versions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    segment(
        tmp.path(),
        1,
        1,
        &[
            vec![schedule("a", 50), cancel("a"), schedule("b", 40)],
            vec![fired("b", 40)],
        ],
    );
    let (found, report) = read_shard_dir(tmp.path(), false).expect("replay");
    assert!(found.is_empty());
    assert_eq!(report.version_floor, 50);
    // A snapshot's end record holds the floor of the records it replaced.
    let tmp = tempfile::tempdir().expect("tempdir");
    snapshot(tmp.path(), 2, &[schedule("c", 7)], 1, 70);
    segment(tmp.path(), 2, 2, &[vec![cancel("c")]]);
    let (found, report) = read_shard_dir(tmp.path(), false).expect("replay");
    assert!(found.is_empty());
    assert_eq!(report.version_floor, 70);
}

/// A power cut under `everysec` left a hole in the newest segment's unsynced tail, before a
/// commit that reached the disk: that commit is dropped, but the timers it fired may have
/// gone out under their versions, so the floor counts them and none is handed out again.
#[test]
fn the_version_floor_counts_the_commits_a_hole_in_an_unsynced_tail_dropped() {
    use super::super::file::{Header, Kind, UNSYNCED};
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut b = Header {
        kind: Kind::Segment,
        block: BLOCK as u32,
        shard: 0,
        shards: 1,
        seq: 1,
    }
    .encode_flagged(UNSYNCED);
    for (seq, commit) in [
        (1, vec![schedule("a", 40)]),
        (2, vec![fired("b", 70), fired("c", 90)]),
    ] {
        put_batch(&mut b, seq, commit.len() as u32);
        for f in commit {
            b.extend_from_slice(&f);
        }
        b.resize(b.len().div_ceil(BLOCK) * BLOCK, 0);
    }
    b[BLOCK..2 * BLOCK].fill(0);
    std::fs::write(tmp.path().join(segment_name(1)), &b).expect("write");
    let (found, report) = read_shard_dir(tmp.path(), false).expect("replay");
    assert!(found.is_empty() && report.dropped_after_tear);
    assert_eq!(report.version_floor, 90);
}

// The log's continuity: segments, batches, headers and the snapshot's end.

fn refused(dir: &Path) -> String {
    match read_shard_dir(dir, false) {
        Err(e) => e,
        Ok((found, _)) => panic!("accepted: {} entries", found.len()),
    }
}

#[test]
fn a_lost_middle_segment_is_corruption_never_a_resurrected_timer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    segment(d, 1, 1, &[vec![schedule("a", 1)]]);
    segment(d, 2, 2, &[vec![cancel("a")]]);
    segment(d, 3, 3, &[vec![schedule("b", 2)]]);
    std::fs::remove_file(d.join(segment_name(2))).expect("lose it");
    let why = refused(d);
    assert!(why.contains(&segment_name(3)), "{why}");
    assert!(why.contains("segments 2 to 2 are missing"), "{why}");
    // Renumbered to hide the gap, the batch sequence still shows it.
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    segment(d, 1, 1, &[vec![schedule("a", 1)]]);
    segment(d, 2, 3, &[vec![schedule("b", 2)]]);
    let why = refused(d);
    assert!(
        why.contains(&segment_name(2)) && why.contains("offset 4096"),
        "{why}"
    );
    assert!(why.contains("batch 3 where batch 2 belongs"), "{why}");
}

#[test]
fn the_first_segment_must_follow_the_snapshot() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    snapshot(d, 3, &[schedule("a", 1)], 5, 1);
    segment(d, 4, 6, &[vec![cancel("a")]]);
    let why = refused(d);
    assert!(why.contains("segment 4 where segment 3 belongs"), "{why}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    snapshot(d, 3, &[schedule("a", 1)], 5, 1);
    segment(d, 3, 9, &[vec![cancel("a")]]);
    let why = refused(d);
    assert!(why.contains("batch 9 where batch 6 belongs"), "{why}");
    // Without a snapshot the log starts at segment 1.
    let tmp = tempfile::tempdir().expect("tempdir");
    segment(tmp.path(), 2, 1, &[vec![schedule("a", 1)]]);
    assert!(refused(tmp.path()).contains("segments 1 to 1 are missing"));
    // And in order it all reads.
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    snapshot(d, 3, &[schedule("a", 1)], 5, 1);
    segment(d, 3, 6, &[vec![cancel("a")], vec![schedule("b", 2)]]);
    segment(d, 4, 8, &[vec![schedule("c", 3)]]);
    let (found, _) = read_shard_dir(d, false).expect("continuous");
    assert_eq!(found.len(), 2);
}

/// A segment whose first commit says it holds 3 records, with only 2 before the zeros,
/// then (when `later`) a second, whole commit on the next block.
fn short_commit(dir: &Path, later: bool) {
    let mut b = super::super::file::Header {
        kind: super::super::file::Kind::Segment,
        block: BLOCK as u32,
        shard: 0,
        shards: 1,
        seq: 1,
    }
    .encode();
    put_batch(&mut b, 1, 3);
    b.extend_from_slice(&schedule("a", 1));
    b.extend_from_slice(&schedule("b", 2));
    b.resize(2 * BLOCK, 0);
    if later {
        put_batch(&mut b, 2, 1);
        b.extend_from_slice(&schedule("c", 3));
        b.resize(3 * BLOCK, 0);
    }
    std::fs::write(dir.join(segment_name(1)), b).expect("write");
}

#[test]
fn zeros_while_a_commit_still_owes_records_are_corruption_or_the_torn_tail() {
    let tmp = tempfile::tempdir().expect("tempdir");
    short_commit(tmp.path(), true);
    let why = refused(tmp.path());
    assert!(why.contains("still owes 1 records"), "{why}");
    // As the last commit of the last segment it is the commit a crash cut short: it
    // counts not at all (none of its records is recovered), and nothing else is lost.
    let tmp = tempfile::tempdir().expect("tempdir");
    short_commit(tmp.path(), false);
    let (found, report) = read_shard_dir(tmp.path(), false).expect("torn tail");
    assert!(found.is_empty(), "{} records of a torn commit", found.len());
    assert_eq!(report.torn, 1);
    assert_eq!(report.truncate.map(|t| t.1), Some(BLOCK as u64));
}

#[test]
fn a_header_must_match_its_name_and_its_shard() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    segment(d, 1, 1, &[vec![schedule("a", 1)]]);
    std::fs::rename(d.join(segment_name(1)), d.join(segment_name(2))).expect("rename");
    let why = refused(d);
    assert!(why.contains("its header says seq 1, its name 2"), "{why}");
    let tmp = tempfile::tempdir().expect("tempdir");
    segment(tmp.path(), 1, 1, &[vec![schedule("a", 1)]]);
    let owner = Owner {
        shard: 1,
        shards: 2,
    };
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("executor");
    let checked = ex.run(check_dir(tmp.path(), false, Some(owner)));
    let Err(why) = checked else {
        panic!("another shard's file accepted")
    };
    assert!(why.contains("shard 0 of 1"), "{why}");
}

#[test]
fn a_snapshot_ends_at_its_end_record() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    snapshot(d, 2, &[schedule("a", 1)], 1, 1);
    let path = d.join(snapshot_name(2));
    let mut b = std::fs::read(&path).expect("read");
    b.extend_from_slice(&[0xAB; 700]); // what a writer's last buffer may leave after it
    std::fs::write(&path, b).expect("write");
    let (found, _) = read_shard_dir(d, false).expect("the end record is terminal");
    assert_eq!(found.len(), 1);
}

// What the store queues.

#[test]
fn a_death_by_its_own_firing_queues_one_record_even_one_record_per_commit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.max_batch_records = 1;
    on_executor(async {
        let data = prepare(&cfg, 1).expect("prepare");
        let mut node = Node::open(&cfg, data, 0, 1).await.expect("open");
        let ack = node.schedule("k", 7, 1, b"");
        node.pass();
        assert!(ack.acknowledged(Duration::from_secs(20)).await);
        let letter = PackedTimer::with_meta(TENANT, "k", b"dead", b"p").expect("fits");
        let fired = FiredTimer {
            shard: 0,
            tenant: TENANT,
            key: "k",
            version: 7,
            deadline: UtcMicros(1),
            fired_at: UtcNanos(1_000),
            meta: &[],
            payload: b"p",
            firing: Firing::Own,
        };
        let before = node.store.shared.outbox.borrow().len();
        node.store.fired_dead(
            &fired,
            &DeadLetter {
                timer: &letter,
                version: 7,
                fire_at: UtcMicros(1),
                attempts: 1,
                last_status: Some(400),
                last_error: None,
                callback: "http://127.0.0.1:9/",
            },
        );
        let queued = node.store.shared.outbox.borrow().len() - before;
        assert_eq!(queued, 1, "the fire and the dead letter are one record");
        node.pass();
        node.close().await;
        let data = prepare(&cfg, 1).expect("prepare");
        let node = Node::open(&cfg, data, 0, 1).await.expect("reopen");
        let got: Vec<_> = node
            .recovered
            .iter()
            .map(|f| (f.key.as_str(), f.version, f.meta.as_slice()))
            .collect();
        assert_eq!(got, vec![("k", 7, &b"dead"[..])]);
    });
}

// Sequence numbers at their largest.

/// Sequence numbers come from disk: a CRC-valid file may hold any u64, and the largest
/// must be reported as a break in the log, not overflow (a panic in a debug build).
#[test]
fn the_largest_sequence_numbers_on_disk_are_refused_without_overflow() {
    let tmp = tempfile::tempdir().expect("tempdir");
    snapshot(tmp.path(), 1, &[schedule("c", 7)], u64::MAX, 70);
    segment(tmp.path(), 1, 1, &[vec![schedule("d", 80)]]);
    let refused = read_shard_dir(tmp.path(), false);
    assert!(refused.is_err(), "a batch after u64::MAX cannot follow it");

    let tmp = tempfile::tempdir().expect("tempdir");
    segment(tmp.path(), 1, 1, &[vec![schedule("a", 5)]]);
    segment(tmp.path(), u64::MAX, 2, &[vec![schedule("b", 6)]]);
    assert!(
        read_shard_dir(tmp.path(), false).is_err(),
        "a gap up to u64::MAX"
    );
}

/// Two keys whose identities share the 32 hash bits an index entry keeps (found by search).
fn keys_sharing_the_kept_hash_bits() -> (String, String) {
    let replay = super::Replay::new(None, Vec::new(), false, false);
    let identity = |k: &str| [&[1, k.len() as u8][..], b"t", k.as_bytes()].concat();
    let mut seen = std::collections::HashMap::new();
    for i in 0..2_000_000u32 {
        let k = format!("k{i}");
        let h = super::hash_of(&replay.hasher, (false, &identity(&k)));
        if let Some(other) = seen.insert(h, k.clone()) {
            return (other, k);
        }
    }
    unreachable!("two million keys over 32 bits always share a hash")
}

/// The index keeps 32 bits of each identity's hash and rehashes by them alone, so keys that
/// share those bits must still be told apart by their identities: in the segments' index, and
/// when a snapshot's entry is looked up in it.
#[test]
fn identities_that_share_the_kept_hash_bits_stay_apart() {
    let (a, b) = keys_sharing_the_kept_hash_bits();
    assert_ne!(a, b);
    let fillers: Vec<Frame> = (0..300)
        .map(|i| schedule(&format!("f{i}"), 100 + i))
        .collect();
    let mut expect: Vec<(String, u64, bool)> = (0..300)
        .map(|i| (format!("f{i}"), 100 + i, false))
        .collect();

    // In the segments alone: a's cancel leaves b, through the index's growth (the fillers).
    let tmp = tempfile::tempdir().expect("tempdir");
    segment(
        tmp.path(),
        1,
        1,
        &[
            vec![schedule(&a, 1), schedule(&b, 2)],
            fillers.clone(),
            vec![cancel(&a)],
        ],
    );
    let mut want = expect.clone();
    want.push((b.clone(), 2, false));
    want.sort();
    assert_eq!(live(tmp.path()), want);

    // A snapshot holding both, a segment replacing a and cancelling b.
    let tmp = tempfile::tempdir().expect("tempdir");
    snapshot(tmp.path(), 1, &[schedule(&a, 1), schedule(&b, 2)], 0, 2);
    segment(
        tmp.path(),
        1,
        1,
        &[fillers, vec![schedule(&a, 3)], vec![cancel(&b)]],
    );
    expect.push((a, 3, false));
    expect.sort();
    assert_eq!(live(tmp.path()), expect);
}

/// What the module doc counts per index entry: the hash bits, the file and the offset, with
/// the set and the liveness in the file's top bits.
#[test]
fn an_index_entry_is_twelve_bytes_and_keeps_its_flags_apart() {
    assert_eq!(std::mem::size_of::<super::Loc>(), 12);
    for (dead, live) in [(false, false), (false, true), (true, false), (true, true)] {
        let l = super::Loc::new(7, super::MAX_SEGMENTS - 1, u32::MAX as usize, dead, live);
        assert_eq!(
            (l.src(), l.off, l.dead(), l.live()),
            (super::MAX_SEGMENTS - 1, u32::MAX, dead, live)
        );
    }
}

/// An index entry keeps a record's offset in 32 bits: a file over 4 GiB in a segment's name
/// (the journal writes at most 1 GiB) is refused, not read with its offsets cut short.
#[test]
fn a_segment_too_big_for_the_index_offsets_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    segment(d, 1, 1, &[vec![schedule("a", 1)]]);
    let path = d.join(segment_name(1));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    f.set_len(u64::from(u32::MAX) + 1).expect("a sparse tail");
    let e = refused(d);
    assert!(e.contains("more than a segment can hold"), "{e}");
    assert!(e.contains(&segment_name(1)), "names the file: {e}");
}
