use super::*;

#[test]
fn reserve_refuses_past_the_limit_and_release_frees_a_slot() {
    let q = Quota::new(2);
    assert!(q.reserve() && q.reserve());
    assert!(!q.reserve());
    assert_eq!(q.pending(), 2, "a refused reserve takes nothing");
    q.release();
    assert!(q.reserve());
    q.force();
    assert_eq!(q.pending(), 3, "recovery may exceed the limit");
    assert!(!q.reserve());
}

#[test]
fn concurrent_reserves_never_exceed_the_limit() {
    let q = std::sync::Arc::new(Quota::new(1000));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            std::thread::spawn(move || (0..10_000).filter(|_| q.reserve()).count())
        })
        .collect();
    let taken: usize = threads.into_iter().map(|t| t.join().unwrap_or(0)).sum();
    assert_eq!(taken, 1000);
    assert_eq!(q.pending(), 1000);
}

#[test]
fn a_slot_is_given_back_when_dropped_and_kept_when_kept() {
    let q = Arc::new(Quota::new(1));
    let slot = QuotaSlot::reserve(&q).expect("room");
    assert!(QuotaSlot::reserve(&q).is_none());
    drop(slot);
    assert_eq!(q.pending(), 0);
    QuotaSlot::reserve(&q).expect("room again").keep();
    assert_eq!(q.pending(), 1);
}

#[test]
fn tenants_without_a_quota_have_none() {
    let qs = Quotas::new([("acme".to_string(), 5)], 1);
    assert_eq!(qs.get("acme").map(|q| q.limit), Some(5));
    assert!(qs.get("open").is_none());
    assert!(Quotas::default().get("acme").is_none());
}

#[test]
fn unused_quota_is_held_per_shard_and_follows_reserve_release_and_force() {
    let qs = Quotas::new([("a".to_string(), 5), ("b".to_string(), 4)], 2);
    assert_eq!(qs.held_per_shard(), 5, "9 unused over 2 shards, rounded up");
    let a = qs.get("a").expect("quota").clone();
    assert!(a.reserve() && a.reserve() && a.reserve());
    assert_eq!(qs.held_per_shard(), 3, "6 unused");
    a.release();
    assert_eq!(qs.held_per_shard(), 4, "7 unused");
    let b = qs.get("b").expect("quota").clone();
    for _ in 0..4 {
        b.force();
    }
    a.force();
    a.force();
    assert_eq!(qs.held_per_shard(), 1, "1 unused");
    a.force();
    assert_eq!(
        qs.held_per_shard(),
        0,
        "a over its limit holds nothing more"
    );
    assert_eq!(Quotas::default().held_per_shard(), 0);
    assert_eq!(qs.total_limit(), 9);
}
