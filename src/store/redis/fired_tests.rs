use super::*;
use crate::timer::Firing;
use crate::units::{UtcMicros, UtcNanos};

#[test]
fn stream_key_has_a_literal_hash_tag() {
    assert_eq!(stream_key("shop"), "punctual:fired:{shop}");
    let mut a = redis::cmd("X");
    a.arg(StreamName("shop"));
    let mut b = redis::cmd("X");
    b.arg(stream_key("shop"));
    assert_eq!(a.get_packed_command(), b.get_packed_command());
}

#[test]
fn xadd_names_every_field_and_trims_approximately() {
    let t = FiredTimer {
        shard: 0,
        tenant: "shop",
        key: "o1",
        version: 7,
        deadline: UtcMicros(10),
        fired_at: UtcNanos(12_999),
        meta: b"",
        payload: b"",
        firing: Firing::Own,
    };
    let packed = String::from_utf8(xadd(&t, 1000).get_packed_command()).unwrap_or_default();
    for part in [
        "XADD",
        "punctual:fired:{shop}",
        "MAXLEN",
        "~",
        "1000",
        "key",
        "o1",
        "fired_at_us",
        "12",
        "null",
    ] {
        assert!(packed.contains(part), "{part} missing in {packed:?}");
    }
}
