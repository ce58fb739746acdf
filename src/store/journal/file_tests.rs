use super::*;

#[test]
fn a_header_round_trips_and_a_damaged_one_is_refused() {
    let h = Header {
        kind: Kind::Segment,
        block: 4096,
        shard: 1,
        shards: 2,
        seq: 9,
    };
    let b = h.encode();
    assert_eq!(b.len(), BLOCK);
    assert_eq!(Header::decode(&b), Ok(h));
    let mut bad = b.clone();
    bad[20] ^= 4;
    assert!(Header::decode(&bad).is_err());
    assert!(Header::decode(&b[..10]).is_err());
}

#[test]
fn a_file_of_the_previous_format_is_refused_saying_so() {
    let mut b = Header {
        kind: Kind::Snapshot,
        block: 4096,
        shard: 0,
        shards: 1,
        seq: 1,
    }
    .encode();
    b[8..10].copy_from_slice(&1u16.to_le_bytes());
    let crc = crc32c::crc32c(&b[..32]);
    b[32..36].copy_from_slice(&crc.to_le_bytes());
    let why = Header::decode(&b).expect_err("format 1 read");
    assert!(
        why.contains("journal format 1") && why.contains("not migrated"),
        "{why}"
    );
}
