use super::*;

fn record(id: &str, state: &str) -> ActionRecord {
    ActionRecord {
        tenant: "t".to_string(),
        id: id.to_string(),
        prefix: "order-".to_string(),
        after: Some("order-0999".to_string()),
        matched: 2_000,
        cancelled: 1_000,
        state: state.to_string(),
        error: None,
    }
}

#[test]
fn records_read_back_oldest_first_a_running_one_as_interrupted_and_junk_removed() {
    let dir = tempfile::tempdir().expect("dir");
    let records = Records::open(dir.path()).expect("open");
    records.write(&record("1a-2", "running")).expect("write");
    records.write(&record("1a-10", "done")).expect("write");
    records.write(&record("9-1", "done")).expect("write");
    records.write(&record("1a-3", "running")).expect("write");
    records.remove("1a-3");
    records.remove("1a-3");
    let junk = dir.path().join("actions").join("1a-4.json.tmp");
    std::fs::write(&junk, b"{\"tenant\"").expect("junk");
    let back = records.recover();
    let ids: Vec<&str> = back.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["9-1", "1a-2", "1a-10"]);
    assert_eq!(back[1], record("1a-2", "interrupted"));
    assert!(!junk.exists(), "a file that is not a record is removed");
    // The interrupted state is written back: a second restart reads the same.
    assert_eq!(records.recover(), back);
}

#[test]
fn an_id_orders_by_start_then_number() {
    assert!(order("1a-10") > order("1a-9"));
    assert!(order("1b-1") > order("1a-99"));
    assert_eq!(order("junk"), (0, 0));
}
