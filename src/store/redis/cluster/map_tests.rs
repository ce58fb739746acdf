use super::*;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn node(ip: &str, port: i64, role: &str, health: &str) -> Value {
    Value::Array(vec![
        bulk("id"),
        bulk("abc"),
        bulk("port"),
        Value::Int(port),
        bulk("ip"),
        bulk(ip),
        bulk("endpoint"),
        bulk(ip),
        bulk("role"),
        bulk(role),
        bulk("health"),
        bulk(health),
    ])
}

fn shard(slots: &[i64], nodes: Vec<Value>) -> Value {
    Value::Array(vec![
        bulk("slots"),
        Value::Array(slots.iter().map(|&s| Value::Int(s)).collect()),
        bulk("nodes"),
        Value::Array(nodes),
    ])
}

fn addr(port: u16) -> Addr {
    Addr {
        host: "127.0.0.1".into(),
        port,
    }
}

#[test]
fn shards_map_every_range_to_the_online_master() {
    let reply = Value::Array(vec![
        shard(
            &[0, 5460, 10923, 10923],
            vec![
                node("127.0.0.1", 7003, "replica", "online"),
                node("127.0.0.1", 7000, "master", "online"),
            ],
        ),
        shard(
            &[5461, 10922],
            vec![
                // The old master, failed, and the promoted replica.
                node("127.0.0.1", 7001, "master", "failed"),
                node("127.0.0.1", 7004, "master", "online"),
            ],
        ),
        shard(
            &[10924, 16383],
            vec![node("127.0.0.1", 7002, "master", "loading")],
        ),
    ]);
    let map = SlotMap::from_shards(&reply).expect("valid");
    assert_eq!(map.master_of(0), Some(&addr(7000)));
    assert_eq!(map.master_of(10923), Some(&addr(7000)));
    assert_eq!(map.master_of(5461), Some(&addr(7004)));
    assert_eq!(map.master_of(10922), Some(&addr(7004)));
    // No online master: the one there is.
    assert_eq!(map.master_of(16383), Some(&addr(7002)));
    assert_eq!(map.served(), usize::from(SLOTS));
}

#[test]
fn slots_reply_maps_ranges_and_fills_an_empty_host() {
    let reply = Value::Array(vec![
        Value::Array(vec![
            Value::Int(0),
            Value::Int(99),
            Value::Array(vec![bulk(""), Value::Int(7000), bulk("id0")]),
            Value::Array(vec![bulk("127.0.0.1"), Value::Int(7003), bulk("id3")]),
        ]),
        Value::Array(vec![
            Value::Int(100),
            Value::Int(16383),
            Value::Array(vec![bulk("127.0.0.1"), Value::Int(7001), bulk("id1")]),
        ]),
    ]);
    let map = SlotMap::from_slots(&reply, &addr(9)).expect("valid");
    assert_eq!(map.master_of(99), Some(&addr(7000)));
    assert_eq!(map.master_of(100), Some(&addr(7001)));
    assert_eq!(map.masters().len(), 2);
}

#[test]
fn a_moved_slot_changes_that_slot_alone() {
    let mut map = SlotMap::default();
    assert_eq!(map.master_of(5), None);
    map.assign_range(0, 16383, &addr(7000));
    map.assign(5, &addr(7001));
    assert_eq!(map.master_of(4), Some(&addr(7000)));
    assert_eq!(map.master_of(5), Some(&addr(7001)));
    assert_eq!(map.master_of(6), Some(&addr(7000)));
    assert_eq!(map.master_of(SLOTS), None);
}

#[test]
fn malformed_replies_are_errors_not_panics() {
    let err = |v: Value| SlotMap::from_shards(&v).is_err();
    assert!(err(Value::Int(1)));
    assert!(err(Value::Array(vec![Value::Int(1)])));
    assert!(err(Value::Array(vec![Value::Array(vec![bulk("slots")])])));
    assert!(SlotMap::from_slots(&Value::Array(vec![Value::Int(1)]), &addr(1)).is_err());
    assert!(SlotMap::from_slots(
        &Value::Array(vec![Value::Array(vec![Value::Int(0), Value::Int(1)])]),
        &addr(1)
    )
    .is_err());
    // Out-of-range bounds are ignored, not indexed.
    let reply = Value::Array(vec![shard(
        &[-5, 3, 16380, 99999, 10, 12],
        vec![node("h", 1, "master", "online")],
    )]);
    let map = SlotMap::from_shards(&reply).expect("parsed");
    assert_eq!(map.served(), 3);
}
