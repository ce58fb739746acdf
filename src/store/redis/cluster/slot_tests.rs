use super::*;

#[test]
fn crc16_is_the_xmodem_variant_of_the_specification() {
    // The specification's own check value: CRC16("123456789") = 0x31C3.
    assert_eq!(XMODEM.checksum(b"123456789"), 0x31C3);
    assert_eq!(slot_of(b"123456789"), 0x31C3 % SLOTS);
}

#[test]
fn a_hash_tag_decides_the_slot_and_an_empty_one_does_not() {
    let tagged = slot_of(b"user1000");
    assert_eq!(slot_of(b"{user1000}.following"), tagged);
    assert_eq!(slot_of(b"{user1000}.followers"), tagged);
    // The first `{` and the first `}` after it: `{bar`.
    assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
    // Only the first tag counts.
    assert_eq!(slot_of(b"foo{bar}{zap}"), slot_of(b"bar"));
    // An empty tag, or no closing brace: the whole key.
    assert_eq!(
        slot_of(b"foo{}{bar}"),
        XMODEM.checksum(b"foo{}{bar}") % SLOTS
    );
    assert_eq!(slot_of(b"foo{bar"), XMODEM.checksum(b"foo{bar") % SLOTS);
}

#[test]
fn every_key_of_a_partition_shares_its_slot() {
    for p in [0, 1, 511, crate::partition::PARTITIONS - 1] {
        let slot = partition_slot(p);
        assert!(slot < SLOTS);
        for key in [
            crate::store::redis::layout::timers_key(p),
            format!("punctual:{{p{p}}}:lease"),
        ] {
            assert_eq!(slot_of(key.as_bytes()), slot, "{key}");
        }
    }
}
