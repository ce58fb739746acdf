use super::super::file::{segment_name, snapshot_name};
use super::super::testlog::{schedule, segment, snapshot};
use super::super::{layout, JournalConfig, JournalStore};
use std::sync::Arc;

#[test]
fn a_damaged_newest_snapshot_stops_the_start_before_any_file_is_deleted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = JournalConfig::new(tmp.path());
    let data = layout::prepare(&cfg, 1).expect("prepare");
    let dir = data.shard_dir(0);
    snapshot(&dir, 2, &[schedule("a", 1)], 1, 1);
    segment(&dir, 2, 2, &[vec![schedule("b", 2)]]);
    snapshot(&dir, 5, &[schedule("a", 1), schedule("b", 2)], 2, 2);
    let newest = dir.join(snapshot_name(5));
    let mut bytes = std::fs::read(&newest).expect("read");
    bytes[4096 + 20] ^= 1;
    std::fs::write(&newest, bytes).expect("damage");
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("executor");
    let opened = ex.run(JournalStore::open(
        cfg,
        data,
        0,
        1,
        Arc::new(crate::metrics::ShardMetrics::default()),
    ));
    let Err(e) = opened else {
        panic!("a damaged snapshot was accepted")
    };
    assert!(e.to_string().contains(&newest.display().to_string()), "{e}");
    for f in [snapshot_name(2), segment_name(2)] {
        assert!(
            dir.join(&f).exists(),
            "{f} was deleted before the damage was found"
        );
    }
}
