//! The timer table (wheel + index) by example: bursts, cascades ahead of their slot, bounded
//! polls, re-arms, stale handles; and the helpers the model check (`model_tests.rs`) shares.

use super::table::TimerTable;
use super::{Fate, Wheel};
use crate::timer::PackedTimer;
use crate::units::{UtcMicros, TEN_YEARS_US};

pub(super) fn packed(k: u8) -> PackedTimer {
    PackedTimer::new("tenant", &format!("key-{k}"), &[k]).expect("short names")
}

/// A fire: (deadline, key, version, times re-armed before it).
pub(super) type Fire = (u64, u8, u64, u8);

/// A re-arm asked at a fire: (key, new deadline, version, times re-armed with it).
pub(super) type Rearm = (u8, u64, u64, u8);

/// Polls until nothing more is due, at most `budget` fires per call (the shard's bounded
/// passes); the fires of all calls together.
pub(super) fn poll_all(table: &mut TimerTable, now: u64, budget: usize) -> Vec<Fire> {
    poll_keeping_all(table, now, budget, None).0
}

/// Whether the test re-arms key `k` when it fires after `n` re-arms: every third key, three
/// times.
fn keeps(k: u8, n: u8) -> bool {
    k % 3 == 0 && n < 3
}

/// [`poll_all`], re-arming at each fire the timers [`keeps`] names, `after` µs from `now`
/// (none when `after` is `None`), with their re-arm count as their metadata; the fires, and
/// the re-arms asked.
pub(super) fn poll_keeping_all(
    table: &mut TimerTable,
    now: u64,
    budget: usize,
    after: Option<u64>,
) -> (Vec<Fire>, Vec<Rearm>) {
    let (mut fired, mut rearmed) = (Vec::new(), Vec::new());
    let mut calls = 0;
    loop {
        let horizon = table.horizon().0;
        let more = table.poll_keeping(
            UtcMicros(now),
            budget,
            |d, r| {
                let k = r.timer.payload()[0];
                let n = r.timer.meta().first().copied().unwrap_or(0);
                fired.push((d.0, k, r.version, n));
                let at = after.filter(|_| keeps(k, n)).map(|a| now + a);
                match (
                    at.filter(|&at| at <= horizon),
                    r.timer.with_new_meta(&[n + 1]),
                ) {
                    (Some(at), Some(timer)) => {
                        rearmed.push((k, at, r.version, n + 1));
                        Fate::Rearm(UtcMicros(at), timer)
                    }
                    _ => Fate::Done,
                }
            },
            drop,
        );
        if !more {
            return (fired, rearmed);
        }
        calls += 1;
        assert!(calls < 10_000, "poll_keeping keeps reporting more due");
    }
}

#[test]
fn next_deadline_is_found_without_walking_ticks() {
    // One timer a year out: next_deadline answers at once, and polling to it fires it.
    let start = 1_700_000_000_000_000;
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(start), 4);
    let due = start + 365 * 86_400 * 1_000_000;
    wheel.insert(UtcMicros(due), 7).expect("in range");
    let mut steps = 0;
    let mut fired = vec![];
    while fired.is_empty() {
        let next = wheel.next_deadline().expect("pending");
        assert!(
            next.0 <= due,
            "next_deadline {} beyond the deadline {due}",
            next.0
        );
        wheel.poll(next, |_, d, v| fired.push((d.0, v)));
        steps += 1;
        assert!(steps <= 2 * super::LEVELS, "took {steps} wake-ups");
    }
    assert_eq!(fired, vec![(due, 7)]);
}

#[test]
fn same_deadline_burst_fires_all_at_once_and_not_a_microsecond_before() {
    let start = 1_000_000;
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(start), 10_000);
    let due = start + 1_234_567;
    for i in 0..10_000 {
        wheel.insert(UtcMicros(due), i).expect("in range");
    }
    let mut fired = 0;
    wheel.poll(UtcMicros(due - 1), |_, _, _| fired += 1);
    assert_eq!(fired, 0);
    wheel.poll(UtcMicros(due), |_, d, _| {
        assert_eq!(d.0, due);
        fired += 1
    });
    assert_eq!(fired, 10_000);
}

#[test]
fn a_large_slot_is_cascaded_ahead_so_its_deadline_only_fires() {
    // The deadline starts a level-1 slot: without cascading ahead, the burst would move down
    // at the deadline itself, before the first fire.
    let start = 1 << 24;
    let due = start + (5 << 18);
    let n = 10_000u32;
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(start), n as usize);
    for i in 0..n {
        wheel.insert(UtcMicros(due), i).expect("in range");
    }
    let ahead = wheel.next_deadline().expect("pending").0;
    assert!(
        ahead < due,
        "a slot of {n} entries is due for its cascade before its start"
    );
    // From `n × level × MOVE_NS`: level 1 alone asks for 10,000 × 40 ns = 400 µs ahead.
    let when = due - 300;
    let mut fired = 0;
    wheel.poll(UtcMicros(when), |_, _, _| fired += 1);
    assert_eq!(fired, 0, "a cascade fires nothing");
    assert_eq!(
        wheel.occupancy()[0],
        n,
        "every entry reached level 0 ahead of its deadline"
    );
    assert_eq!(wheel.next_deadline(), Some(UtcMicros(due)));
    // The wheel's time is past the clock now; a timer due in between goes to the expired list
    // and still fires first, by the clock, not before its deadline.
    wheel.insert(UtcMicros(due - 100), n).expect("in range");
    wheel.poll(UtcMicros(due - 101), |_, _, _| fired += 1);
    assert_eq!(fired, 0);
    let mut order = Vec::new();
    wheel.poll(UtcMicros(due), |_, d, v| order.push((d.0, v)));
    assert_eq!(order.len(), n as usize + 1);
    assert_eq!(order[0], (due - 100, n));
    assert!(order[1..].iter().all(|&(d, _)| d == due));
    assert!(wheel.is_empty());
}

#[test]
fn a_cascade_ahead_does_not_hold_back_the_next_levels() {
    // 100,000 timers 4 ms after the start of their level-2 slot: the level-1 step alone asks
    // for 4 ms (100,000 × 40 ns), so it must start before that slot's start, which the
    // level-2 step has just made the wheel's time.
    let s2 = 1u64 << 30;
    let due = s2 + 4_000;
    let n = 100_000u32;
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(s2 - 300_000), n as usize);
    for i in 0..n {
        wheel.insert(UtcMicros(due), i).expect("in range");
    }
    let mut fired = 0;
    wheel.poll(UtcMicros(s2 - 1), |_, _, _| fired += 1);
    assert_eq!(fired, 0);
    assert_eq!(
        wheel.occupancy()[0],
        n,
        "both steps down are done before the level-2 slot starts"
    );
}

#[test]
fn stale_handle_does_not_cancel_the_slot_reuser() {
    let mut wheel: Wheel<&str> = Wheel::new(UtcMicros(0), 1);
    let first = wheel.insert(UtcMicros(100), "first").expect("in range");
    assert_eq!(wheel.remove(first), Some("first"));
    let second = wheel.insert(UtcMicros(200), "second").expect("in range");
    assert_eq!(
        wheel.remove(first),
        None,
        "stale handle must not remove the reused slot"
    );
    assert_eq!(
        wheel.get(second).map(|(d, v)| (d.0, *v)),
        Some((200, "second"))
    );
}

#[test]
fn entry_stays_within_40_bytes() {
    use super::slab::Entry;
    use super::table::TimerRecord;
    // The packed timer is one pointer, and the empty slot is its null niche.
    assert_eq!(std::mem::size_of::<crate::timer::PackedTimer>(), 8);
    assert_eq!(std::mem::size_of::<Option<TimerRecord>>(), 16);
    assert_eq!(std::mem::size_of::<Entry<TimerRecord>>(), 40);
}

#[test]
fn cascade_onto_the_current_microsecond_still_fires() {
    // A level-1 slot that starts exactly at the deadline: the cascade puts the entry at
    // `elapsed` itself, and the same poll must fire it.
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(80_421_292), 4);
    wheel.insert(UtcMicros(80_422_464), 1).expect("in range");
    let mut fired = vec![];
    wheel.poll(UtcMicros(80_422_464 + TEN_YEARS_US), |_, d, v| {
        fired.push((d.0, v))
    });
    assert_eq!(fired, vec![(80_422_464, 1)]);
}

#[test]
fn index_stays_exact_after_a_burst_that_fires_most_of_the_table() {
    let mut table = TimerTable::new(UtcMicros(0), 1_000);
    // 150 fired: more than a table this small removes one by one, so the index is swept.
    table.set_record_min(0);
    for k in 0..200u8 {
        let deadline = if k < 150 { 100 } else { 10_000 };
        table
            .upsert(packed(k), UtcMicros(deadline), UtcMicros(0))
            .expect("room");
    }
    let mut fired = 0;
    table.poll(UtcMicros(100), |_, _| fired += 1);
    assert_eq!((fired, table.len(), table.index_len()), (150, 50, 50));
    // Fired keys are gone from the index, survivors are still found, and a fired key can be
    // scheduled anew without a duplicate index entry.
    assert!(table.get(packed(3).identity()).is_none());
    assert_eq!(
        table.get(packed(170).identity()).map(|v| v.deadline),
        Some(UtcMicros(10_000))
    );
    assert!(
        !table
            .upsert(packed(3), UtcMicros(20_000), UtcMicros(200))
            .expect("room")
            .replaced
    );
    assert!(table.cancel(packed(3).identity()).is_some());
    assert!(table.cancel(packed(3).identity()).is_none());
}

#[test]
fn a_bounded_poll_resumes_a_slot_in_order_and_sees_cancels_and_inserts_in_between() {
    let mut table = TimerTable::new(UtcMicros(1_000), 64);
    for k in 0..10u8 {
        table
            .upsert(packed(k), UtcMicros(2_000), UtcMicros(1_000))
            .expect("room");
    }
    let mut fired = Vec::new();
    let more = table.poll_at_most(UtcMicros(5_000), 3, |_, r| fired.push(r.timer.payload()[0]));
    assert!(more, "7 of the 10 are still due");
    assert_eq!(fired, vec![0, 1, 2]);
    // Between two bounded polls: cancel one that is still due, add one due earlier (it goes
    // to the expired list and must fire first) and one due later.
    assert!(table.cancel(packed(5).identity()).is_some());
    assert!(
        table.cancel(packed(1).identity()).is_none(),
        "fired already"
    );
    table
        .upsert(packed(20), UtcMicros(1_500), UtcMicros(2_000))
        .expect("room");
    table
        .upsert(packed(21), UtcMicros(4_000), UtcMicros(2_000))
        .expect("room");
    let rest = poll_all(&mut table, 5_000, 2);
    let keys: Vec<u8> = rest.iter().map(|&(_, k, ..)| k).collect();
    assert_eq!(keys, vec![20, 3, 4, 6, 7, 8, 9, 21]);
    assert!(table.is_empty());
    assert_eq!(table.next_deadline(), None);
}

#[test]
fn a_bounded_poll_of_a_large_expired_list_fires_it_in_deadline_order() {
    let mut table = TimerTable::new(UtcMicros(1_000_000), 4096);
    // Inserted in the past, out of order: all land on the expired list.
    for k in 0..200u8 {
        let deadline = 1_000 + u64::from(k.wrapping_mul(37)) * 10;
        table
            .upsert(packed(k), UtcMicros(deadline), UtcMicros(1_000_000))
            .expect("room");
    }
    let fired = poll_all(&mut table, 1_000_000, 7);
    assert_eq!(fired.len(), 200);
    assert!(fired.windows(2).all(|w| w[0].0 <= w[1].0), "{fired:?}");
}

#[test]
fn tables_hash_keys_with_their_own_random_seed() {
    let a = TimerTable::new(UtcMicros(0), 4);
    let b = TimerTable::new(UtcMicros(0), 4);
    let id = packed(1);
    // A fixed seed would make every table (and every process) hash a key the same way, which
    // lets a client precompute keys that collide.
    assert_ne!(a.hash_of(id.identity()), b.hash_of(id.identity()));
}

#[test]
fn a_re_armed_timer_keeps_its_slab_entry_version_and_index_entry() {
    let mut table = TimerTable::new(UtcMicros(1_000), 16);
    let first = table
        .upsert(packed(1), UtcMicros(2_000), UtcMicros(1_000))
        .expect("room");
    table
        .upsert(packed(2), UtcMicros(2_000), UtcMicros(1_000))
        .expect("room");
    let mut spent = Vec::new();
    let more = table.poll_keeping(
        UtcMicros(2_000),
        usize::MAX,
        |_, r| match r.timer.payload()[0] {
            1 => Fate::Rearm(
                UtcMicros(9_000),
                r.timer.with_new_meta(b"m").expect("short"),
            ),
            _ => Fate::Done,
        },
        |t| spent.push(t.key().to_string()),
    );
    assert!(!more);
    assert_eq!(
        spent,
        ["key-1", "key-2"],
        "both fired timers' old bytes are handed back"
    );
    assert_eq!((table.len(), table.index_len()), (1, 1));
    let kept = table
        .timer_at(first.slot)
        .expect("the same slab entry holds it");
    assert_eq!((kept.key(), kept.meta()), ("key-1", &b"m"[..]));
    let view = table
        .get(packed(1).identity())
        .expect("found through its index entry");
    assert_eq!(
        (view.deadline, view.version),
        (UtcMicros(9_000), first.version)
    );
    // Due again at its new deadline, not a microsecond before.
    assert!(poll_all(&mut table, 8_999, usize::MAX).is_empty());
    assert_eq!(
        poll_all(&mut table, 9_000, usize::MAX),
        [(9_000, 1, first.version, b'm')]
    );
}

#[test]
fn a_re_arm_due_at_once_waits_for_the_next_poll() {
    let mut table = TimerTable::new(UtcMicros(1_000), 16);
    table
        .upsert(packed(1), UtcMicros(2_000), UtcMicros(1_000))
        .expect("room");
    let mut fires = 0;
    table.poll_keeping(
        UtcMicros(2_000),
        usize::MAX,
        |d, r| {
            fires += 1;
            Fate::Rearm(d, r.timer.with_new_meta(b"").expect("short"))
        },
        drop,
    );
    assert_eq!(fires, 1, "never twice in one poll");
    assert_eq!(table.next_deadline(), Some(UtcMicros(2_000)));
    assert_eq!(poll_all(&mut table, 2_000, usize::MAX).len(), 1);
}

/// While nothing may fire (a budget of 0: the store has no room for fires), a poll leaves an
/// unsorted expired list alone: with out-of-order arrivals between such polls, each one
/// sorted the whole list again. Once fires may go, the list fires in deadline order, ties in
/// the order they arrived.
#[test]
fn a_poll_that_may_fire_nothing_does_not_sort_and_ties_keep_their_arrival_order() {
    let now = UtcMicros(1_000_000);
    let mut wheel: Wheel<u32> = Wheel::new(now, 1024);
    for k in 0..500u32 {
        // 50 deadlines in the past, out of order, each ten times.
        let deadline = 1_000 + u64::from(k.wrapping_mul(7919) % 50) * 10;
        wheel.insert(UtcMicros(deadline), k).expect("room");
        let more = wheel.poll_at_most(now, 0, |_, _, _| panic!("fired with no budget"));
        assert!(more);
    }
    assert_eq!(
        wheel.runs.scratch_capacity(),
        0,
        "sorted while nothing could fire"
    );
    let mut fired = Vec::new();
    while wheel.poll_at_most(now, 64, |_, d, k| fired.push((d.0, k))) {}
    assert_eq!(fired.len(), 500);
    assert!(
        fired.windows(2).all(|w| w[0] < w[1]),
        "deadline order, ties in arrival order: {fired:?}"
    );
}
