//! The timer table's own operations: upsert, cancel, capacity, versions, purges.

use super::*;

fn packed(key: &str) -> PackedTimer {
    PackedTimer::new("shop", key, b"{\"order\":1}").expect("short names")
}

#[test]
fn upsert_replaces_and_bumps_the_version() {
    let mut t = TimerTable::new(UtcMicros(1_000), 16);
    let a = t
        .upsert(packed("o1"), UtcMicros(5_000), UtcMicros(1_000))
        .expect("room");
    assert!(!a.replaced);
    let b = t
        .upsert(packed("o1"), UtcMicros(9_000), UtcMicros(1_000))
        .expect("room");
    assert!(b.replaced);
    assert!(b.version > a.version);
    assert_eq!(t.len(), 1);
    let view = t.get(packed("o1").identity()).expect("pending");
    assert_eq!((view.deadline, view.version), (UtcMicros(9_000), b.version));
    assert_eq!(view.timer.payload(), b"{\"order\":1}");
}

/// The fired-timer bitmap grows with the slab by one chunk at a time. It used to double:
/// at 2^18 timers one insert added 32 KiB of fresh pages, at 2^23 one added 1 MiB and
/// stopped the inserting shard for up to 5.5 ms (`perf/probes/table_growth.rs`).
#[test]
fn inserting_never_grows_the_fired_bitmap_by_more_than_a_chunk() {
    let n = (1usize << 18) + 1;
    let mut t = TimerTable::new(UtcMicros(0), n);
    let (mut before, mut largest) = (t.fired_bits.heap_bytes(), 0);
    let mut key = String::new();
    for i in 0..n {
        use std::fmt::Write;
        key.clear();
        let _ = write!(key, "k{i}");
        t.upsert(packed(&key), UtcMicros(1_000_000 + i as u64), UtcMicros(0))
            .expect("room");
        let now = t.fired_bits.heap_bytes();
        largest = largest.max(now - before);
        before = now;
    }
    assert!(t.fired_bits.covered() >= n);
    assert!(
        largest <= 16 << 10,
        "one insert grew the bitmap {largest} bytes"
    );
}

#[test]
fn cancel_after_fire_returns_not_found() {
    let mut t = TimerTable::new(UtcMicros(0), 16);
    t.upsert(packed("o1"), UtcMicros(10), UtcMicros(0))
        .expect("room");
    let mut fired = vec![];
    t.poll(UtcMicros(10), |d, r| {
        fired.push((d, r.timer.key().to_string()))
    });
    assert_eq!(fired, vec![(UtcMicros(10), "o1".to_string())]);
    assert!(t.cancel(packed("o1").identity()).is_none());
    assert!(t.get(packed("o1").identity()).is_none());
}

#[test]
fn capacity_refuses_new_keys_but_not_replacements() {
    let mut t = TimerTable::new(UtcMicros(0), 1);
    t.upsert(packed("a"), UtcMicros(10), UtcMicros(0))
        .expect("room");
    assert_eq!(
        t.upsert(packed("b"), UtcMicros(10), UtcMicros(0)),
        Err(UpsertError::Capacity)
    );
    assert!(
        t.upsert(packed("a"), UtcMicros(20), UtcMicros(0))
            .expect("replace")
            .replaced
    );
}

#[test]
fn versions_stay_above_recovered_ones() {
    let mut t = TimerTable::new(UtcMicros(0), 4);
    t.observe_version(1_000_000);
    let v = t
        .upsert(packed("a"), UtcMicros(10), UtcMicros(5))
        .expect("room")
        .version;
    assert_eq!(v, 1_000_001);
}

#[test]
fn a_purge_removes_exactly_the_picked_timers_and_the_rest_still_fire() {
    let mut t = TimerTable::new(UtcMicros(0), 64);
    for i in 0..40u64 {
        t.upsert(packed(&format!("k{i}")), UtcMicros(10 + i), UtcMicros(0))
            .expect("room");
    }
    let mut gone = Vec::new();
    let n = t.purge(
        |timer| timer.key().ends_with('3') || timer.key().ends_with('7'),
        |deadline, r| gone.push((deadline, r.timer.key().to_string())),
    );
    assert_eq!(n, 8);
    assert_eq!(gone.len(), 8);
    assert!(gone
        .iter()
        .all(|(d, k)| format!("k{}", d.0 - 10) == *k && t.get(packed(k).identity()).is_none()));
    assert_eq!(t.len(), 32);
    // A purged key can be scheduled again; the others fire once each.
    t.upsert(packed("k3"), UtcMicros(100), UtcMicros(0))
        .expect("room");
    let mut fired = Vec::new();
    t.poll(UtcMicros(1_000), |_, r| {
        fired.push(r.timer.key().to_string())
    });
    assert_eq!(fired.len(), 33);
    assert!(fired.iter().any(|k| k == "k3") && !fired.iter().any(|k| k == "k7"));
    assert!(t.is_empty());
}

#[test]
fn a_purge_in_slices_stops_when_told_and_goes_on_to_remove_what_one_purge_would() {
    let n = 3 * PURGE_CHECK as u64 + 10;
    let mut t = TimerTable::new(UtcMicros(0), n as usize);
    for i in 0..n {
        t.upsert(packed(&format!("k{i}")), UtcMicros(10 + i), UtcMicros(0))
            .expect("room");
    }
    let bound = t.slab_bound();
    let (mut from, mut steps, mut removed) = (0, 0, 0);
    loop {
        steps += 1;
        let next = t.purge_from(
            from,
            bound,
            |timer| timer.key().ends_with('3'),
            |_, _| {},
            &mut removed,
            || true,
        );
        match next {
            Some(i) => {
                assert_eq!(i, from + PURGE_CHECK, "one check's worth a step");
                from = i;
            }
            None => break,
        }
    }
    assert_eq!(steps, 4);
    let threes = (0..n).filter(|i| i % 10 == 3).count();
    assert_eq!((removed, t.len()), (threes, n as usize - threes));
    assert_eq!(t.purge(|timer| timer.key().ends_with('3'), |_, _| {}), 0);
}

#[test]
fn out_of_range_deadline_is_refused_and_leaves_nothing_behind() {
    let mut t = TimerTable::new(UtcMicros(0), 4);
    let far = UtcMicros(1 << 60);
    assert_eq!(
        t.upsert(packed("a"), far, UtcMicros(0)),
        Err(UpsertError::OutOfRange)
    );
    assert_eq!(t.len(), 0);
    assert!(t.get(packed("a").identity()).is_none());
}
