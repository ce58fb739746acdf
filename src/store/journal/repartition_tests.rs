use super::super::file::segment_name;
use super::super::layout::{prepare, read_shard_dir};
use super::super::testlog::{schedule, segment};
use super::*;

#[test]
fn a_lossy_re_partition_keeps_the_old_generation_aside() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let mut cfg = JournalConfig::new(root);
    drop(prepare(&cfg, 1).expect("first start"));
    let old = generation_dir(root, 1).join("shard-0");
    let commits = [
        vec![schedule("a", 1)],
        vec![schedule("b", 2)],
        vec![schedule("c", 3)],
    ];
    let mut bytes = segment(&old, 1, 1, &commits);
    bytes[2 * 4096 + 20] ^= 1; // the middle commit
    std::fs::write(old.join(segment_name(1)), &bytes).expect("damage");
    cfg.skip_corrupt = true;
    let data = prepare(&cfg, 2).expect("re-partitions, skipping the damage");
    assert_eq!(data.generation, 2);
    let mut keys: Vec<String> = (0..2)
        .flat_map(|s| {
            let (found, _) =
                read_shard_dir(&data.shard_dir(s), false).expect("the new generation reads");
            found.into_iter().map(|f| f.key)
        })
        .collect();
    keys.sort();
    assert_eq!(keys, ["a", "c"], "what was not damaged moved");
    drop(data);
    let kept = root
        .join("kept-gen-1")
        .join("shard-0")
        .join(segment_name(1));
    assert_eq!(
        std::fs::read(&kept).ok(),
        Some(bytes),
        "the old generation, with the damaged commit, is kept aside"
    );
    assert!(!generation_dir(root, 1).exists());
    // Later starts leave it alone.
    drop(prepare(&cfg, 2).expect("restart"));
    assert!(kept.exists());
}
