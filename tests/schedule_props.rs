//! Generated checks of the schedule calculus: no input panics; `next_after` is never at or
//! before the instant asked about and strictly increasing; and around real transitions of
//! real zones, a cron's occurrences equal an oracle's, built minute by minute from jiff's own
//! reading of each local time (unambiguous, in a gap, in a fold) under each policy.

use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;
use proptest::prelude::*;
use punctual::schedule::{DstSpec, Gap, Limits, Overlap, ScheduleSpec};
use punctual::UtcMicros;
use std::collections::BTreeSet;

const ZONES: &[&str] = &[
    "UTC",
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "America/Santiago",
    "Asia/Kolkata",
    "Asia/Tehran",
    "Europe/Dublin",
    "Antarctica/Troll",
    "America/St_Johns",
    "Pacific/Chatham",
];

const TOKENS: &[&str] = &[
    "*", "*/7", "*/15", "0", "5", "30", "59", "1-5", "2,3", "L", "5W", "LW", "1#2", "5L",
    "MON-FRI", "SUN", "JAN", "FEB,MAR", "?", "+1", "29", "31", "0-23/6", "7", "12", "@hourly",
    "@daily", "@weekly", "@monthly", "@yearly", "x", "-", "/", ",", "", "99", "*/0", "1-", "#",
    "L-2",
];

fn gap() -> impl Strategy<Value = Gap> {
    prop_oneof![Just(Gap::Shift), Just(Gap::Skip)]
}

fn overlap() -> impl Strategy<Value = Overlap> {
    prop_oneof![
        Just(Overlap::First),
        Just(Overlap::Last),
        Just(Overlap::Both)
    ]
}

fn compile(
    cron: &str,
    zone: &str,
    gap: Gap,
    overlap: Overlap,
) -> Option<punctual::schedule::Schedule> {
    ScheduleSpec {
        cron: Some(cron.into()),
        time_zone: Some(zone.into()),
        dst: Some(DstSpec { gap, overlap }),
        start_at: Some("1971-01-01T00:00:00Z".into()),
        ..ScheduleSpec::default()
    }
    .compile(UtcMicros(0), &Limits::default())
    .ok()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_text_as_a_cron_or_a_definition_is_an_answer_not_a_panic(text in "\\PC{0,80}") {
        let _ = compile(&text, "UTC", Gap::Shift, Overlap::First);
        if let Ok(spec) = serde_json::from_str::<ScheduleSpec>(&text) {
            let _ = spec.compile(UtcMicros(0), &Limits::default());
        }
    }

    #[test]
    fn occurrences_are_after_the_instant_asked_and_strictly_increasing(
        fields in proptest::collection::vec(proptest::sample::select(TOKENS), 1..=6),
        zone in proptest::sample::select(ZONES),
        gap in gap(),
        overlap in overlap(),
        after_s in 0u64..8_000_000_000,
        after_sub in 0u64..1_000_000,
    ) {
        let expr = fields.join(" ");
        let Some(s) = compile(&expr, zone, gap, overlap) else { return Ok(()) };
        let after = UtcMicros(after_s * 1_000_000 + after_sub);
        let mut last = after;
        for o in s.upcoming(after, 8) {
            prop_assert!(o.at > last, "{expr} in {zone}: {o:?} is not after {last:?}");
            prop_assert!(o.at >= s.start());
            prop_assert_eq!(o.at.0 % 1_000_000, 0, "a cron fires on whole seconds");
            last = o.at;
        }
    }

    #[test]
    fn around_real_transitions_a_cron_fires_exactly_where_the_oracle_says(
        zone in proptest::sample::select(ZONES),
        minutes in proptest::collection::btree_set(0u8..60, 1..4),
        hours in proptest::option::of(proptest::collection::btree_set(0u8..24, 1..4)),
        gap in gap(),
        overlap in overlap(),
        year_s in 0i64..(70 * 31_556_952),
    ) {
        let tz = jiff::tz::db().get(zone).expect("a zone");
        let from = Timestamp::from_second(315_532_800 + year_s).expect("1980..2050");
        // A window around the zone's next transition (or anywhere, for a fixed zone).
        let pivot = tz.following(from).next().map_or(from, |t| t.timestamp());
        let (a, b) = (pivot.as_second() - 36 * 3_600, pivot.as_second() + 36 * 3_600);
        let join = |set: &BTreeSet<u8>| set.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",");
        let expr = format!(
            "{} {} * * *",
            join(&minutes),
            hours.as_ref().map_or("*".to_string(), join)
        );
        let s = compile(&expr, zone, gap, overlap).expect("a valid cron");
        let want = oracle(&tz, &minutes, hours.as_ref(), gap, overlap, a, b);
        let got: Vec<i64> = s
            .upcoming(UtcMicros(a as u64 * 1_000_000), 4_000)
            .into_iter()
            .map(|o| (o.at.0 / 1_000_000) as i64)
            .take_while(|&t| t < b)
            .collect();
        prop_assert_eq!(got, want, "{} in {} ({:?}, {:?}) around {}", expr, zone, gap, overlap, pivot);
    }
}

/// The instants in `(a, b)` at which `m h * * *` fires, from every local minute two days either
/// side, each read by jiff: unambiguous, a gap (shift: the offset before; skip: none) or a
/// fold (first, last, both; a `*` hour fires both).
fn oracle(
    tz: &TimeZone,
    minutes: &BTreeSet<u8>,
    hours: Option<&BTreeSet<u8>>,
    gap: Gap,
    overlap: Overlap,
    a: i64,
    b: i64,
) -> Vec<i64> {
    let overlap = if hours.is_none() {
        Overlap::Both
    } else {
        overlap
    };
    let mut out = BTreeSet::new();
    let start = jiff::tz::Offset::UTC.to_datetime(Timestamp::from_second(a - 2 * 86_400).unwrap());
    let start = start.date().to_datetime(jiff::civil::Time::midnight());
    for i in 0..(8 * 24 * 60) {
        let c = start + jiff::SignedDuration::from_mins(i);
        if !minutes.contains(&(c.minute() as u8))
            || hours.is_some_and(|h| !h.contains(&(c.hour() as u8)))
        {
            continue;
        }
        let local = jiff::tz::Offset::UTC.to_timestamp(c).unwrap().as_second();
        let at = |o: jiff::tz::Offset| local - o.seconds() as i64;
        match tz.to_ambiguous_timestamp(c).offset() {
            AmbiguousOffset::Unambiguous { offset } => {
                out.insert(at(offset));
            }
            AmbiguousOffset::Gap { before, .. } => {
                if gap == Gap::Shift {
                    out.insert(at(before));
                }
            }
            AmbiguousOffset::Fold { before, after } => {
                if overlap != Overlap::Last {
                    out.insert(at(before));
                }
                if overlap != Overlap::First {
                    out.insert(at(after));
                }
            }
        }
    }
    out.into_iter().filter(|&t| t > a && t < b).collect()
}
