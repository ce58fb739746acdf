use super::*;
use crate::api::scan::parse_batch;
use proptest::prelude::*;

const NOW: UtcMicros = UtcMicros(1_800_000_000_000_000);

fn code(r: Result<Registration<'_>, ApiError>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

#[test]
fn each_deadline_form_gives_the_exact_microsecond() {
    let r = parse_put(br#"{"fire_at":"2030-01-31T10:15:00.1234567Z"}"#, NOW).unwrap();
    assert_eq!(r.deadline, UtcMicros(1_896_084_900_123_456));
    let r = parse_put(br#"{"fire_at_ms":1700000000123}"#, NOW).unwrap();
    assert_eq!(r.deadline, UtcMicros(1_700_000_000_123_000));
    let r = parse_put(br#"{"delay_ms":1500,"payload":{"a":[1,2]}}"#, NOW).unwrap();
    assert_eq!(r.deadline, UtcMicros(NOW.0 + 1_500_000));
    assert_eq!(r.payload, br#"{"a":[1,2]}"#);
}

#[test]
fn bounds_are_inclusive_at_the_epoch_and_at_ten_years() {
    assert_eq!(code(parse_put(br#"{"fire_at_ms":0}"#, NOW)), "ok");
    assert_eq!(
        code(parse_put(br#"{"fire_at":"1970-01-01T00:00:00Z"}"#, NOW)),
        "ok"
    );
    assert_eq!(
        code(parse_put(br#"{"fire_at_ms":-1}"#, NOW)),
        "deadline_out_of_range"
    );
    assert_eq!(
        code(parse_put(
            br#"{"fire_at":"1969-12-31T23:59:59.9999999Z"}"#,
            NOW
        )),
        "deadline_out_of_range"
    );
    let max_ms = (NOW.0 + TEN_YEARS_US) / 1000;
    let ok = format!(r#"{{"fire_at_ms":{max_ms}}}"#);
    let over = format!(r#"{{"fire_at_ms":{}}}"#, max_ms + 1);
    assert_eq!(code(parse_put(ok.as_bytes(), NOW)), "ok");
    assert_eq!(
        code(parse_put(over.as_bytes(), NOW)),
        "deadline_out_of_range"
    );
    assert_eq!(code(parse_put(br#"{"delay_ms":315360000000}"#, NOW)), "ok");
    assert_eq!(
        code(parse_put(br#"{"delay_ms":315360000001}"#, NOW)),
        "deadline_out_of_range"
    );
    assert_eq!(
        code(parse_put(br#"{"delay_ms":-1}"#, NOW)),
        "deadline_out_of_range"
    );
    assert_eq!(
        code(parse_put(br#"{"delay_ms":1e400}"#, NOW)),
        "malformed_json",
        "serde_json refuses numbers beyond f64"
    );
    assert_eq!(
        code(parse_put(br#"{"fire_at_ms":99999999999999999999999}"#, NOW)),
        "deadline_out_of_range"
    );
}

#[test]
fn malformed_and_schema_errors_have_their_codes() {
    assert_eq!(code(parse_put(b"", NOW)), "malformed_json");
    assert_eq!(code(parse_put(b"{\"delay_ms\":1", NOW)), "malformed_json");
    assert_eq!(
        code(parse_put(b"{\"delay_ms\":1,\"payload\":\"\xff\"}", NOW)),
        "malformed_json"
    );
    assert_eq!(
        code(parse_put(br#"{"delay_ms":1,"extra":1}"#, NOW)),
        "invalid_field"
    );
    assert_eq!(
        code(parse_put(br#"{"delay_ms":"1"}"#, NOW)),
        "invalid_field"
    );
    assert_eq!(code(parse_put(br#"[]"#, NOW)), "invalid_field");
    assert_eq!(
        code(parse_put(br#" ["2030-01-01T00:00:00Z"]"#, NOW)),
        "invalid_field",
        "serde would read a struct from an array; the API must not"
    );
    assert_eq!(
        parse_batch(br#"[[{"key":"a","delay_ms":1}]]"#)
            .unwrap_err()
            .code(),
        "invalid_field"
    );
    assert_eq!(code(parse_put(br#"{}"#, NOW)), "invalid_deadline");
    assert_eq!(
        code(parse_put(br#"{"delay_ms":1,"fire_at_ms":1}"#, NOW)),
        "invalid_deadline"
    );
    assert_eq!(
        code(parse_put(br#"{"delay_ms":1.5}"#, NOW)),
        "invalid_deadline"
    );
    assert_eq!(
        code(parse_put(br#"{"fire_at":"tomorrow"}"#, NOW)),
        "invalid_deadline"
    );
}

#[test]
fn payload_limit_is_measured_as_sent() {
    let at = format!(
        r#"{{"delay_ms":0,"payload":"{}"}}"#,
        "x".repeat(MAX_PAYLOAD - 2)
    );
    let over = format!(
        r#"{{"delay_ms":0,"payload":"{}"}}"#,
        "x".repeat(MAX_PAYLOAD - 1)
    );
    assert_eq!(code(parse_put(at.as_bytes(), NOW)), "ok");
    assert_eq!(code(parse_put(over.as_bytes(), NOW)), "payload_too_large");
}

#[test]
fn batch_counts_items_without_keeping_the_excess() {
    assert_eq!(
        parse_batch(br#"{"timers":[]}"#).unwrap_err().code(),
        "empty_batch"
    );
    let many = format!("{{\"timers\":[{}1]}}", "1,".repeat(MAX_BATCH_ITEMS));
    assert_eq!(
        parse_batch(many.as_bytes()).unwrap_err(),
        ApiError::TooManyItems {
            count: MAX_BATCH_ITEMS + 1,
            limit: MAX_BATCH_ITEMS
        }
    );
    let items = parse_batch(br#"{"timers":[{"key":"a","delay_ms":1},{"nokey":1}]}"#).unwrap();
    assert!(parse_item(items[0], NOW).is_ok());
    let (key, e) = parse_item(items[1], NOW).unwrap_err();
    assert_eq!((key, e.code()), (None, "invalid_field"));
}

proptest! {
    #[test]
    fn parsing_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_put(&bytes, NOW);
        if let Ok(items) = parse_batch(&bytes) {
            for i in items { let _ = parse_item(i, NOW); }
        }
    }

    #[test]
    fn accepted_deadlines_are_always_in_range(
        field in prop_oneof![Just("fire_at_ms"), Just("delay_ms")],
        v in any::<i64>(),
    ) {
        let body = format!(r#"{{"{field}":{v}}}"#);
        match parse_put(body.as_bytes(), NOW) {
            Ok(r) => prop_assert!(r.deadline.0 <= NOW.0 + TEN_YEARS_US),
            Err(e) => prop_assert_eq!(e.code(), "deadline_out_of_range"),
        }
    }

    #[test]
    fn rfc3339_round_trips_to_the_microsecond(secs in 0i64..2_000_000_000, nanos in 0u32..1_000_000_000) {
        let t = time::OffsetDateTime::from_unix_timestamp(secs).unwrap() + time::Duration::nanoseconds(nanos.into());
        let s = t.format(&time::format_description::well_known::Rfc3339).unwrap();
        let body = format!(r#"{{"fire_at":"{s}"}}"#);
        let r = parse_put(body.as_bytes(), NOW).unwrap();
        prop_assert_eq!(r.deadline.0, secs as u64 * 1_000_000 + u64::from(nanos / 1000));
    }
}

/// An item past `MAX_ITEM_BYTES` is refused without being parsed; an item refused for a
/// field still names its key, read without building the item's tree.
#[test]
fn an_item_past_the_bound_is_refused_and_a_refused_item_keeps_its_key() {
    let now = UtcMicros(1_750_000_000_000_000);
    let long = format!(
        r#"{{"key":"k","payload":"{}"}}"#,
        "x".repeat(MAX_ITEM_BYTES)
    );
    let raw = RawValue::from_string(long).expect("json");
    let Err((key, e)) = parse_item(&raw, now) else {
        panic!("accepted an item past the bound");
    };
    assert_eq!(key, None);
    assert_eq!(e.code(), "payload_too_large");
    let odd = r#"{"payload":[1,{"a":2}],"zz":1,"key":"k\u0031"}"#;
    let odd = RawValue::from_string(odd.into()).expect("json");
    let Err((key, e)) = parse_item(&odd, now) else {
        panic!("accepted an unknown field");
    };
    assert_eq!(key.as_deref(), Some("k1"));
    assert_eq!(e.code(), "invalid_field");
}

#[test]
fn terms_read_as_given_and_default_to_none() {
    let terms = |body: &str| parse_put(body.as_bytes(), NOW).map(|r| r.terms);
    assert_eq!(terms(r#"{"delay_ms":1}"#), Ok(Terms::default()));
    assert_eq!(
        terms(r#"{"delay_ms":1,"if":"absent"}"#).map(|t| t.cond),
        Ok(Some(Condition::Absent))
    );
    assert_eq!(
        terms(r#"{"delay_ms":1,"if_version":1796110651546380}"#).map(|t| t.cond),
        Ok(Some(Condition::Version(1_796_110_651_546_380)))
    );
    assert_eq!(
        terms(r#"{"delay_ms":1,"debounce":{"max_wait_ms":1500}}"#).map(|t| t.max_wait_us),
        Ok(Some(1_500_000))
    );
    let item = RawValue::from_string(
        r#"{"key":"k","delay_ms":1,"if":"absent","debounce":{"max_wait_ms":0}}"#.into(),
    )
    .expect("JSON");
    let (_, reg) = parse_item(&item, NOW).expect("an item");
    assert_eq!(
        reg.terms,
        Terms {
            cond: Some(Condition::Absent),
            max_wait_us: Some(0)
        }
    );
}

#[test]
fn a_condition_s_version_is_a_whole_number_as_json_writes_one() {
    // JSON Schema's `integer`, which the document gives `if_version`, counts `7.0` and `7e0`.
    for text in ["7", "7.0", "7e0", " 7 "] {
        assert_eq!(if_version_of(text).ok(), Some(7), "{text}");
    }
    assert_eq!(if_version_of("18446744073709551615").ok(), Some(u64::MAX));
    for text in ["0", "7.5", "-7", "x", "", "49903661065811599360", "\"7\""] {
        assert!(if_version_of(text).is_err(), "{text}");
    }
}

#[test]
fn a_debounce_s_wait_is_a_whole_number_as_json_writes_one() {
    for (text, us) in [
        ("1000", 1_000_000),
        ("1000.0", 1_000_000),
        ("1e3", 1_000_000),
        ("0", 0),
    ] {
        let raw = format!(r#"{{"max_wait_ms": {text}}}"#);
        let raw: Box<RawValue> = serde_json::from_str(&raw).expect("json");
        assert_eq!(max_wait_of(&raw).ok(), Some(us), "{text}");
    }
    for text in ["1000.5", "-1", "\"1000\"", "315360000001", "null"] {
        let raw = format!(r#"{{"max_wait_ms": {text}}}"#);
        let raw: Box<RawValue> = serde_json::from_str(&raw).expect("json");
        assert!(max_wait_of(&raw).is_err(), "{text}");
    }
}
