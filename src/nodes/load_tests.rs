use super::*;
use crate::store::redis::layout::{encode_record, field};

fn bulk(b: impl Into<Vec<u8>>) -> Value {
    Value::BulkString(b.into())
}

#[test]
fn a_batch_shares_one_page_among_its_open_scans_and_asks_for_eight_at_least() {
    assert_eq!(
        count_each(512, 2),
        512,
        "one partition: a page of each hash"
    );
    assert_eq!(
        count_each(512, 128),
        8,
        "64 partitions: 1,024 records in all"
    );
    assert_eq!(
        count_each(512, 1),
        1_024,
        "a large hash left alone: the whole budget"
    );
    assert_eq!(count_each(512, 1_000), MIN_COUNT);
    assert_eq!(count_each(0, 0), MIN_COUNT, "no panic on zeros");
}

#[test]
fn a_version_floor_reads_as_redis_answers_it_and_none_is_zero() {
    assert_eq!(floor(&Value::Nil), Some(0));
    assert_eq!(
        floor(&bulk("1765000000000123")),
        Some(1_765_000_000_000_123)
    );
    assert_eq!(floor(&bulk("1.765e+15")), Some(1_765_000_000_000_000));
    assert_eq!(floor(&Value::Double(40.0)), Some(40));
    assert_eq!(floor(&bulk("nope")), None);
    assert_eq!(floor(&bulk("-1")), None);
    assert_eq!(floor(&Value::Int(3)), None);
}

#[test]
fn a_record_parses_only_in_its_own_partition() {
    let p = partition_of("shop", "order-1");
    let rec = encode_record(7, 1_000, b"", b"{}");
    let f = field("shop", "order-1");
    let s = stored(p, &bulk(f.clone()), &bulk(rec.clone())).expect("parses");
    assert_eq!(
        (s.tenant.as_str(), s.key.as_str(), s.version, s.deadline),
        ("shop", "order-1", 7, UtcMicros(1_000))
    );
    assert_eq!(s.payload, b"{}");
    assert_eq!(stored(p + 1, &bulk(f.clone()), &bulk(rec)), None);
    assert_eq!(stored(p, &bulk(f), &bulk("not a record")), None);
    assert_eq!(stored(p, &Value::Nil, &Value::Nil), None);
}
