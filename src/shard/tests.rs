//! The shard's harness (a shard on a fake clock, a store that notes what it is told) and
//! its clock: nothing fires before the system clock reaches its deadline, whatever the clock does.

use super::*;
use crate::clock::{ClockConfig, FakeSource};
use crate::sink::Next;
use crate::timer::{FiredTimer, PackedTimer};
use crate::units::{UtcMicros, UtcNanos};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// (deadline, the system clock when it fired) of each fire.
pub(super) type Seen = Rc<RefCell<Vec<(UtcMicros, UtcNanos)>>>;

/// Records the system clock (the fake CLOCK_REALTIME) at each fire.
pub(super) struct Witness {
    src: FakeSource,
    seen: Seen,
}

impl Sink for Witness {
    fn fired(&mut self, t: &FiredTimer<'_>) -> Next {
        self.seen
            .borrow_mut()
            .push((t.deadline, self.src.realtime()));
        Next::Done
    }
}

/// A shard on a fake TSC and a fake system clock, with the in-memory store.
pub(super) fn shard(src: &FakeSource) -> (Shard<FakeSource>, Seen) {
    shard_on(src.clone(), src)
}

/// A shard whose clock reads `clock_src`, with a witness that reads the system clock
/// of `src`.
pub(super) fn shard_on<S: TimeSource>(clock_src: S, src: &FakeSource) -> (Shard<S>, Seen) {
    let clock = Clock::calibrate(clock_src, ClockConfig::default());
    let (ring, _wakee) = Ring::new(0, 16).expect("ring");
    let seen = Rc::new(RefCell::new(Vec::new()));
    let witness = Witness {
        src: src.clone(),
        seen: seen.clone(),
    };
    let shard = Shard {
        id: 0,
        ring: Arc::new(ring),
        table: TimerTable::new(clock.now().as_micros(), 1024),
        clock,
        spin: super::spin::SpinWindow::fixed(Duration::ZERO),
        sinks: vec![Box::new(witness)],
        store: Box::new(crate::store::memory::MemoryStore),
        metrics: Arc::default(),
        stop: Arc::default(),
        pulse: Arc::default(),
        quotas: Arc::default(),
        deliveries: Default::default(),
        spent: Default::default(),
        gate: Default::default(),
        purging: None,
        pager: None,
        deferred: Default::default(),
        queues: super::ShardQueues::new(Arc::default()),
        recovered_occurrences: Default::default(),
    };
    (shard, seen)
}

/// Timers `k00000`, `k00001`, … of tenant `t`, the first due at `first`, each `step_us` after
/// the one before.
pub(super) fn insert_timers(table: &mut TimerTable, n: usize, first: UtcMicros, step_us: u64) {
    for i in 0..n as u64 {
        let timer = PackedTimer::new("t", &format!("k{i:05}"), b"").expect("small");
        let deadline = UtcMicros(first.0 + i * step_us);
        table
            .insert_with_version(timer, deadline, i + 1)
            .expect("in range");
    }
}

/// `n` timers fired, none before the system clock reached its deadline.
pub(super) fn assert_all_fired_never_early(seen: &Seen, n: usize) {
    let seen = seen.borrow();
    assert_eq!(seen.len(), n, "every timer fired");
    for (deadline, at) in seen.iter() {
        assert!(
            at.0 / 1_000 >= deadline.0,
            "fired at system time {} µs, before its deadline {} µs",
            at.0 / 1_000,
            deadline.0
        );
    }
}

/// The system clock slows down right after an anchor (the end of a fast NTP slew): the
/// mapped clock, still running at the rate it measured, leads it until the next anchor.
/// A timer due in that window must still wait for the system clock.
/// A store that notes what it is told, one line per write (`fired t/k`, `cancel t/k`, …).
#[derive(Clone, Default)]
pub(super) struct Told(
    pub(super) Rc<RefCell<Vec<String>>>,
    /// The answers it was asked to give after its writes, not given.
    pub(super) Rc<RefCell<Vec<crate::store::Ack>>>,
);

impl Told {
    fn note(&self, what: &str, tenant: &str, key: &str) {
        self.0.borrow_mut().push(format!("{what} {tenant}/{key}"));
    }
}

impl Store for Told {
    fn kind(&self) -> &'static str {
        "told"
    }
    fn recover<'a>(
        &'a mut self,
        _: &'a mut dyn FnMut(crate::store::Recovered<'_>) -> bool,
        _: &'a AtomicBool,
    ) -> crate::store::LocalFuture<'a, bool> {
        Box::pin(async { true })
    }
    fn admit(&self, _: &str) -> Result<(), crate::error::Error> {
        Ok(())
    }
    fn has_room(&self, _: &str) -> bool {
        true
    }
    fn refusal(&self) -> crate::error::Error {
        crate::error::Error::StoreUnavailable { retry_after_s: 1 }
    }
    fn ack_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn schedule(&mut self, t: &PackedTimer, _: &crate::op::Scheduled, ack: crate::store::Ack) {
        self.note("schedule", t.tenant(), t.key());
        ack.answer(Ok(()));
    }
    fn cancel(&mut self, tenant: &str, key: &str, ack: crate::store::Ack) {
        self.note("cancel", tenant, key);
        ack.answer(Ok(()));
    }
    fn answer_after_writes(&mut self, tenant: &str, ack: crate::store::Ack) {
        self.note("answer_after_writes", tenant, "");
        self.1.borrow_mut().push(ack);
    }
    fn fired(&mut self, t: &FiredTimer<'_>) {
        self.note("fired", t.tenant, t.key);
    }
    fn fired_kept(&mut self, t: &FiredTimer<'_>, _: &PackedTimer, _: &crate::op::Scheduled) {
        self.note("fired_kept", t.tenant, t.key);
    }
    fn close(&mut self) -> crate::store::LocalFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// The state byte of a callback's metadata (byte 2 of the layout in `webhook/meta.rs`) for a
/// delivery waiting for its next attempt, and for a dead letter.
pub(super) const WAITING: u8 = 2;
pub(super) const DEAD: u8 = 3;

/// A callback's metadata (3 attempts, backoff from 1 s) in `state`.
pub(super) fn callback_meta(state: u8) -> Vec<u8> {
    let retry = crate::sink::webhook::RetryPolicy {
        max_attempts: 3,
        base_delay_ms: 1_000,
        max_delay_ms: 60_000,
    };
    let mut meta = crate::sink::webhook::new_meta("https://h.example/".into(), retry, 0);
    meta[2] = state;
    meta
}

#[test]
fn nothing_fires_before_the_system_clock_reaches_its_deadline() {
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    src.set_realtime_drift_ppb(50_000_000); // a 5% forward slew, learned by the rate tracker
    let (mut s, seen) = shard(&src);
    for _ in 0..20 {
        src.advance(Duration::from_millis(50));
        if s.clock.anchor_due(src.ticks()) {
            s.clock.anchor();
        }
    }
    s.clock.anchor();
    src.set_realtime_drift_ppb(0); // the slew ends: the system clock slows by 5%
    let base = src.realtime().0 / 1_000;
    insert_timers(&mut s.table, 80, UtcMicros(base + 1_000), 1_000);
    // Walk in 50 µs steps, firing as the loop does, without anchoring: only the fire-time
    // check stands between a lead and an early fire.
    for _ in 0..2_000 {
        src.advance(Duration::from_micros(50));
        s.fire_due(usize::MAX, None);
    }
    assert_all_fired_never_early(&seen, 80);
    assert!(
        s.clock.stats().set_backs > 0,
        "the leads were set back at fire time: {:?}",
        s.clock.stats()
    );
}

/// A fake source whose system clock steps by `delta` ns at chosen reads of it: a system
/// clock that moves back again between the shard's anchor and its fire.
struct SteppingSource {
    fake: FakeSource,
    reads: std::sync::atomic::AtomicU64,
    steps: std::sync::Mutex<Vec<(u64, i64)>>,
}

impl TimeSource for SteppingSource {
    fn ticks(&self) -> crate::units::TscTicks {
        self.fake.ticks()
    }
    fn realtime(&self) -> UtcNanos {
        let n = self.reads.fetch_add(1, Ordering::SeqCst);
        let mut steps = self.steps.lock().expect("steps");
        steps.retain(|&(at, delta)| {
            if at == n {
                self.fake.step_realtime(delta);
            }
            at != n
        });
        self.fake.realtime()
    }
    fn pause(&self, dur: Duration) {
        self.fake.pause(dur)
    }
    fn kind(&self) -> crate::clock::SourceKind {
        self.fake.kind()
    }
}

/// The system clock moves back 1 ms just before a fire (the mapped clock now leads it),
/// and again 1 ms just after the anchor that sets the lead back: the time the shard
/// fires by is checked against the system clock once more, so nothing fires early.
#[test]
fn nothing_fires_early_when_the_system_clock_moves_back_again_after_the_set_back() {
    let fake = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let src = SteppingSource {
        fake: fake.clone(),
        reads: Default::default(),
        steps: Default::default(),
    };
    let (mut s, seen) = shard_on(src, &fake);
    let base = fake.realtime().0 / 1_000;
    insert_timers(&mut s.table, 20, UtcMicros(base + 1_000), 100);
    fake.advance(Duration::from_micros(2_500));
    // The next read (the fire-time check) sees a step back; the anchor's sample takes
    // the seven reads after it; the one after those sees a second step back.
    let next = s.clock.source().reads.load(Ordering::SeqCst);
    let tries = u64::from(ClockConfig::default().sample_tries);
    *s.clock.source().steps.lock().expect("steps") =
        vec![(next, -1_000_000), (next + 1 + tries, -1_000_000)];
    for _ in 0..200 {
        s.fire_due(usize::MAX, None);
        fake.advance(Duration::from_micros(50));
    }
    assert_all_fired_never_early(&seen, 20);
}

/// Records each fire's `fired_at`, as the shard reports it to sinks and streams.
struct FiredAt(Rc<RefCell<Vec<(UtcMicros, UtcNanos)>>>);

impl Sink for FiredAt {
    fn fired(&mut self, t: &FiredTimer<'_>) -> Next {
        self.0.borrow_mut().push((t.deadline, t.fired_at));
        Next::Done
    }
}

/// The mapped clock trails the system clock by about its lag target (`clock`): a timer fires
/// once the system clock reaches its deadline, not a lag later when the mapping does, and its
/// `fired_at` is not before its deadline although the mapping still is.
#[test]
fn a_timer_fires_when_the_system_clock_reaches_it_not_the_trailing_mapping() {
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, seen) = shard(&src);
    let reported = Rc::new(RefCell::new(Vec::new()));
    s.sinks.push(Box::new(FiredAt(reported.clone())));
    let due = UtcMicros(src.realtime().0 / 1_000 + 1_000);
    insert_timers(&mut s.table, 1, due, 0);
    let to_due = due.as_nanos().0 - src.realtime().0;
    src.advance(Duration::from_nanos(to_due - 1));
    assert_eq!(s.fire_due(usize::MAX, None).0, 0, "1 ns before: not due");
    src.advance(Duration::from_nanos(1));
    assert!(
        s.clock.now() < due.as_nanos(),
        "the mapping trails the system clock: {:?} against {:?}",
        s.clock.now(),
        due.as_nanos()
    );
    assert_eq!(s.fire_due(usize::MAX, None).0, 1, "due by the system clock");
    assert_all_fired_never_early(&seen, 1);
    let reported = reported.borrow();
    assert_eq!(reported.len(), 1);
    assert!(
        reported[0].1 >= due.as_nanos(),
        "fired_at {:?} before the deadline {:?}",
        reported[0].1,
        due.as_nanos()
    );
}

/// A fake TSC that moves 50 ns at each read.
struct Ticking(FakeSource);

impl TimeSource for Ticking {
    fn ticks(&self) -> crate::units::TscTicks {
        self.0.advance(Duration::from_nanos(50));
        self.0.ticks()
    }
    fn realtime(&self) -> UtcNanos {
        self.0.realtime()
    }
    fn pause(&self, dur: Duration) {
        self.0.pause(dur)
    }
    fn kind(&self) -> crate::clock::SourceKind {
        self.0.kind()
    }
}

/// Each fire of a burst reads the clock for its own `fired_at`: a reading shared by a few
/// fires would be before the later ones' hand-over by the earlier ones' work, which a sink
/// (another tenant's webhook, a handler) does not bound, and would make their lateness read
/// low exactly when the shard is busiest. On a TSC that moves at each read, every fire's
/// `fired_at` is later than the one before, and none is before its deadline.
#[test]
fn every_fire_of_a_burst_reads_the_clock_for_its_own_fired_at() {
    let fake = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard_on(Ticking(fake.clone()), &fake);
    let reported = Rc::new(RefCell::new(Vec::new()));
    s.sinks.push(Box::new(FiredAt(reported.clone())));
    const N: usize = 200;
    let due = UtcMicros(fake.realtime().0 / 1_000 + 1_000);
    insert_timers(&mut s.table, N, due, 0);
    fake.advance(Duration::from_millis(1));
    let mut fired = 0;
    for _ in 0..100 {
        fired += s.fire_due(usize::MAX, None).0;
        if fired == N as u64 {
            break;
        }
        fake.advance(Duration::from_micros(10));
    }
    let reported = reported.borrow();
    assert_eq!(reported.len(), N, "the whole burst fired");
    for (i, (deadline, at)) in reported.iter().enumerate() {
        assert!(
            *at >= deadline.as_nanos(),
            "fire {i}: {at:?} before {deadline:?}"
        );
        if i > 0 {
            let before = reported[i - 1].1;
            assert!(
                before < *at,
                "fire {i} shares or precedes fire {}'s reading: {before:?}, {at:?}",
                i - 1
            );
        }
    }
}

/// The wait before a deadline ends on the mapping 2 µs (the lag allowance) early, and then on
/// the system clock at the deadline itself: a spin whose system clock has not reached the
/// deadline goes on (bounded by its limit), one whose has ends at once.
#[test]
fn the_wait_ends_on_the_system_clock_at_the_deadline() {
    let src = FakeSource::new(crate::units::UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let due = UtcMicros(src.realtime().0 / 1_000 + 1_000);
    insert_timers(&mut s.table, 1, due, 0);
    // 1 µs before it, the passes have cascaded the timer down to the lowest level, where the
    // wheel reports its own deadline, not the start of a higher level's slot.
    src.advance(Duration::from_nanos(
        due.as_nanos().0 - src.realtime().0 - 1_000,
    ));
    for _ in 0..10 {
        assert_eq!(s.fire_due(usize::MAX, None).0, 0, "not due yet");
    }
    let wake = s.next_wake();
    assert_eq!(
        wake,
        super::park::Wake {
            mapped: UtcNanos(due.as_nanos().0 - 2_000),
            deadline: Some(due.as_nanos()),
        }
    );
    // The mapping is past its part, the system clock 1 ns short of the deadline: the spin
    // does not end by itself, only at its limit.
    src.advance(Duration::from_nanos(
        due.as_nanos().0 - src.realtime().0 - 1,
    ));
    assert!(s.clock.now() >= wake.mapped);
    assert!(
        !s.spin_until(wake, Duration::from_millis(5)),
        "ended by its limit"
    );
    src.advance(Duration::from_nanos(1));
    assert!(
        s.spin_until(wake, Duration::from_secs(60)),
        "at the deadline"
    );
}
