//! A schedule's catch-up on one shard, on a fake clock: an occurrence the shard reaches late
//! because it was busy is on time (it fell due while the shard ran), and only a forward step
//! of the system clock (or a downtime) misses one.

use crate::clock::FakeSource;
use crate::op::Op;
use crate::partition::schedule_key;
use crate::schedule::{Limits, ScheduleRecord};
use crate::shard::tests::shard;
use crate::shard::Shard;
use crate::timer::PackedTimer;
use crate::units::UtcNanos;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A schedule every second with `catch_up` `skip`, first due a second from now.
fn skip_every_second(s: &mut Shard<FakeSource>) {
    let now = s.clock.now().as_micros();
    let def = r#"{"every_ms": 1000, "catch_up": {"policy": "skip"}}"#;
    let (record, schedule) =
        ScheduleRecord::create(def, now, &Limits::default()).expect("a valid definition");
    let first = record.armed_at(&schedule, now).expect("an occurrence");
    let timer =
        PackedTimer::with_meta("t", &schedule_key("tick"), b"", &record.encode()).expect("small");
    s.apply(Op::Schedule {
        timer,
        deadline: first,
        reply: None,
        slot: None,
        home: true,
    });
}

/// Fires what is due, a few passes (each occurrence is a timer of its own, armed after the
/// pass that fired its schedule); (occurrences, skipped).
fn passes(s: &mut Shard<FakeSource>) -> (u64, u64) {
    for _ in 0..8 {
        s.fire_due(usize::MAX, None);
    }
    let m = &s.metrics;
    (
        m.schedule_occurrences_total.load(Ordering::Relaxed),
        m.schedule_skipped_total.load(Ordering::Relaxed),
    )
}

#[test]
fn occurrences_a_busy_shard_reaches_late_are_on_time_and_all_fire_under_skip() {
    let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    skip_every_second(&mut s);
    // Due at +1 s, +2 s, +3 s, +4 s; the shard gets to them at +4.5 s.
    src.advance(Duration::from_millis(4_500));
    assert_eq!(
        passes(&mut s),
        (4, 0),
        "each fell due while the shard ran: none missed"
    );
}

#[test]
fn occurrences_a_forward_clock_step_jumps_over_are_missed_under_skip() {
    let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    skip_every_second(&mut s);
    src.advance(Duration::from_millis(1_200));
    assert_eq!(passes(&mut s), (1, 0), "the first, on time");
    // The system clock jumps 10 s ahead; the shard's next anchor follows it.
    src.step_realtime(10_000_000_000);
    s.clock.anchor();
    let (fired, skipped) = passes(&mut s);
    assert!(
        skipped >= 8,
        "the occurrences jumped over are missed: {fired} fired, {skipped} skipped"
    );
    assert!(
        fired <= 3,
        "{fired} fired: the jumped-over ones are not on time"
    );
}

/// A crash between an occurrence's record and its schedule's moved cursor brings back both:
/// the occurrence fires from its own record, and when the schedule fires after it (they fall
/// due at the same instant, in either order) it must not arm that occurrence again, which
/// would deliver it twice under two versions.
#[test]
fn a_recovered_occurrence_that_fired_before_its_schedule_is_not_armed_again() {
    use crate::partition::occurrence_key;
    use crate::units::UtcMicros;
    let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let now = s.clock.now().as_micros();
    let def = r#"{"every_ms": 1000}"#;
    let (record, schedule) =
        ScheduleRecord::create(def, now, &Limits::default()).expect("a valid definition");
    let first = record.armed_at(&schedule, now).expect("an occurrence");
    // What the store hands back: the schedule's record with its cursor still before `first`,
    // and the occurrence at `first`, armed before the crash. Here the occurrence falls due
    // first: the order a pass may take them in.
    let schedule_timer =
        PackedTimer::with_meta("t", &schedule_key("tick"), b"", &record.encode()).expect("small");
    let occurrence = PackedTimer::new("t", &occurrence_key("tick", first.0), b"{}").expect("small");
    let mut loader = super::super::recover::Loader {
        queues: &mut s.queues,
        table: &mut s.table,
        dead: &mut s.deliveries.dead,
        quotas: &s.quotas,
        metrics: &s.metrics,
        pager: None,
        occurrences: &mut s.recovered_occurrences,
    };
    assert!(loader.insert(occurrence.clone(), 10, first));
    assert!(loader.insert(schedule_timer, 11, UtcMicros(first.0 + 1_000)));
    src.advance(Duration::from_micros(first.0 - now.0 + 500));
    s.fire_due(usize::MAX, None);
    assert!(
        s.table.get(occurrence.identity()).is_none(),
        "the occurrence fired from its own record"
    );
    src.advance(Duration::from_millis(1));
    s.fire_due(usize::MAX, None);
    assert!(
        s.table.get(occurrence.identity()).is_none(),
        "the schedule armed the recovered occurrence again"
    );
    // The schedule goes on: its next occurrence is its own to arm.
    src.advance(Duration::from_secs(1));
    passes(&mut s);
    let planned = s.metrics.schedule_occurrences_total.load(Ordering::Relaxed);
    assert_eq!(planned, 2, "the recovered one, then the next");
}
