use super::*;

#[test]
fn bits_across_chunks_are_set_read_and_cleared_alone() {
    let mut bits = FiredBits::default();
    let last = (3 * CHUNK - 1) as u32;
    bits.cover(last);
    assert_eq!(bits.covered(), 3 * CHUNK);
    let picked = [
        0,
        63,
        64,
        CHUNK as u32 - 1,
        CHUNK as u32,
        2 * CHUNK as u32 + 5,
        last,
    ];
    for &i in &picked {
        bits.set(i);
    }
    for i in 0..=last {
        assert_eq!(bits.get(i), picked.contains(&i), "bit {i}");
    }
    bits.clear(CHUNK as u32);
    assert!(!bits.get(CHUNK as u32) && bits.get(CHUNK as u32 - 1));
    bits.clear_all();
    assert!((0..=last).all(|i| !bits.get(i)));
}

/// Growing never adds more than one chunk's bytes at a time, at any size: the step that
/// used to double the whole bitmap (and stopped an insert for milliseconds) is gone.
#[test]
fn covering_one_more_index_adds_at_most_one_chunk() {
    let mut bits = FiredBits::default();
    let mut before = bits.heap_bytes();
    let mut largest = 0;
    for index in (0..(1u32 << 22)).step_by(997) {
        bits.cover(index);
        let now = bits.heap_bytes();
        largest = largest.max(now - before);
        before = now;
    }
    // One chunk, and the list of chunks doubling (16 bytes a chunk, far less).
    assert!(largest <= 2 * WORDS * 8, "a step grew {largest} bytes");
    assert_eq!(bits.covered(), 1 << 22);
}

#[test]
fn a_list_gives_back_what_it_was_given_in_order_across_chunks_and_reuses_its_room() {
    let mut list = FiredList::default();
    for round in 0..3u32 {
        let n = [LIST_CHUNK * 20 + 7, 5, LIST_CHUNK][round as usize] as u32;
        for i in 0..n {
            list.push((u64::from(i) * 3 + u64::from(round), i));
        }
        let got: Vec<_> = list.iter().copied().collect();
        let want: Vec<_> = (0..n)
            .map(|i| (u64::from(i) * 3 + u64::from(round), i))
            .collect();
        assert_eq!(got, want, "round {round}");
        list.clear();
        assert_eq!(list.iter().count(), 0);
        assert!(list.chunks.len() <= LIST_KEPT, "a big list is given back");
    }
}

/// Recording never copies what it holds: each push adds at most one chunk's bytes.
#[test]
fn a_push_adds_at_most_one_chunk() {
    let mut list = FiredList::default();
    let (mut before, mut largest) = (list.heap_bytes(), 0);
    for i in 0..(LIST_CHUNK * 300) as u32 {
        list.push((u64::from(i), i));
        let now = list.heap_bytes();
        largest = largest.max(now - before);
        before = now;
    }
    let chunk = LIST_CHUNK * std::mem::size_of::<(u64, u32)>();
    // One chunk, and the list of chunks doubling (24 bytes a chunk, far less).
    assert!(largest <= 2 * chunk, "a push grew {largest} bytes");
}
