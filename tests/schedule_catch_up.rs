//! Catch-up after downtime: a schedule's fires simulated over a run with downtimes and clock
//! steps, under each policy. Every occurrence fires at most once, in order, with contiguous
//! sequence numbers; the ones that do not fire are exactly those the policy passes over.

use punctual::schedule::{
    CatchUpPolicy, CatchUpSpec, Cursor, Limits, Schedule, ScheduleSpec, MAX_FIRES_PER_CALL,
};
use punctual::UtcMicros;
use std::collections::BTreeSet;
use std::time::Duration;

const S: u64 = 1_000_000;
/// 2027-01-01T00:00:00Z
const T0: u64 = 1_798_761_600 * S;
const ON_TIME: Duration = Duration::from_secs(1);

fn schedule(
    rule: (&str, u64),
    policy: CatchUpPolicy,
    window_ms: u64,
    max: Option<u64>,
) -> Schedule {
    let (cron, every_ms) = rule;
    ScheduleSpec {
        cron: (!cron.is_empty()).then(|| cron.to_string()),
        every_ms: (every_ms > 0).then_some(every_ms),
        start_at: Some("2027-01-01T00:00:00Z".into()),
        max_occurrences: max,
        catch_up: Some(CatchUpSpec {
            policy,
            window_ms: Some(window_ms),
        }),
        ..ScheduleSpec::default()
    }
    .compile(UtcMicros(T0), &Limits::default())
    .expect("valid")
}

/// Runs the schedule as a shard would: wake at each armed occurrence (a little late) while
/// up, not at all while down, and call `due` until it has no more. Returns every fire's
/// occurrence, the total skipped, and the caught-up count.
struct Run {
    fired: Vec<u64>,
    skipped: u64,
    caught_up: u64,
    cursor: Cursor,
}

fn run(s: &Schedule, until: u64, down: &[(u64, u64)]) -> Run {
    let mut r = Run {
        fired: Vec::new(),
        skipped: 0,
        caught_up: 0,
        cursor: Cursor::default(),
    };
    let mut armed = s.first().map(|o| o.at.0);
    while let Some(at) = armed {
        if at > until {
            break;
        }
        // The wake-up: 2 ms late, or at the end of the downtime that covers it.
        let mut now = at + 2_000;
        for &(from, to) in down {
            if (from..to).contains(&now) {
                now = to;
            }
        }
        loop {
            let due = s.due(r.cursor, UtcMicros(now), ON_TIME);
            let mut seq = r.cursor.sequence;
            for f in &due.fires {
                seq += 1;
                assert_eq!(f.sequence, seq, "sequence numbers are contiguous");
                assert!(f.occurrence.at.0 <= now, "fired before its time");
                r.fired.push(f.occurrence.at.0);
                r.caught_up += f.caught_up as u64;
            }
            r.skipped += due.skipped;
            assert!(
                due.cursor.through >= r.cursor.through,
                "the cursor went back"
            );
            r.cursor = due.cursor;
            if !due.more {
                armed = due.next.map(|o| o.at.0);
                if let Some(n) = armed {
                    assert!(n > now, "armed {n} is not after now {now}");
                }
                break;
            }
        }
    }
    let distinct: BTreeSet<u64> = r.fired.iter().copied().collect();
    assert_eq!(distinct.len(), r.fired.len(), "an occurrence fired twice");
    assert!(
        r.fired.windows(2).all(|w| w[0] < w[1]),
        "fires out of order"
    );
    r
}

fn every_minute(policy: CatchUpPolicy, window_ms: u64) -> Schedule {
    schedule(("", 60_000), policy, window_ms, None)
}

#[test]
fn without_downtime_every_occurrence_fires_once_on_time_under_every_policy() {
    for policy in [
        CatchUpPolicy::Skip,
        CatchUpPolicy::Latest,
        CatchUpPolicy::All,
    ] {
        let r = run(&every_minute(policy, 3_600_000), T0 + 3_600 * S, &[]);
        let want: Vec<u64> = (0..=60).map(|k| T0 + k * 60 * S).collect();
        assert_eq!(r.fired, want, "{policy:?}");
        assert_eq!((r.skipped, r.caught_up), (0, 0), "{policy:?}");
    }
}

#[test]
fn ten_minutes_down_fires_the_latest_once_all_in_order_or_none() {
    // Down from 00:05:30 to 00:15:30: the occurrences 00:06 … 00:15 (10) are missed.
    let down = [(T0 + 330 * S, T0 + 930 * S)];
    let until = T0 + 1_800 * S;
    let r = run(
        &every_minute(CatchUpPolicy::Latest, 3_600_000),
        until,
        &down,
    );
    assert_eq!((r.caught_up, r.skipped), (1, 9));
    assert!(r.fired.contains(&(T0 + 900 * S)) && !r.fired.contains(&(T0 + 840 * S)));
    assert_eq!(r.fired.len(), 31 - 9);

    let r = run(&every_minute(CatchUpPolicy::All, 3_600_000), until, &down);
    let want: Vec<u64> = (0..=30).map(|k| T0 + k * 60 * S).collect();
    assert_eq!(r.fired, want, "all: every occurrence, once, in order");
    assert_eq!((r.caught_up, r.skipped), (10, 0));

    let r = run(&every_minute(CatchUpPolicy::Skip, 3_600_000), until, &down);
    assert_eq!((r.caught_up, r.skipped, r.fired.len()), (0, 10, 21));
}

#[test]
fn the_window_bounds_what_catches_up() {
    // 3-minute window: of the 10 missed, only those at most 3 minutes old at 00:15:30 fire.
    let down = [(T0 + 330 * S, T0 + 930 * S)];
    let r = run(
        &every_minute(CatchUpPolicy::All, 180_000),
        T0 + 1_800 * S,
        &down,
    );
    assert_eq!((r.caught_up, r.skipped), (3, 7));
    // Latest with a window shorter than the distance to the last missed one: nothing.
    let down = [(T0 + 330 * S, T0 + 950 * S)];
    let r = run(
        &every_minute(CatchUpPolicy::Latest, 10_000),
        T0 + 1_800 * S,
        &down,
    );
    assert_eq!((r.caught_up, r.skipped), (0, 10));
}

#[test]
fn all_over_a_long_window_fires_in_calls_of_a_bounded_size_each_once() {
    let s = schedule(("", 1_000), CatchUpPolicy::All, 7 * 86_400_000, None);
    let down = [(T0 + 10 * S, T0 + 3_610 * S)];
    let r = run(&s, T0 + 3_620 * S, &down);
    let want: Vec<u64> = (0..=3_620).map(|k| T0 + k * S).collect();
    assert_eq!(r.fired, want);
    assert!(r.caught_up as usize > 3 * MAX_FIRES_PER_CALL);
}

#[test]
fn a_backward_clock_step_fires_nothing_again_and_a_forward_one_follows_the_policy() {
    let s = every_minute(CatchUpPolicy::Latest, 3_600_000);
    let first = s.due(Cursor::default(), UtcMicros(T0 + 125 * S), ON_TIME);
    // 00:00, 00:01, 00:02 were due at 00:02:05: the latest (00:02) fires, two skipped.
    assert_eq!(first.fires.len(), 1);
    assert_eq!(first.fires[0].occurrence.at.0, T0 + 120 * S);
    assert_eq!(first.skipped, 2);
    // The wall clock steps back 120 s: nothing fires, nothing is skipped again.
    let back = s.due(first.cursor, UtcMicros(T0 + 5 * S), ON_TIME);
    assert!(back.fires.is_empty() && back.skipped == 0, "{back:?}");
    assert_eq!(back.next.map(|o| o.at.0), Some(T0 + 180 * S));
    // Forward 120 s past 00:03: 00:03 and 00:04 are due, the latest (00:04) fires.
    let fwd = s.due(back.cursor, UtcMicros(T0 + 245 * S), ON_TIME);
    let fired: Vec<u64> = fwd.fires.iter().map(|f| f.occurrence.at.0).collect();
    assert_eq!((fired, fwd.skipped), (vec![T0 + 240 * S], 1));
    assert_eq!(fwd.fires[0].sequence, 2);
}

#[test]
fn max_occurrences_ends_the_schedule_after_that_many_fires() {
    let s = schedule(("", 60_000), CatchUpPolicy::All, 3_600_000, Some(5));
    let down = [(T0 + 30 * S, T0 + 600 * S)];
    let r = run(&s, T0 + 3_600 * S, &down);
    assert_eq!(r.fired, (0..5).map(|k| T0 + k * 60 * S).collect::<Vec<_>>());
    let after = s.due(r.cursor, UtcMicros(T0 + 7_200 * S), ON_TIME);
    assert!(after.fires.is_empty() && after.next.is_none());
}

#[test]
fn a_cron_catches_up_as_a_period_does() {
    // Every 10 s, down for an hour: 360 missed, the latest fires once.
    let s = schedule(
        ("*/10 * * * * *", 0),
        CatchUpPolicy::Latest,
        7_200_000,
        None,
    );
    let down = [(T0 + 5 * S, T0 + 3_605 * S)];
    let r = run(&s, T0 + 3_700 * S, &down);
    assert_eq!((r.caught_up, r.skipped), (1, 359));
    assert!(r.fired.contains(&(T0 + 3_600 * S)));
    let s = schedule(("*/10 * * * * *", 0), CatchUpPolicy::All, 7_200_000, None);
    let r = run(&s, T0 + 3_700 * S, &down);
    assert_eq!(
        r.fired,
        (0..=370).map(|k| T0 + k * 10 * S).collect::<Vec<_>>()
    );
}

#[test]
fn a_schedule_created_after_its_start_misses_nothing_from_before_its_creation() {
    // start_at 00:00, created at 00:10:30: 00:00 … 00:10 were never due.
    let s = every_minute(CatchUpPolicy::All, 3_600_000);
    let cursor = Cursor::new(UtcMicros(T0 + 630 * S));
    let armed = s.armed(cursor).expect("an occurrence to arm");
    assert_eq!(armed.at.0, T0 + 660 * S);
    let due = s.due(cursor, UtcMicros(T0 + 660 * S + 2_000), ON_TIME);
    let fired: Vec<(u64, u64, bool)> = due
        .fires
        .iter()
        .map(|f| (f.occurrence.at.0, f.sequence, f.caught_up))
        .collect();
    assert_eq!(fired, [(T0 + 660 * S, 1, false)]);
    assert_eq!(due.skipped, 0);
}

#[test]
fn the_preview_starts_at_the_armed_occurrence_and_stops_at_max_occurrences() {
    let s = schedule(("", 60_000), CatchUpPolicy::Latest, 3_600_000, Some(3));
    let at = |v: Vec<punctual::schedule::Occurrence>| v.iter().map(|o| o.at.0).collect::<Vec<_>>();
    let fresh = Cursor::new(UtcMicros(T0 - 1));
    assert_eq!(at(s.preview(fresh, 5)), [T0, T0 + 60 * S, T0 + 120 * S]);
    let one_fired = Cursor {
        sequence: 1,
        through: Some(UtcMicros(T0 + 2_000)),
    };
    assert_eq!(at(s.preview(one_fired, 5)), [T0 + 60 * S, T0 + 120 * S]);
    assert_eq!(at(s.preview(one_fired, 1)), [T0 + 60 * S]);
    let done = Cursor {
        sequence: 3,
        through: Some(UtcMicros(T0 + 120 * S)),
    };
    assert!(s.preview(done, 5).is_empty());
}
