use super::*;

#[test]
fn ring_full_is_503_overloaded() {
    let e = ApiError::from(EngineError::RingFull {
        shard: 1,
        capacity: 8,
    });
    assert_eq!((e.status().as_u16(), e.code()), (503, "overloaded"));
}

#[test]
fn store_unavailable_is_503_with_its_own_code() {
    let e = ApiError::from(EngineError::StoreUnavailable { retry_after_s: 2 });
    assert_eq!((e.status().as_u16(), e.code()), (503, "store_unavailable"));
}

#[test]
fn a_partition_not_held_is_503_naming_it() {
    let e = ApiError::from(EngineError::PartitionNotHeld { partition: 517 });
    assert_eq!((e.status().as_u16(), e.code()), (503, "store_unavailable"));
    assert!(e.to_string().contains("partition 517"), "{e}");
}

#[test]
fn bad_key_is_400_invalid_key() {
    let e = ApiError::from(EngineError::EmptyName(NameKind::Key));
    assert_eq!((e.status().as_u16(), e.code()), (400, "invalid_key"));
}
