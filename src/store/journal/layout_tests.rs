use super::super::current::Current;
use super::super::file::snapshot_name;
use super::super::generations::generation_dir;
use super::super::testlog::{schedule, segment, snapshot};
use super::*;

fn cfg(root: &Path) -> JournalConfig {
    JournalConfig::new(root)
}

fn shard_dir(root: &Path, g: u64, s: usize) -> PathBuf {
    let d = generation_dir(root, g).join(format!("shard-{s}"));
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

fn set_current(root: &Path, generation: u64, shards: usize) {
    current::write(&Disk::default(), root, Current { generation, shards }).expect("CURRENT");
}

fn refused(root: &Path) -> String {
    match prepare(&cfg(root), 1) {
        Err(e) => e.to_string(),
        Ok(d) => panic!("started on generation {}", d.generation),
    }
}

#[test]
fn a_fresh_directory_and_a_first_start_cut_before_current_start_empty() {
    let tmp = tempfile::tempdir().expect("tempdir");
    assert_eq!(prepare(&cfg(tmp.path()), 2).expect("fresh").generation, 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    shard_dir(tmp.path(), 1, 0); // created, then the crash: no CURRENT, no file
    assert_eq!(prepare(&cfg(tmp.path()), 1).expect("restart").generation, 1);
}

#[test]
fn journal_files_without_a_valid_current_refuse_the_start_and_stay() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let seg = shard_dir(root, 4, 0).join(super::super::file::segment_name(1));
    segment(seg.parent().expect("dir"), 1, 1, &[vec![schedule("k", 1)]]);
    let why = refused(root);
    for part in [
        "CURRENT",
        "is missing",
        "gen-4",
        "punctual journal check",
        "printf",
    ] {
        assert!(why.contains(part), "{part:?} not in: {why}");
    }
    assert!(why.contains(&root.display().to_string()), "{why}");
    assert!(seg.exists(), "the start deleted a file");
    std::fs::write(root.join("CURRENT"), "generation 4\nshards 1\n").expect("write");
    let why = refused(root);
    assert!(why.contains("not valid"), "{why}");
    assert!(seg.exists());
    // The command the message gives puts it right.
    set_current(root, 4, 1);
    assert_eq!(prepare(&cfg(root), 1).expect("restored").generation, 4);
    assert!(seg.exists());
}

#[test]
fn a_current_of_another_format_is_refused_without_a_fix_that_would_misread_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    snapshot(&shard_dir(root, 1, 0), 1, &[schedule("k", 1)], 0, 1);
    std::fs::write(
        root.join("CURRENT"),
        "punctual journal format 1\ngeneration 1\nshards 1\n",
    )
    .expect("write");
    let why = refused(root);
    assert!(
        why.contains("journal format 1") && why.contains("not migrated"),
        "{why}"
    );
    assert!(!why.contains("printf"), "{why}");
    assert!(generation_dir(root, 1)
        .join("shard-0")
        .join(snapshot_name(1))
        .exists());
}

#[test]
fn current_naming_a_missing_generation_or_shard_refuses_and_deletes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let old = shard_dir(root, 1, 0);
    snapshot(&old, 1, &[schedule("k", 1)], 0, 1);
    set_current(root, 2, 1);
    let why = refused(root);
    assert!(why.contains("gen-2, which is not there"), "{why}");
    assert!(old.join(snapshot_name(1)).exists());
    shard_dir(root, 2, 1);
    set_current(root, 2, 2);
    let why = refused(root);
    assert!(why.contains("shard-0 is not there"), "{why}");
    assert!(old.join(snapshot_name(1)).exists());
}

#[test]
fn only_generations_older_than_a_complete_current_one_are_deleted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    for g in [1, 2, 3] {
        snapshot(&shard_dir(root, g, 0), 1, &[schedule("k", g)], 0, g);
    }
    set_current(root, 2, 1);
    assert_eq!(prepare(&cfg(root), 1).expect("start").generation, 2);
    assert!(
        !generation_dir(root, 1).exists(),
        "the old generation stays"
    );
    assert!(generation_dir(root, 2).exists());
    assert!(generation_dir(root, 3).exists(), "a newer one was deleted");
}

/// Segment 1 of shard 0 of 1 as its creation leaves it before any commit: the header, then
/// the reserved size in zeros.
fn empty_segment(dir: &Path) -> PathBuf {
    let path = dir.join(super::super::file::segment_name(1));
    let mut b = super::super::file::Header {
        kind: super::super::file::Kind::Segment,
        block: 4096,
        shard: 0,
        shards: 1,
        seq: 1,
    }
    .encode();
    b.resize(64 << 10, 0);
    std::fs::write(&path, b).expect("write");
    path
}

#[test]
fn a_first_start_cut_short_after_creating_an_empty_segment_starts_empty() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let seg = empty_segment(&shard_dir(root, 1, 0));
    let data = prepare(&cfg(root), 1).expect("nothing was ever acknowledged: it starts");
    assert_eq!(data.generation, 1);
    assert!(!seg.exists(), "the empty segment is removed");
    assert_eq!(
        current::read(root).expect("read"),
        Ok(Some(Current {
            generation: 1,
            shards: 1
        }))
    );
}

#[test]
fn a_directory_without_current_is_refused_when_anything_but_empty_segments_is_there() {
    // A record after the header, a snapshot beside the empty segment, empty segments in
    // two generations: each could hold what was acknowledged.
    let with_record = |root: &Path| {
        let dir = shard_dir(root, 1, 0);
        segment(&dir, 1, 1, &[vec![schedule("k", 1)]]);
    };
    let with_snapshot = |root: &Path| {
        let dir = shard_dir(root, 1, 0);
        empty_segment(&dir);
        snapshot(&dir, 1, &[], 0, 1);
    };
    let in_two_generations = |root: &Path| {
        empty_segment(&shard_dir(root, 1, 0));
        empty_segment(&shard_dir(root, 2, 0));
    };
    let cases: [&dyn Fn(&Path); 3] = [&with_record, &with_snapshot, &in_two_generations];
    for make in cases {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        make(root);
        let why = refused(root);
        assert!(why.contains("is missing"), "{why}");
        assert!(!root.join("CURRENT").exists());
        let seg = generation_dir(root, 1)
            .join("shard-0")
            .join(super::super::file::segment_name(1));
        assert!(seg.exists(), "the refused start deleted a file");
    }
}
