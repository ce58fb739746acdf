//! Recurring schedules against the calendar: each table is a cron, a zone, a daylight-saving
//! policy, an instant to ask after, and the local times that must come next, across the
//! spring-forward gaps and fall-back overlaps of several zones (one with a 30-minute change,
//! one whose change is at midnight, one that skipped a whole day), month ends and Feb 29.

use punctual::schedule::{DstSpec, Gap, Limits, Overlap, Schedule, ScheduleSpec, SpecError};
use punctual::UtcMicros;

fn at(t: &str) -> UtcMicros {
    let ts: jiff::Timestamp = t.parse().expect("an RFC 3339 time");
    UtcMicros(ts.as_microsecond() as u64)
}

fn cron(expr: &str, zone: &str, gap: Gap, overlap: Overlap) -> Schedule {
    ScheduleSpec {
        cron: Some(expr.into()),
        time_zone: Some(zone.into()),
        dst: Some(DstSpec { gap, overlap }),
        ..ScheduleSpec::default()
    }
    .compile(at("2000-01-01T00:00:00Z"), &Limits::default())
    .unwrap_or_else(|e| panic!("{expr} in {zone}: {e}"))
}

/// The local times (RFC 3339 with offset) of the next `n` occurrences after `after`.
fn next(s: &Schedule, after: &str, n: usize) -> Vec<String> {
    s.upcoming(at(after), n).iter().map(|o| o.local()).collect()
}

/// One row: cron, zone, gap, overlap, after, the local times expected next.
type Row<'a> = (&'a str, &'a str, Gap, Overlap, &'a str, &'a [&'a str]);

fn check(rows: &[Row]) {
    let mut wrong = Vec::new();
    for (expr, zone, gap, overlap, after, want) in rows {
        let got = next(&cron(expr, zone, *gap, *overlap), after, want.len());
        if got != *want {
            wrong.push(format!(
                "{expr:?} {zone} gap {gap:?} overlap {overlap:?} after {after}:\n  want {want:?}\n  got  {got:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

use Gap::{Shift, Skip};
use Overlap::{Both, First, Last};

#[test]
fn new_york_2027_at_half_past_two_shifts_or_skips_in_the_gap_and_fires_once_in_the_overlap() {
    let ny = "America/New_York";
    let spring = "2027-03-12T12:00:00Z";
    let fall = "2027-11-06T12:00:00Z";
    let mut rows: Vec<Row> = Vec::new();
    for overlap in [First, Last, Both] {
        rows.push((
            "30 2 * * *",
            ny,
            Shift,
            overlap,
            spring,
            &[
                "2027-03-13T02:30:00-05:00",
                "2027-03-14T03:30:00-04:00",
                "2027-03-15T02:30:00-04:00",
            ],
        ));
        rows.push((
            "30 2 * * *",
            ny,
            Skip,
            overlap,
            spring,
            &["2027-03-13T02:30:00-05:00", "2027-03-15T02:30:00-04:00"],
        ));
        for gap in [Shift, Skip] {
            // 02:30 on 2027-11-07 occurs once (the repeated hour is 01:00-02:00).
            rows.push((
                "30 2 * * *",
                ny,
                gap,
                overlap,
                fall,
                &["2027-11-07T02:30:00-05:00", "2027-11-08T02:30:00-05:00"],
            ));
            // 01:30 exists once on the spring day.
            rows.push((
                "30 1 * * *",
                ny,
                gap,
                overlap,
                spring,
                &[
                    "2027-03-13T01:30:00-05:00",
                    "2027-03-14T01:30:00-05:00",
                    "2027-03-15T01:30:00-04:00",
                ],
            ));
        }
    }
    check(&rows);
}

#[test]
fn new_york_2027_at_half_past_one_in_the_overlap_follows_first_last_or_both() {
    let ny = "America/New_York";
    let fall = "2027-11-06T12:00:00Z";
    let mut rows: Vec<Row> = Vec::new();
    for gap in [Shift, Skip] {
        rows.push((
            "30 1 * * *",
            ny,
            gap,
            First,
            fall,
            &["2027-11-07T01:30:00-04:00", "2027-11-08T01:30:00-05:00"],
        ));
        rows.push((
            "30 1 * * *",
            ny,
            gap,
            Last,
            fall,
            &["2027-11-07T01:30:00-05:00", "2027-11-08T01:30:00-05:00"],
        ));
        rows.push((
            "30 1 * * *",
            ny,
            gap,
            Both,
            fall,
            &[
                "2027-11-07T01:30:00-04:00",
                "2027-11-07T01:30:00-05:00",
                "2027-11-08T01:30:00-05:00",
            ],
        ));
    }
    check(&rows);
}

#[test]
fn a_wildcard_hour_fires_in_every_real_hour_once_through_both_changes_under_every_policy() {
    let ny = "America/New_York";
    let mut rows: Vec<Row> = Vec::new();
    for gap in [Shift, Skip] {
        for overlap in [First, Last, Both] {
            rows.push((
                "30 * * * *",
                ny,
                gap,
                overlap,
                "2027-03-14T04:00:00Z",
                &[
                    "2027-03-13T23:30:00-05:00",
                    "2027-03-14T00:30:00-05:00",
                    "2027-03-14T01:30:00-05:00",
                    "2027-03-14T03:30:00-04:00",
                    "2027-03-14T04:30:00-04:00",
                ],
            ));
            rows.push((
                "30 * * * *",
                ny,
                gap,
                overlap,
                "2027-11-07T03:00:00Z",
                &[
                    "2027-11-06T23:30:00-04:00",
                    "2027-11-07T00:30:00-04:00",
                    "2027-11-07T01:30:00-04:00",
                    "2027-11-07T01:30:00-05:00",
                    "2027-11-07T02:30:00-05:00",
                ],
            ));
        }
    }
    check(&rows);
}

#[test]
fn london_2027_changes_at_one_in_the_morning() {
    let l = "Europe/London";
    let spring = "2027-03-27T12:00:00Z";
    let fall = "2027-10-30T12:00:00Z";
    check(&[
        (
            "30 1 * * *",
            l,
            Shift,
            First,
            spring,
            &["2027-03-28T02:30:00+01:00", "2027-03-29T01:30:00+01:00"],
        ),
        (
            "30 1 * * *",
            l,
            Skip,
            First,
            spring,
            &["2027-03-29T01:30:00+01:00"],
        ),
        (
            "30 1 * * *",
            l,
            Shift,
            First,
            fall,
            &["2027-10-31T01:30:00+01:00", "2027-11-01T01:30:00+00:00"],
        ),
        (
            "30 1 * * *",
            l,
            Shift,
            Last,
            fall,
            &["2027-10-31T01:30:00+00:00", "2027-11-01T01:30:00+00:00"],
        ),
        (
            "30 1 * * *",
            l,
            Skip,
            Both,
            fall,
            &["2027-10-31T01:30:00+01:00", "2027-10-31T01:30:00+00:00"],
        ),
    ]);
}

#[test]
fn lord_howe_2027_moves_by_thirty_minutes() {
    let lh = "Australia/Lord_Howe";
    // Spring forward 2027-10-03 02:00 +10:30 -> 02:30 +11; fall back 2027-04-04 02:00 +11 -> 01:30 +10:30.
    check(&[
        (
            "15 2 * * *",
            lh,
            Shift,
            First,
            "2027-10-02T00:00:00Z",
            &["2027-10-03T02:45:00+11:00", "2027-10-04T02:15:00+11:00"],
        ),
        (
            "15 2 * * *",
            lh,
            Skip,
            First,
            "2027-10-02T00:00:00Z",
            &["2027-10-04T02:15:00+11:00"],
        ),
        (
            "45 1 * * *",
            lh,
            Shift,
            First,
            "2027-04-03T00:00:00Z",
            &["2027-04-04T01:45:00+11:00", "2027-04-05T01:45:00+10:30"],
        ),
        (
            "45 1 * * *",
            lh,
            Shift,
            Last,
            "2027-04-03T00:00:00Z",
            &["2027-04-04T01:45:00+10:30", "2027-04-05T01:45:00+10:30"],
        ),
        (
            "45 1 * * *",
            lh,
            Shift,
            Both,
            "2027-04-03T00:00:00Z",
            &["2027-04-04T01:45:00+11:00", "2027-04-04T01:45:00+10:30"],
        ),
        // 02:00 shifts to 02:30, which the cron names anyway: one fire.
        (
            "0,30 * * * *",
            lh,
            Shift,
            First,
            "2027-10-02T14:30:00Z",
            &[
                "2027-10-03T01:30:00+10:30",
                "2027-10-03T02:30:00+11:00",
                "2027-10-03T03:00:00+11:00",
            ],
        ),
        (
            "0,30 * * * *",
            lh,
            Skip,
            First,
            "2027-10-02T14:30:00Z",
            &[
                "2027-10-03T01:30:00+10:30",
                "2027-10-03T02:30:00+11:00",
                "2027-10-03T03:00:00+11:00",
            ],
        ),
    ]);
}

#[test]
fn apia_skipped_2011_12_30_whole_and_a_shifted_noon_lands_on_the_next_days_noon_once() {
    let apia = "Pacific/Apia";
    check(&[
        (
            "0 12 * * *",
            apia,
            Shift,
            First,
            "2011-12-28T00:00:00Z",
            &[
                "2011-12-28T12:00:00-10:00",
                "2011-12-29T12:00:00-10:00",
                "2011-12-31T12:00:00+14:00",
                "2012-01-01T12:00:00+14:00",
            ],
        ),
        (
            "0 12 * * *",
            apia,
            Skip,
            First,
            "2011-12-28T00:00:00Z",
            &[
                "2011-12-28T12:00:00-10:00",
                "2011-12-29T12:00:00-10:00",
                "2011-12-31T12:00:00+14:00",
            ],
        ),
        // Only the 30th: shifted by the day it lost, or skipped to the next year's.
        (
            "0 12 30 12 *",
            apia,
            Shift,
            First,
            "2011-12-01T00:00:00Z",
            &["2011-12-31T12:00:00+14:00", "2012-12-30T12:00:00+14:00"],
        ),
        (
            "0 12 30 12 *",
            apia,
            Skip,
            First,
            "2011-12-01T00:00:00Z",
            &["2012-12-30T12:00:00+14:00"],
        ),
    ]);
}

#[test]
fn kolkata_and_santiago_offsets_and_a_change_at_midnight() {
    check(&[
        (
            "0 9 * * *",
            "Asia/Kolkata",
            Shift,
            First,
            "2027-06-01T00:00:00Z",
            &["2027-06-01T09:00:00+05:30", "2027-06-02T09:00:00+05:30"],
        ),
        // Santiago springs forward at 00:00 (to 01:00) on 2027-09-05 and falls back at
        // 00:00 (to 23:00 the day before) on 2027-04-04.
        (
            "0 0 * * *",
            "America/Santiago",
            Shift,
            First,
            "2027-09-03T12:00:00Z",
            &[
                "2027-09-04T00:00:00-04:00",
                "2027-09-05T01:00:00-03:00",
                "2027-09-06T00:00:00-03:00",
            ],
        ),
        (
            "0 0 * * *",
            "America/Santiago",
            Skip,
            First,
            "2027-09-03T12:00:00Z",
            &["2027-09-04T00:00:00-04:00", "2027-09-06T00:00:00-03:00"],
        ),
        (
            "30 23 * * *",
            "America/Santiago",
            Shift,
            First,
            "2027-04-03T12:00:00Z",
            &["2027-04-03T23:30:00-03:00", "2027-04-04T23:30:00-04:00"],
        ),
        (
            "30 23 * * *",
            "America/Santiago",
            Shift,
            Last,
            "2027-04-03T12:00:00Z",
            &["2027-04-03T23:30:00-04:00", "2027-04-04T23:30:00-04:00"],
        ),
    ]);
}

#[test]
fn month_ends_and_february_the_29th() {
    let utc = "UTC";
    check(&[
        (
            "0 0 L * *",
            utc,
            Shift,
            First,
            "2027-01-15T00:00:00Z",
            &[
                "2027-01-31T00:00:00+00:00",
                "2027-02-28T00:00:00+00:00",
                "2027-03-31T00:00:00+00:00",
                "2027-04-30T00:00:00+00:00",
            ],
        ),
        (
            "0 0 L 2 *",
            utc,
            Shift,
            First,
            "2027-01-01T00:00:00Z",
            &["2027-02-28T00:00:00+00:00", "2028-02-29T00:00:00+00:00"],
        ),
        (
            "0 0 31 * *",
            utc,
            Shift,
            First,
            "2027-01-15T00:00:00Z",
            &[
                "2027-01-31T00:00:00+00:00",
                "2027-03-31T00:00:00+00:00",
                "2027-05-31T00:00:00+00:00",
                "2027-07-31T00:00:00+00:00",
            ],
        ),
        (
            "0 12 29 2 *",
            utc,
            Shift,
            First,
            "2027-01-01T00:00:00Z",
            &[
                "2028-02-29T12:00:00+00:00",
                "2032-02-29T12:00:00+00:00",
                "2036-02-29T12:00:00+00:00",
            ],
        ),
        // 2100 is not a leap year.
        (
            "0 12 29 2 *",
            utc,
            Shift,
            First,
            "2096-03-01T00:00:00Z",
            &["2104-02-29T12:00:00+00:00"],
        ),
        (
            "0 0 1 * *",
            "America/New_York",
            Shift,
            First,
            "2027-10-15T00:00:00Z",
            &["2027-11-01T00:00:00-04:00", "2027-12-01T00:00:00-05:00"],
        ),
    ]);
}

#[test]
fn a_cron_that_names_no_real_time_is_refused_naming_the_field() {
    let spec = |expr: &str, end: Option<&str>| ScheduleSpec {
        cron: Some(expr.into()),
        start_at: Some("2027-01-01T00:00:00Z".into()),
        end_at: end.map(String::from),
        ..ScheduleSpec::default()
    };
    let err = spec("0 0 30 2 *", None)
        .compile(UtcMicros(0), &Limits::default())
        .unwrap_err();
    assert!(matches!(err, SpecError::NeverFires { .. }), "{err}");
    assert_eq!(err.field(), "cron");
    let err = spec("0 0 29 2 *", Some("2027-12-31T00:00:00Z"))
        .compile(UtcMicros(0), &Limits::default())
        .unwrap_err();
    assert!(
        err.to_string().contains("between start_at and end_at"),
        "{err}"
    );
}
