use super::*;

const T: u64 = 1_805_000_000_000_000;
const S: u64 = 1_000_000;

fn every_second(extra: &str) -> (ScheduleRecord, Schedule) {
    let def = format!(r#"{{"every_ms": 1000, "payload": {{"job": 7}}{extra}}}"#);
    ScheduleRecord::create(&def, UtcMicros(T), &Limits::default()).expect("a valid definition")
}

#[test]
fn each_fire_spends_its_occurrence_and_arms_the_next() {
    let (mut r, s) = every_second("");
    assert_eq!(r.armed_at(&s, UtcMicros(T)), Some(UtcMicros(T + S)));
    let first = r.fire(&s, UtcMicros(T + S + 40));
    assert_eq!(first.fires.len(), 1);
    assert_eq!(first.fires[0].occurrence.at, UtcMicros(T + S));
    assert_eq!(first.fires[0].sequence, 1);
    assert_eq!(first.arm, Some(UtcMicros(T + 2 * S)));
    let second = r.fire(&s, UtcMicros(T + 2 * S));
    assert_eq!(second.fires[0].sequence, 2);
    assert_eq!(second.arm, Some(UtcMicros(T + 3 * S)));
}

#[test]
fn a_fire_after_a_backward_step_fires_nothing_again() {
    let (mut r, s) = every_second("");
    // Both occurrences are within a second of the fire: on time.
    assert_eq!(r.fire(&s, UtcMicros(T + 2 * S)).fires.len(), 2);
    let again = r.fire(&s, UtcMicros(T + S + 500));
    assert!(again.fires.is_empty(), "{again:?}");
    assert_eq!(again.arm, Some(UtcMicros(T + 3 * S)));
}

#[test]
fn a_record_survives_its_encoding_and_so_does_its_cursor() {
    let (mut r, s) = every_second("");
    r.fire(&s, UtcMicros(T + S));
    let back = ScheduleRecord::decode(&r.encode()).expect("decodes");
    assert_eq!(back.cursor(), r.cursor());
    assert_eq!(back.def.get(), r.def.get());
    assert!(ScheduleRecord::decode(b"{\"order\": 1}").is_none());
}

#[test]
fn a_paused_schedule_spends_nothing_and_its_resume_catches_up_by_policy() {
    let (mut r, s) = every_second(r#", "catch_up": {"policy": "latest"}"#);
    r.paused = true;
    let parked = r.fire(&s, UtcMicros(T + 5 * S));
    assert!(parked.fires.is_empty());
    assert_eq!(parked.arm, Some(UtcMicros(T + 5 * S + PARK_US)));
    r.paused = false;
    // Resumed: the first unspent occurrence is past, so the timer is due at once, at the
    // resume (not at that occurrence: its deadline is when the catch-up is judged) …
    assert_eq!(
        r.armed_at(&s, UtcMicros(T + 5 * S)),
        Some(UtcMicros(T + 5 * S))
    );
    // … and `latest` fires the most recent missed one, once.
    let resumed = r.fire(&s, UtcMicros(T + 5 * S + S / 2 + 2 * S));
    assert_eq!(resumed.fires.len(), 1, "{resumed:?}");
    assert_eq!(resumed.fires[0].occurrence.at, UtcMicros(T + 7 * S));
    assert!(resumed.skipped >= 5, "{resumed:?}");
}

#[test]
fn a_replacement_keeps_the_cursor_so_sequence_counts_on() {
    let (mut old, s) = every_second("");
    old.fire(&s, UtcMicros(T + S));
    old.fire(&s, UtcMicros(T + 4 * S + S / 2));
    let (new, _) = ScheduleRecord::create(
        r#"{"every_ms": 2000}"#,
        UtcMicros(T + 4 * S - 10),
        &Limits::default(),
    )
    .expect("valid");
    let new = new.replacing(&old);
    assert_eq!(
        new.sequence, 2,
        "T+1s on time, then T+4s on time (T+2s, T+3s missed)"
    );
    assert_eq!(
        new.through_us,
        Some(T + 4 * S + S / 2),
        "the later of the two cursors"
    );
}

#[test]
fn a_schedule_that_reached_max_occurrences_arms_nothing() {
    let (mut r, s) = every_second(r#", "max_occurrences": 2"#);
    assert_eq!(r.fire(&s, UtcMicros(T + S)).arm, Some(UtcMicros(T + 2 * S)));
    let last = r.fire(&s, UtcMicros(T + 2 * S));
    assert_eq!(last.fires.len(), 1);
    assert_eq!(last.arm, None);
    assert_eq!(r.armed_at(&s, UtcMicros(T + 2 * S)), None);
}

#[test]
fn an_occurrence_body_carries_the_schedule_the_occurrence_and_the_payload() {
    let (mut r, s) = every_second("");
    let rec = r.fire(&s, UtcMicros(T + S));
    let body: serde_json::Value =
        serde_json::from_slice(&r.occurrence_body("nightly", &rec.fires[0])).expect("JSON");
    assert_eq!(
        body,
        serde_json::json!({"schedule": "nightly", "occurrence_us": T + S, "sequence": 1,
                           "caught_up": false, "payload": {"job": 7}})
    );
}

#[test]
fn a_definition_that_is_not_json_is_refused_naming_it() {
    let e = ScheduleRecord::create("{nope", UtcMicros(T), &Limits::default()).unwrap_err();
    assert_eq!(e.field(), "definition");
}
