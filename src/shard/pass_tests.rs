//! What one pass of the loop does and leaves: fired timers' memory, slices of costly or large
//! fires, kept timers re-armed, follow-ups a chunk at a time.

use super::pass::{FREE_BATCH, SPENT_MAX};
use super::tests::{
    assert_all_fired_never_early, callback_meta, insert_timers, shard, Told, WAITING,
};
use super::*;
use crate::clock::FakeSource;
use crate::sink::Next;
use crate::timer::{FiredTimer, PackedTimer};
use crate::units::{UtcMicros, UtcNanos};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// A burst's fired timers are held for freeing after it, but never more than SPENT_MAX of
/// them, and the ones held are freed once nothing more is due.
#[test]
fn fired_timers_memory_is_held_within_its_bound_and_freed_after_the_burst() {
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, seen) = shard(&src);
    s.table = TimerTable::new(s.clock.now().as_micros(), 1 << 20);
    let due = UtcMicros(src.realtime().0 / 1_000 + 1_000);
    let n = SPENT_MAX + 1_000;
    insert_timers(&mut s.table, n, due, 0);
    src.advance(Duration::from_millis(2));
    let (fired, more) = s.fire_due(usize::MAX, None);
    assert_eq!((fired, more), (n as u64, More::No));
    assert_eq!(seen.borrow().len(), n);
    assert_eq!(
        s.spent.0.len(),
        SPENT_MAX,
        "held at most SPENT_MAX, the rest freed at once"
    );
    let mut passes = 0;
    while s.spent.free(FREE_BATCH) > 0 {
        passes += 1;
    }
    assert_eq!(passes, SPENT_MAX.div_ceil(FREE_BATCH));
    assert!(s.spent.0.is_empty());
}

/// A sink whose every fire costs `cost` of the thread's time, as a webhook's does (a JSON
/// body, an HMAC, a task spawn), and that counts its fires.
struct Costly {
    cost: Duration,
    fired: Rc<RefCell<Vec<String>>>,
}

impl Sink for Costly {
    fn fired(&mut self, t: &FiredTimer<'_>) -> Next {
        let start = std::time::Instant::now();
        while start.elapsed() < self.cost {
            std::hint::spin_loop();
        }
        self.fired.borrow_mut().push(t.key.to_string());
        Next::Done
    }
}

/// A full pass of fires that each cost 10 µs would hold a shared thread for 40 ms: the pass
/// ends once its slice is over (well before its count), leaving the rest due for the next
/// pass, and every timer still fires exactly once, in deadline order.
#[test]
fn a_pass_of_costly_fires_ends_with_its_slice_and_loses_nothing() {
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let fired = Rc::new(RefCell::new(Vec::new()));
    s.sinks = vec![Box::new(Costly {
        cost: Duration::from_micros(10),
        fired: fired.clone(),
    })];
    s.table = TimerTable::new(s.clock.now().as_micros(), 2 * FIRE_BATCH);
    let base = src.realtime().0 / 1_000 + 1_000;
    insert_timers(&mut s.table, FIRE_BATCH, UtcMicros(base), 1);
    src.advance(Duration::from_millis(20));
    let (first, more) = s.fire_due(FIRE_BATCH, Some(Slice::begin()));
    assert!(
        first > 0 && first < FIRE_BATCH as u64 && more == More::Due,
        "one pass fired {first} of {FIRE_BATCH} costly timers ({more:?}): not bounded by its slice"
    );
    let mut passes = 1;
    loop {
        let (_, more) = s.fire_due(FIRE_BATCH, Some(Slice::begin()));
        passes += 1;
        assert!(passes <= FIRE_BATCH, "the passes never ended");
        if more == More::No {
            break;
        }
    }
    let fired = fired.borrow();
    let expected: Vec<String> = (0..FIRE_BATCH).map(|i| format!("k{i:05}")).collect();
    assert_eq!(*fired, expected, "each once, in deadline order");
}

/// A sink that records the wakes the shard hands back unused (the test hands the shard the
/// follow-ups, as a sink does).
struct Waking {
    unused: Rc<RefCell<Vec<String>>>,
}

impl Sink for Waking {
    fn fired(&mut self, _: &FiredTimer<'_>) -> Next {
        Next::Done
    }

    fn wake_unused(&mut self, timer: &PackedTimer) {
        self.unused.borrow_mut().push(timer.key().to_string());
    }
}

/// A wake stands for a cap's slot that came free. One whose timer was cancelled, or moved on
/// to another version, before the follow-up applied goes back to its sink (which passes the
/// slot to the next timer waiting); one whose timer is still there makes it due now.
#[test]
fn a_wake_whose_timer_went_is_handed_back_to_its_sink() {
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let far = UtcMicros(s.clock.now().as_micros().0 + 60_000_000);
    insert_timers(&mut s.table, 2, far, 1);
    let wake = |key: &str, version| crate::sink::Followup {
        timer: PackedTimer::new("t", key, b"").expect("small"),
        version,
        next: Next::Wake,
    };
    let unused = Rc::new(RefCell::new(Vec::new()));
    s.sinks = vec![Box::new(Waking {
        unused: unused.clone(),
    })];
    // k00000 is pending as version 1, k00001 as version 2; "gone" was cancelled.
    for f in [wake("k00000", 1), wake("k00001", 1), wake("gone", 1)] {
        s.deliveries.inbox.send(f);
    }
    assert_eq!(s.follow_up(None), 3);
    assert_eq!(*unused.borrow(), ["k00001", "gone"]);
    let now = s.clock.now().as_micros();
    let woken = s.table.get(
        PackedTimer::new("t", "k00000", b"")
            .expect("small")
            .identity(),
    );
    assert!(woken.is_some_and(|v| v.deadline <= now && v.version == 1));
    let left = s.table.get(
        PackedTimer::new("t", "k00001", b"")
            .expect("small")
            .identity(),
    );
    assert_eq!(left.map(|v| v.deadline), Some(UtcMicros(far.0 + 1)));
}

/// A sink that answers every fire with the same [`Next`].
struct Answers(Next);

impl Sink for Answers {
    fn fired(&mut self, _: &FiredTimer<'_>) -> Next {
        self.0.clone()
    }
}

/// A sink keeps a fired timer (or makes it a dead letter) with delivery metadata longer than
/// a timer can hold: the timer cannot stay, so it is retired. Its quota slot goes back, and
/// the store hears of it: the fire of its own firing, the removal of a step's record (left
/// in the store, a step would fire again after a restart).
#[test]
fn a_timer_kept_with_meta_too_long_to_hold_is_retired_and_its_quota_released() {
    let oversized = vec![0u8; 70_000];
    // A step of its delivery, not its own firing.
    let step = callback_meta(WAITING);
    let keep = Next::Reschedule {
        after: Duration::from_secs(1),
        meta: oversized.clone(),
    };
    let bury = Next::Dead {
        meta: oversized,
        fire_at: UtcMicros(0),
    };
    for (case, meta, next, told) in [
        ("kept, own firing", Vec::new(), keep.clone(), "fired t/k"),
        ("buried, own firing", Vec::new(), bury, "fired t/k"),
        ("kept, a step", step, keep, "cancel t/k"),
    ] {
        let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
        let (mut s, _) = shard(&src);
        let store = Told::default();
        s.store = Box::new(store.clone());
        s.sinks = vec![Box::new(Answers(next))];
        s.quotas = Arc::new(crate::quota::Quotas::new([("t".to_string(), 10)], 1));
        let quota = s.quotas.get("t").cloned().expect("a quota");
        assert!(quota.reserve());
        let due = UtcMicros(s.clock.now().as_micros().0 + 1_000);
        let timer = PackedTimer::with_meta("t", "k", &meta, b"").expect("small");
        s.table.insert_with_version(timer, due, 1).expect("room");
        src.advance(Duration::from_millis(2));
        assert_eq!(s.fire_due(usize::MAX, None).0, 1);
        assert_eq!(
            (s.table.len(), quota.pending()),
            (0, 0),
            "{case}: out of the table, slot released"
        );
        assert_eq!(*store.0.borrow(), [told], "{case}: what the store heard");
    }
}

/// A sink keeps a fired timer: it is re-armed in the same call, under its version, at the
/// sink's deadline (counted from its fire) with the sink's metadata; the store hears of the
/// fire with the timer it became, the quota slot stays taken, and the old bytes wait on the
/// spent list.
#[test]
fn a_kept_timer_is_re_armed_under_its_version_and_written_once() {
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let store = Told::default();
    s.store = Box::new(store.clone());
    s.sinks = vec![Box::new(Answers(Next::Reschedule {
        after: Duration::from_secs(5),
        meta: b"kept".to_vec(),
    }))];
    s.quotas = Arc::new(crate::quota::Quotas::new([("t".to_string(), 10)], 1));
    let quota = s.quotas.get("t").cloned().expect("a quota");
    assert!(quota.reserve());
    let due = UtcMicros(s.clock.now().as_micros().0 + 1_000);
    let timer = PackedTimer::new("t", "k", b"{}").expect("small");
    let slot = s
        .table
        .insert_with_version(timer, due, 7)
        .expect("room")
        .slot;
    src.advance(Duration::from_millis(2));
    let before = s.clock.now().as_micros().0;
    assert_eq!(s.fire_due(usize::MAX, None), (1, More::No));
    // A fire's time is the system clock's, which the mapping trails (`fire.rs`).
    let after = src.realtime().0 / 1_000;
    let kept = s
        .table
        .get(PackedTimer::new("t", "k", b"").expect("small").identity());
    let kept = kept.expect("still pending");
    assert_eq!(kept.version, 7);
    assert!((before + 5_000_000..=after + 5_000_000).contains(&kept.deadline.0));
    assert_eq!(
        (kept.timer.meta(), kept.timer.payload()),
        (&b"kept"[..], &b"{}"[..])
    );
    assert!(
        s.table.timer_at(slot).is_some_and(|t| t.meta() == b"kept"),
        "in its own slab entry"
    );
    assert_eq!(*store.0.borrow(), ["fired_kept t/k"]);
    assert_eq!((quota.pending(), s.spent.0.len()), (1, 1));
}

/// Overdue timers arriving out of order, several sort steps of them: a pass of a shard that
/// shares its thread may sort a step and fire nothing, and it must still count as work, so
/// that the shard yields to the thread's other tasks before the next step; a shard that went
/// on at once kept them waiting through every step (about 37 ms for a million). Every timer
/// still fires once, in deadline order, never early.
#[test]
fn a_pass_that_only_sorted_overdue_timers_counts_as_work_and_all_fire_in_order() {
    use crate::runtime::cooperate::Slice;
    use crate::wheel::SORT_STEP;
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, seen) = shard(&src);
    let now = s.clock.now().as_micros();
    s.table = TimerTable::new(now, 1 << 20);
    let n = 3 * SORT_STEP + 7;
    // Behind the wheel's time and in falling order: each one arrives out of order.
    for i in 0..n as u64 {
        let timer = PackedTimer::new("t", &format!("k{i:06}"), b"").expect("small");
        let deadline = UtcMicros(now.0 - 1 - i);
        s.table
            .insert_with_version(timer, deadline, i + 1)
            .expect("in range");
    }
    let mut sorted_only = 0;
    let mut passes = 0;
    loop {
        passes += 1;
        // One fire a pass, and a pass for each sort step.
        assert!(passes <= 2 * n, "the burst ends");
        // Each pass ends after its first step, as on a host where a step of sorting takes
        // the whole slice: a pass that only sorted is then seen whatever the host's speed
        // (on a fast one, a 200 µs slice held two steps and the count fell short).
        let (fired, more) = s.fire_due(super::pass::FIRE_BATCH, Some(Slice::used_up()));
        if fired == 0 && more == More::Due {
            sorted_only += 1;
            assert!(super::worked(0, 0, 0, more), "a sort step is work: yield");
        }
        if more == More::No {
            break;
        }
    }
    assert!(sorted_only >= 3, "{sorted_only} passes only sorted");
    assert!(!super::worked(0, 0, 0, More::No));
    assert!(!super::worked(0, 0, 0, More::HeldBack));
    assert_all_fired_never_early(&seen, n);
    let seen = seen.borrow();
    assert!(
        seen.windows(2).all(|w| w[0].0 <= w[1].0),
        "in deadline order"
    );
}

/// A sink whose fires cost by their payload's size, as a webhook's do (its body is the
/// payload, read again, copied and signed): 2 ns a byte.
struct BySize {
    fired: Rc<RefCell<Vec<String>>>,
}

impl Sink for BySize {
    fn fired(&mut self, t: &FiredTimer<'_>) -> Next {
        let cost = Duration::from_nanos(2 * t.payload.len() as u64);
        let start = std::time::Instant::now();
        while start.elapsed() < cost {
            std::hint::spin_loop();
        }
        self.fired.borrow_mut().push(t.key.to_string());
        Next::Done
    }
}

/// Timers with 64 KiB payloads on a shared thread: a chunk of 32 of them was about 4 ms
/// before the pass first looked at its 200 µs slice. Chunks are now sized by the bytes
/// fired, so a pass ends after a few of them; every timer still fires once, in order.
#[test]
fn a_pass_of_large_payloads_looks_at_its_slice_after_a_few_of_them() {
    use super::fire::{chunk_after, CHECK_BYTES, CHECK_EVERY};
    use super::pass::FIRE_BATCH;
    assert_eq!(
        chunk_after(32, 32 * 100),
        CHECK_EVERY,
        "small timers: whole chunks"
    );
    assert_eq!(chunk_after(4, 4 * 65_536), 1);
    assert_eq!(chunk_after(1, 16_384), CHECK_BYTES / 16_384);
    assert_eq!(chunk_after(0, 0), CHECK_EVERY);
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let fired = Rc::new(RefCell::new(Vec::new()));
    s.sinks = vec![Box::new(BySize {
        fired: fired.clone(),
    })];
    s.table = TimerTable::new(s.clock.now().as_micros(), 1024);
    let base = src.realtime().0 / 1_000 + 1_000;
    let n = 64;
    for i in 0..n as u64 {
        let timer = PackedTimer::new("t", &format!("k{i:05}"), &[b'x'; 65_536]).expect("fits");
        s.table
            .insert_with_version(timer, UtcMicros(base + i), i + 1)
            .expect("in range");
    }
    src.advance(Duration::from_millis(20));
    let (first, more) = s.fire_due(FIRE_BATCH, Some(Slice::begin()));
    assert!(
        first <= 4 && more == More::Due,
        "one pass fired {first} timers of 64 KiB ({more:?}) before its slice ended"
    );
    let mut passes = 1;
    while s.fire_due(FIRE_BATCH, Some(Slice::begin())).1 != More::No {
        passes += 1;
        assert!(passes <= n, "the passes never ended");
    }
    let expected: Vec<String> = (0..n).map(|i| format!("k{i:05}")).collect();
    assert_eq!(*fired.borrow(), expected, "each once, in deadline order");
}

/// Follow-ups handed over together (deliveries that ended at one instant) are applied a
/// bounded number between looks at the slice: with the slice over, a pass applies one
/// chunk, the first sent, and leaves the rest, in order, for the next passes.
#[test]
fn follow_ups_are_applied_in_order_a_chunk_at_a_time_once_the_slice_is_over() {
    use super::delivery::FOLLOW_UP_CHECK;
    use crate::runtime::cooperate::Slice;
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let far = UtcMicros(s.clock.now().as_micros().0 + 60_000_000);
    let n = 300;
    insert_timers(&mut s.table, n, far, 1);
    for i in 0..n {
        s.deliveries.inbox.send(crate::sink::Followup {
            timer: PackedTimer::new("t", &format!("k{i:05}"), b"").expect("small"),
            version: i as u64 + 1,
            next: Next::Done,
        });
    }
    let over = || {
        let slice = Slice::begin();
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while !slice.is_over() && std::time::Instant::now() < give_up {
            std::hint::spin_loop();
        }
        slice
    };
    assert_eq!(s.follow_up(Some(over())), FOLLOW_UP_CHECK);
    assert_eq!(s.table.len(), n - FOLLOW_UP_CHECK);
    let pending = |key: &str| {
        let t = PackedTimer::new("t", key, b"").expect("small");
        s.table.get(t.identity()).is_some()
    };
    assert!(
        !pending("k00031") && pending("k00032"),
        "the first sent, first"
    );
    let mut passes = 1;
    while s.follow_up(Some(over())) > 0 {
        passes += 1;
    }
    assert_eq!(passes, n.div_ceil(FOLLOW_UP_CHECK));
    assert!(s.table.is_empty());
}

/// A timer that another thread packed is copied into the shard's own heap before the wheel
/// keeps it, so that its fire frees it with a local free; one packed on the shard's thread
/// (`home`) is kept as it is. Both are scheduled, kept and answered alike.
#[test]
fn the_wheel_keeps_a_copy_of_a_timer_packed_elsewhere_and_a_home_one_as_it_is() {
    use crate::op::{reply_channel, Op};
    let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let due = UtcMicros(src.realtime().0 / 1_000 + 1_000_000);
    for home in [false, true] {
        let key = format!("k-{home}");
        let timer = PackedTimer::new("t", &key, b"{\"order\":42}").expect("small");
        let identity = timer.identity().to_vec();
        let packed_at = timer.packed().as_ptr();
        let (tx, mut rx) = reply_channel();
        s.apply(Op::Schedule {
            timer,
            deadline: due,
            reply: Some(tx),
            slot: None,
            home,
        });
        assert!(matches!(rx.try_recv(), Ok(Some(Ok(_)))), "{key} scheduled");
        let kept = s.table.get(&identity).expect("kept");
        assert_eq!((kept.timer.key(), kept.deadline), (key.as_str(), due));
        assert_eq!(kept.timer.payload(), b"{\"order\":42}");
        assert_eq!(
            kept.timer.packed().as_ptr() == packed_at,
            home,
            "{key}: kept as packed only when packed on the shard's thread"
        );
    }
}

/// A shard's thread says whose it is; no other thread does.
#[test]
fn only_a_claimed_thread_is_a_shards() {
    assert_eq!(
        std::thread::spawn(super::on_thread).join().expect("thread"),
        None
    );
    let claimed = std::thread::spawn(|| {
        super::claim_thread(3);
        super::on_thread()
    });
    assert_eq!(claimed.join().expect("thread"), Some(3));
}

/// A DELETE of a key that is not pending and a discard of a dead letter that is not kept are
/// answered by the store once the writes it queued before are durable, never from the tables
/// at once: they may show a cancel or a discard the disk does not hold yet.
#[test]
fn answers_read_from_the_tables_wait_for_the_writes_before_them() {
    use crate::op::{reply_channel, Op};
    let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let store = Told::default();
    s.store = Box::new(store.clone());
    let (tx, mut deleted) = reply_channel();
    let timer = PackedTimer::new("t", "k", b"").expect("small");
    s.apply(Op::Cancel { timer, reply: tx });
    let (tx, mut discarded) = reply_channel();
    let timer = PackedTimer::new("t", "d", b"").expect("small");
    s.apply(Op::DeadDiscard { timer, reply: tx });
    assert_eq!(
        *store.0.borrow(),
        ["answer_after_writes t/", "answer_after_writes t/"]
    );
    assert!(
        matches!(deleted.try_recv(), Ok(None)) && matches!(discarded.try_recv(), Ok(None)),
        "answered before the store's writes"
    );
    for ack in store.1.borrow_mut().drain(..) {
        ack.answer(Ok(()));
    }
    for rx in [&mut deleted, &mut discarded] {
        assert!(matches!(
            rx.try_recv(),
            Ok(Some(Ok(crate::op::Cancelled::NotFound)))
        ));
    }
}
