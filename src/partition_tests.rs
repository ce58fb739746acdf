use super::*;

#[test]
fn partition_is_stable_across_builds() {
    // Pinned values: a change here orphans stored timers (see PARTITIONS).
    assert_eq!(
        partition_of("shop", "order-1"),
        partition_of("shop", "order-1")
    );
    assert_ne!(partition_of("shop", "a"), partition_of("sho", "pa"));
    let p = partition_of("shop", "order-8812");
    assert!(p < PARTITIONS);
    assert_eq!(p, 2, "FNV-1a of shop/order-8812 changed");
}

#[test]
fn every_partition_has_exactly_one_owner_for_any_shard_count() {
    for shards in 1..=5 {
        for p in 0..PARTITIONS {
            assert_eq!((0..shards).filter(|&s| owns(s, shards, p)).count(), 1);
        }
        assert_eq!(
            shard_of("shop", "order-8812", shards),
            partition_of("shop", "order-8812") as usize % shards
        );
    }
}

#[test]
fn a_partition_set_unites_and_intersects_and_says_what_it_misses() {
    let (mut a, mut b) = (PartitionSet::default(), PartitionSet::default());
    for p in 0..PARTITIONS / 2 {
        a.insert(p);
    }
    for p in PARTITIONS / 2 - 1..PARTITIONS {
        b.insert(p);
    }
    a.insert(PARTITIONS);
    assert!(!a.contains(PARTITIONS) && a.contains(0) && !a.contains(PARTITIONS - 1));
    assert!(a.union(&b).is_full() && !a.is_full());
    assert_eq!(a.intersection(&b).members(), [PARTITIONS / 2 - 1]);
    assert_eq!(
        a.missing(),
        (PARTITIONS / 2..PARTITIONS).collect::<Vec<_>>()
    );
    assert!(PartitionSet::full().missing().is_empty());
}

#[test]
fn a_schedule_its_occurrences_and_its_key_share_a_partition() {
    let p = partition_of("shop", "nightly");
    assert_eq!(partition_of("shop", &schedule_key("nightly")), p);
    assert_eq!(
        partition_of("shop", &occurrence_key("nightly", 1_805_000_000_000_000)),
        p
    );
    assert_eq!(schedule_of(&schedule_key("nightly")), Some("nightly"));
    assert_eq!(schedule_of(&occurrence_key("nightly", 5)), None);
    assert_eq!(schedule_of("nightly"), None);
    assert_eq!(schedule_of("@"), None);
}
