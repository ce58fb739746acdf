use super::*;

#[test]
fn the_parts_follow_the_capacity_within_their_bounds() {
    assert_eq!(parts_for(0), MIN_PARTS);
    assert_eq!(parts_for(1_000_000), MIN_PARTS);
    assert_eq!(parts_for(8_000_000), 8_192);
    assert_eq!(parts_for(10_000_000), 16_384);
    assert_eq!(parts_for(100_000_000), MAX_PARTS);
    assert_eq!(parts_for(usize::MAX), MAX_PARTS);
    assert_eq!(Index::new(10_000_000).parts.len(), 16_384);
    // What the module's memory note counts per part.
    assert_eq!(std::mem::size_of::<HashTable<u32>>(), 32);
    // The part's bits lie below hashbrown's top 7 (57..64): bits 40..56 at most.
    assert!(MAX_PARTS.trailing_zeros() + 40 <= 57);
}

#[test]
fn entries_are_found_by_hash_and_predicate_and_survive_growth() {
    for capacity in [0, 10_000_000] {
        entries_survive_growth_with_parts_for(capacity);
    }
}

fn entries_survive_growth_with_parts_for(capacity: usize) {
    let mut index = Index::new(capacity);
    let hash = |i: u32| {
        u64::from(i)
            .wrapping_mul(0xd6e8_feb8_6659_fd93)
            .rotate_left(17)
    };
    for i in 0..20_000u32 {
        index.insert(hash(i), i, hash);
    }
    assert_eq!(index.len(), 20_000);
    for i in (0..20_000u32).step_by(7) {
        assert_eq!(index.find(hash(i), |s| s == i), Some(i));
    }
    // Same hash, another slot: the predicate decides.
    assert_eq!(index.find(hash(5), |s| s == 6), None);
    assert!(index.replace(hash(9), 9, 90_009));
    assert_eq!(index.find(hash(9), |s| s == 90_009), Some(90_009));
    assert!(!index.replace(hash(9), 9, 1));
    assert_eq!(index.remove(hash(10), |s| s == 10), Some(10));
    assert_eq!(index.remove(hash(10), |s| s == 10), None);
    index.retain(|s| s % 2 == 0);
    assert_eq!(
        index.len(),
        (0..20_000u32).filter(|i| i % 2 == 0 && *i != 10).count()
    );
    assert_eq!(index.find(hash(11), |s| s == 11), None);
    assert_eq!(index.find(hash(12), |s| s == 12), Some(12));
}

/// A test hash of slot `i`: spread over all 64 bits, as the table's are.
fn spread(i: u32) -> u64 {
    u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555
}

#[test]
fn a_reserve_of_what_is_then_inserted_grows_hardly_a_part() {
    let hash = spread;
    let mut index = Index::new(0);
    let n = (MIN_PARTS * 300) as u32;
    index.reserve(n as usize, hash);
    let reserved = index.allocation_size();
    let headers = MIN_PARTS * std::mem::size_of::<HashTable<u32>>();
    assert!(reserved > headers + n as usize * 5, "room for every entry");
    assert!(
        index.parts.iter().all(|p| p.capacity() >= 300 + 4 * 17),
        "every part has room for its share and more"
    );
    for i in 0..n {
        index.insert(hash(i), i, hash);
    }
    assert_eq!(index.len(), n as usize);
    assert_eq!(index.allocation_size(), reserved, "no part grew");
    for i in (0..n).step_by(101) {
        assert_eq!(index.find(hash(i), |s| s == i), Some(i));
    }
    // A reserve on a filled index rehashes what it holds without losing it.
    index.reserve(n as usize, hash);
    for i in (0..n).step_by(97) {
        assert_eq!(index.find(hash(i), |s| s == i), Some(i));
    }
    // Too few to share out: nothing reserved.
    let mut small = Index::new(0);
    small.reserve(MIN_PARTS * 3, hash);
    assert_eq!(small.allocation_size(), headers);
}

/// A share just below a power of two of buckets (381 a part, 448 fit in 512 buckets, as
/// at 25 M timers over 65,536 parts) must not reserve the next power of two.
#[test]
fn a_reserve_takes_no_more_memory_than_growing() {
    let hash = spread;
    let n = (MIN_PARTS * 381) as u32;
    let mut grown = Index::new(0);
    let mut reserved = Index::new(0);
    reserved.reserve(n as usize, hash);
    for i in 0..n {
        grown.insert(hash(i), i, hash);
        reserved.insert(hash(i), i, hash);
    }
    let (g, r) = (grown.allocation_size(), reserved.allocation_size());
    assert!(r <= g + g / 50, "reserved {r} bytes, grown {g}");
}

#[test]
fn one_hash_value_for_two_slots_keeps_both() {
    let mut index = Index::new(0);
    index.insert(42, 1, |_| 42);
    index.insert(42, 2, |_| 42);
    assert_eq!(index.find(42, |s| s == 2), Some(2));
    assert_eq!(index.remove(42, |s| s == 1), Some(1));
    assert_eq!(index.find(42, |_| true), Some(2));
}
