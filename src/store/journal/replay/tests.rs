//! Replay's tests: what a shard directory's records leave live, the version floor, the log's
//! continuity, and what the store queues for a death by its own firing.

use super::super::file::{segment_name, snapshot_name};
use super::super::harness::on_executor;
use super::super::shard_dir::read_shard_dir;
use super::super::testlog::*;

// Both sets, pending timers and dead letters, and records cut at every offset.

/// (key, version, dead) of every live entry of a shard directory.
pub(super) fn live(dir: &std::path::Path) -> Vec<(String, u64, bool)> {
    let (found, _) = read_shard_dir(dir, false).expect("replay");
    let mut v: Vec<_> = found
        .into_iter()
        .map(|f| (f.key, f.version, f.dead))
        .collect();
    v.sort();
    v
}

pub(super) fn one_segment(commits: &[Vec<Frame>]) -> Vec<(String, u64, bool)> {
    let tmp = tempfile::tempdir().expect("tempdir");
    segment(tmp.path(), 1, 1, commits);
    live(tmp.path())
}

pub(super) fn entry(version: u64, dead: bool) -> (String, u64, bool) {
    ("k".to_string(), version, dead)
}

/// A segment of small commits, each padded to its block, is mostly zeros: its records
/// alone do not measure the work. Indexing one of 4,096 one-record commits (16 MiB) must
/// let the shard's other tasks run many times over (about 100 times in a debug build, 18
/// in release), not once per 4,096 records (3 times).
#[test]
fn indexing_small_padded_commits_lets_the_shards_other_tasks_run() {
    use std::cell::Cell;
    use std::rc::Rc;
    let tmp = tempfile::tempdir().expect("tempdir");
    let commits: Vec<Vec<Frame>> = (0..4096u64)
        .map(|i| vec![schedule(&format!("k{i}"), i + 1)])
        .collect();
    segment(tmp.path(), 1, 1, &commits);
    let path = tmp.path().join(super::super::file::segment_name(1));
    let buf = super::Buf::map(&path).expect("map");
    let header = super::super::file::Header::decode(&buf).expect("a header");
    let src = super::Source { path, buf, header };
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor");
    let (ticks, steps) = ex.run(async move {
        let ticks = Rc::new(Cell::new(0u32));
        let done = Rc::new(Cell::new(false));
        let other = glommio::spawn_local({
            let (ticks, done) = (ticks.clone(), done.clone());
            async move {
                while !done.get() {
                    ticks.set(ticks.get() + 1);
                    crate::runtime::cooperate::yield_to_reactor().await;
                }
            }
        });
        let mut replay = super::Replay::new(None, vec![src], false, false);
        replay.index().await.expect("a clean segment");
        let steps = replay.index.len();
        done.set(true);
        other.await;
        (ticks.get(), steps)
    });
    assert_eq!(steps, 4096, "every key indexed");
    assert!(
        ticks >= 8,
        "the other task ran {ticks} times while 16 MiB were indexed"
    );
}

/// A snapshot whose every entry a later segment replaced leaves nothing live of its own, and
/// a compaction that paces on live entries alone skipped it whole in one stretch of the
/// shard's thread. `live_steps` gives one step per record looked at: the snapshot's records
/// and the index's entries, while `live` still gives each live entry once, the segment's.
#[test]
fn every_record_looked_at_is_a_step_even_one_that_is_not_live() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let n = 1000u64;
    let old: Vec<Frame> = (0..n).map(|i| schedule(&format!("k{i}"), i + 1)).collect();
    snapshot(tmp.path(), 2, &old, 1, n);
    let new: Vec<Vec<Frame>> = (0..n)
        .map(|i| vec![schedule(&format!("k{i}"), n + i + 1)])
        .collect();
    segment(tmp.path(), 2, 2, &new);
    let source = |name: String| {
        let path = tmp.path().join(name);
        let buf = super::Buf::map(&path).expect("map");
        let header = super::super::file::Header::decode(&buf).expect("a header");
        super::Source { path, buf, header }
    };
    let snap = source(snapshot_name(2));
    let seg = source(segment_name(2));
    on_executor(async move {
        let mut replay = super::Replay::new(Some(snap), vec![seg], false, false);
        replay.check_snapshot().await.expect("a clean snapshot");
        replay.index().await.expect("a clean segment");
        let live: Vec<u64> = replay.live().map(|(t, _)| t.version).collect();
        assert_eq!(live.len() as u64, n, "each key once");
        assert!(
            live.iter().all(|&v| v > n),
            "only the segment's versions are live"
        );
        let steps = replay.live_steps().count() as u64;
        assert_eq!(
            steps,
            2 * n + 1,
            "one step per snapshot record (its end record too) and per index entry"
        );
    });
}

/// `live` reads the segments' records in file order, whatever the range of segments it
/// sorts at a time, and yields exactly the entries `live_steps` yields (in the index's order):
/// versions are written rising through four segments, with replaces, cancels and dead
/// letters across them, so file order is version order.
#[test]
fn live_reads_the_newest_segments_first_each_range_in_file_order_and_yields_what_the_index_holds() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut version = 0u64;
    let mut next = || {
        version += 1;
        version
    };
    for seq in 1..=4u64 {
        let mut commits = Vec::new();
        for i in 0..300u64 {
            let key = format!("k{}", (i * 7 + seq * 13) % 500);
            let frame = match i % 10 {
                3 => cancel(&key),
                7 => dead(&key, next()),
                _ => schedule(&key, next()),
            };
            commits.push(vec![frame]);
        }
        segment(tmp.path(), seq, (seq - 1) * 300 + 1, &commits);
    }
    let sources: Vec<super::Source> = (1..=4u64)
        .map(|seq| {
            let path = tmp.path().join(segment_name(seq));
            let buf = super::Buf::map(&path).expect("map");
            let header = super::super::file::Header::decode(&buf).expect("a header");
            super::Source { path, buf, header }
        })
        .collect();
    on_executor(async move {
        let mut replay = super::Replay::new(None, sources, false, false);
        replay.index().await.expect("clean segments");
        let mut by_index: Vec<u64> = replay
            .live_steps()
            .flatten()
            .map(|(t, _)| t.version)
            .collect();
        by_index.sort_unstable();
        assert!(by_index.len() > 300, "{} live", by_index.len());
        // Versions rise through the files: in file order within a range, and each range
        // before the one it follows in the files.
        for chunk in [1, 2, 150, super::order::IN_ORDER_CHUNK] {
            let read: Vec<u64> = replay
                .live_segments_in(chunk)
                .map(|(t, _)| t.version)
                .collect();
            let ranges: Vec<&[u64]> = read.chunk_by(|a, b| a < b).collect();
            // Ranges of one segment each at 1 and 2; at 150, the two oldest segments (whose
            // keys later ones replaced most) share one; all four fit one range of 16 M.
            let expected = match chunk {
                1 | 2 => 4,
                150 => 3,
                _ => 1,
            };
            assert_eq!(ranges.len(), expected, "chunk {chunk}: ranges");
            assert!(
                ranges.windows(2).all(|w| w[1].last() < w[0].first()),
                "chunk {chunk}: a range read before a later one"
            );
            let mut sorted = read.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, by_index, "chunk {chunk}");
        }
        let mut all: Vec<u64> = replay.live().map(|(t, _)| t.version).collect();
        all.sort_unstable();
        assert_eq!(all, by_index);
    });
}

#[test]
fn a_dead_letter_and_a_pending_timer_of_one_key_coexist_in_either_order() {
    // Dead letter, then a new timer under its key.
    let got = one_segment(&[vec![dead("k", 1)], vec![schedule("k", 2)]]);
    assert_eq!(got, vec![entry(1, true), entry(2, false)]);
    // ... then the dead letter discarded: the timer stays.
    let got = one_segment(&[vec![dead("k", 1), schedule("k", 2), dead_removed("k")]]);
    assert_eq!(got, vec![entry(2, false)]);
    // ... or the new timer fired: the dead letter stays.
    let got = one_segment(&[vec![dead("k", 1), schedule("k", 2)], vec![fired("k", 2)]]);
    assert_eq!(got, vec![entry(1, true)]);
    // ... or cancelled: the dead letter stays.
    let got = one_segment(&[vec![dead("k", 1), schedule("k", 2), cancel("k")]]);
    assert_eq!(got, vec![entry(1, true)]);
    // A pending timer that dies: it leaves the pending set, the dead letter is filed.
    let got = one_segment(&[vec![schedule("k", 3)], vec![dead("k", 3)]]);
    assert_eq!(got, vec![entry(3, true)]);
}

#[test]
fn a_snapshot_keeps_both_sets_and_later_records_touch_only_their_own() {
    let tmp = tempfile::tempdir().expect("tempdir");
    snapshot(tmp.path(), 2, &[dead("k", 1), schedule("k", 2)], 1, 2);
    segment(tmp.path(), 2, 2, &[vec![dead_removed("k")]]);
    assert_eq!(live(tmp.path()), vec![entry(2, false)]);
    let tmp = tempfile::tempdir().expect("tempdir");
    snapshot(tmp.path(), 2, &[dead("k", 1), schedule("k", 2)], 1, 2);
    segment(tmp.path(), 2, 2, &[vec![fired("k", 2)]]);
    assert_eq!(live(tmp.path()), vec![entry(1, true)]);
}

/// Cuts the log of `commits` at every offset of its last commit: each cut recovers
/// `before` or `after`, never anything else.
fn cut_anywhere(
    commits: &[Vec<Frame>],
    before: &[(String, u64, bool)],
    after: &[(String, u64, bool)],
) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let whole = segment(tmp.path(), 1, 1, commits);
    assert_eq!(live(tmp.path()), after);
    let data_end = whole.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    for cut in 4096 * commits.len()..=data_end {
        let trial = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            trial.path().join(super::super::file::segment_name(1)),
            &whole[..cut],
        )
        .expect("cut copy");
        let got = live(trial.path());
        assert!(got == before || got == after, "cut at {cut}: {got:?}");
    }
}

#[test]
fn a_redrive_is_one_record_so_a_cut_anywhere_keeps_the_letter_or_the_timer() {
    cut_anywhere(
        &[vec![dead("k", 1)], vec![redrive("k", 1)]],
        &[entry(1, true)],
        &[entry(1, false)],
    );
}

#[test]
fn a_death_by_its_own_firing_is_one_record_so_a_cut_keeps_the_timer_or_the_letter() {
    cut_anywhere(
        &[vec![schedule("k", 1)], vec![dead("k", 1)]],
        &[entry(1, false)],
        &[entry(1, true)],
    );
}

#[test]
fn two_records_of_one_commit_are_never_split_by_a_cut() {
    // The other stores' way (removal, then schedule) in one commit: it counts whole.
    cut_anywhere(
        &[
            vec![dead("k", 1)],
            vec![dead_removed("k"), schedule("k", 1)],
        ],
        &[entry(1, true)],
        &[entry(1, false)],
    );
}

// The version floor.
