//! The scan against serde_json's reading of the whole body (`scan_reference.rs`): the same
//! answer for every shape of body, valid or not, across steps; the bounds that refuse without
//! reading it all.

use super::*;
use proptest::prelude::*;

#[path = "scan_reference.rs"]
mod reference;

/// The scan's answer, one item a step (every slice already over: the most steps).
fn answer(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let mut s = BatchScan::new(body);
    loop {
        match s.step(|| true) {
            Step::Done(items) => return Ok(items.iter().map(|i| i.get().to_string()).collect()),
            Step::More => continue,
            Step::Refused(e) => return Err(e),
        }
    }
}

/// serde's answer, from the whole body at once.
fn whole(body: &[u8]) -> Result<Vec<String>, ApiError> {
    reference::parse_batch(body).map(|items| items.iter().map(|i| i.get().to_string()).collect())
}

/// The step the scan ends with, in as few steps as it takes.
fn last_step(body: &[u8]) -> Step<'_> {
    let mut s = BatchScan::new(body);
    loop {
        match s.step(|| false) {
            Step::More => continue,
            end => return end,
        }
    }
}

fn batch(items: &[String]) -> Vec<u8> {
    format!(r#"{{"timers":[{}]}}"#, items.join(",")).into_bytes()
}

fn item(key: &str, payload_bytes: usize) -> String {
    format!(
        r#"{{"key":"{key}","delay_ms":1,"payload":"{}"}}"#,
        "x".repeat(payload_bytes)
    )
}

/// An item that does not end within `MAX_ITEM_BYTES` is refused by its index, however
/// long the rest of the body; one that ends within it, or exactly at it, is scanned, and
/// a malformed one within it gets the whole-body parse's error.
#[test]
fn an_item_longer_than_the_bound_is_refused_by_its_index_without_reading_it_all() {
    let refused_as = |body: &[u8]| match last_step(body) {
        Step::Refused(ApiError::PayloadTooLarge(m)) => m,
        _ => panic!("refused as too large"),
    };
    let huge = item("h", 8 << 20);
    let body = batch(&[item("a", 10), item("b", 10), huge.clone(), item("c", 10)]);
    assert!(refused_as(&body).starts_with("batch item 2 "));
    assert!(refused_as(&batch(&[huge])).starts_with("batch item 0 "));
    // A number longer than the bound is refused too, not read as cut at the window.
    let digits = format!(r#"{{"timers":[{}]}}"#, "1".repeat(MAX_ITEM_BYTES + 10));
    assert!(refused_as(digits.as_bytes()).starts_with("batch item 0 "));
    let overhead = item("f", 0).len();
    for fits in [
        item("f", MAX_ITEM_BYTES - 64),
        item("f", MAX_ITEM_BYTES - overhead),
    ] {
        assert!(fits.len() <= MAX_ITEM_BYTES);
        match last_step(&batch(&[item("a", 1), fits.clone(), item("b", 1)])) {
            Step::Done(items) => assert_eq!(items[1].get(), fits),
            _ => panic!("an item within the bound is scanned"),
        }
    }
    let broken = format!(r#"{{"timers":[{{"key":"a",}}, {}]}}"#, item("b", 1));
    assert_eq!(answer(broken.as_bytes()), whole(broken.as_bytes()));
    assert!(matches!(
        answer(broken.as_bytes()),
        Err(ApiError::MalformedJson(_))
    ));
    // Cut short inside the bound: malformed, not too large.
    let cut = r#"{"timers":[{"key":"a","payload":"xx"#;
    assert_eq!(answer(cut.as_bytes()), whole(cut.as_bytes()));
    assert!(matches!(
        answer(cut.as_bytes()),
        Err(ApiError::MalformedJson(_))
    ));
}

#[test]
fn a_plain_batch_is_split_into_its_items_across_steps() {
    let body = br#" { "timers" : [ {"key":"a","delay_ms":1} ,{"key":"b","payload":{"x":[1,2]}}
    ] } "#;
    let items = answer(body).expect("the plain shape");
    assert_eq!(
        items,
        [
            r#"{"key":"a","delay_ms":1}"#,
            r#"{"key":"b","payload":{"x":[1,2]}}"#
        ]
    );
}

/// Tiny items are asked about in sixteens; an item of 64 KiB is asked about at once.
#[test]
fn the_slice_is_asked_about_by_items_and_by_bytes() {
    let steps = |body: &[u8]| {
        let mut s = BatchScan::new(body);
        let mut n = 0;
        loop {
            n += 1;
            match s.step(|| true) {
                Step::More => continue,
                Step::Done(_) => return n,
                Step::Refused(e) => panic!("{e}"),
            }
        }
    };
    let small = (0..64)
        .map(|i| item(&format!("k{i}"), 1))
        .collect::<Vec<_>>();
    assert_eq!(steps(&batch(&small)), 64 / ASK_EVERY + 1);
    let large = (0..5)
        .map(|i| item(&format!("k{i}"), 64 << 10))
        .collect::<Vec<_>>();
    assert_eq!(steps(&batch(&large)), 5 + 1);
}

/// Bodies of every shape, on one line and on several: the scan answers each as the
/// whole-body parse does, the error's kind, message and position included.
#[test]
fn every_shape_gets_the_whole_body_parses_answer() {
    let many = (0..30)
        .map(|i| item(&format!("k{i}"), 3))
        .collect::<Vec<_>>()
        .join(",\n  ");
    let tails = [
        "]}",
        "],\"x\":1}",
        "],\"timers\":[]}",
        ",]}",
        "]} x",
        "]}\n\n  [",
        "]",
        "",
        ",",
        " {\"key\":\"z\"}]}",
        ", 1 2]}",
        ",\n{\"key\":\"a\",}]}",
        ",{\"key\":\"a\"\n\n   \"delay_ms\":1}]}",
        ",{\"key\":\"a\\q\"}]}",
        "]\n,\n\"\\u0078\":1}",
        ",{\"key\":\"a\",\"payload\":\"cut",
        "] ,\"timers\": 3}",
        ",[1,2],\"s\",null,-1.5e3,true]}",
    ];
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    for tail in tails {
        for first in [item("a", 1), format!("\n{}\n", item("a", 1)), many.clone()] {
            bodies.push(format!("{{\"timers\":[{first}{tail}").into_bytes());
            bodies.push(format!("  [{first}{tail}").into_bytes());
        }
    }
    for body in [
        &br#"{"timers":[]}"#[..],
        br#"{"timers":[],"x":1}"#,
        br#"{"x":1,"timers":[{"key":"a"}]}"#,
        br#"{"\u0074imers":[{"key":"a"}]}"#,
        br#"{"\u0074\u0069\u006d\u0065\u0072\u0073" : [{"key":"a"}]}"#,
        br#"{"\u0074imer":[{"key":"a"}]}"#,
        br#"{"timers\u0000":[{"key":"a"}]}"#,
        br#"{"timers":[1,{"key":"a"}]}"#,
        br#"{"timers":{"key":"a"}}"#,
        br#"{"timers":"x"}"#,
        br#"{"timers" "x"}"#,
        br#"{"timers""#,
        br#"{"timers"#,
        br#"{"#,
        br#"{}"#,
        br#"{,}"#,
        br#"{"timers":[{"key":"a"}]} "#,
        br#"[]"#,
        br#"[1,2,]"#,
        br#"[{"key":"a"}] 1"#,
        br#""timers""#,
        b"12",
        b"nul",
        b"   ",
        b"",
        b"{\"timers\":[{\"key\":\"\xff\"}]}",
        b"{\"timers\":[{\"key\":\"a\"}\n\n,\n\n\xff]}",
        // Where serde places a field's refusal: past the whitespace after the key, and past
        // the object's `}` when that follows.
        b"{ }",
        b"{\n\"x\"  }",
        b"{\"x\"  :1}",
        b"{\"timers\":[1] , \"timers\" }",
        b"{\"timers\":[1],\"\\u0074imers\":[2]}",
        // A number or a literal that runs into a byte no value is followed by.
        b"{\"timers\":[1x]}",
        b"[1x]",
        b"12x",
        b"{\"timers\":[tru]}",
        b"{\"timers\":1e400}",
        b"{\"timers\":-}",
        b"{\"timers\":\"\\u00\"}",
        b"{\"timers\":[\"\\ud800\"]}",
        b"\x0c{\"timers\":[1]}",
        b"{\"timers\":[1]}x",
        b"{\"timers\" 1}",
        b"{\"timers\":[1]",
        b"{\"timers\":[1],}",
        b"{\"timers\":[1],1}",
        b"{\"timers\":[1],",
        b"{\"timers\":[1,",
        b"{\"timers\":",
        b"{\"timers\":[1] ]",
        b"[1,",
        b"[",
        b"[1 2]",
        b"[1,]",
        b"{\"timers\":[\n1,\n{\"k\":\n\"\x01\"}]}",
    ] {
        bodies.push(body.to_vec());
    }
    for body in &bodies {
        assert_eq!(
            answer(body),
            whole(body),
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
}

/// Past `MAX_BATCH_ITEMS`, the items are counted a step at a time, to the count the
/// whole-body parse gives; at the bound exactly, the batch is scanned.
#[test]
fn too_many_items_are_counted_in_steps_as_the_whole_body_parse_counts_them() {
    for n in [MAX_BATCH_ITEMS + 1, MAX_BATCH_ITEMS + 2_345] {
        let body = batch(
            &(0..n)
                .map(|i| item(&format!("k{i}"), 1))
                .collect::<Vec<_>>(),
        );
        let mut s = BatchScan::new(&body);
        let mut steps = 0;
        let count = loop {
            steps += 1;
            match s.step(|| true) {
                Step::More => continue,
                Step::Refused(ApiError::TooManyItems { count, .. }) => break count,
                _ => panic!("{n} items: not counted"),
            }
        };
        assert_eq!(count, n);
        assert!(
            steps >= n / ASK_EVERY,
            "a step per 16 items when every slice is over"
        );
        assert_eq!(answer(&body), whole(&body));
    }
    let at = batch(
        &(0..MAX_BATCH_ITEMS)
            .map(|i| item(&format!("k{i}"), 1))
            .collect::<Vec<_>>(),
    );
    assert!(matches!(last_step(&at), Step::Done(items) if items.len() == MAX_BATCH_ITEMS));
}

/// A body of tiny values is scanned a value a step too: eight million numbers were 67 ms
/// of one whole-body parse.
#[test]
fn an_array_of_tiny_values_is_scanned_in_steps() {
    let numbers = vec!["1"; 50_000].join(",");
    for body in [
        format!(r#"{{"timers":[{numbers}],"x":1}}"#),
        format!("[{numbers}]"),
    ] {
        let mut s = BatchScan::new(body.as_bytes());
        let mut steps = 0;
        let end = loop {
            steps += 1;
            match s.step(|| true) {
                Step::More => continue,
                Step::Refused(e) => break Err(e),
                Step::Done(items) => break Ok(items.len()),
            }
        };
        assert!(steps >= 50_000 / ASK_EVERY, "{steps} steps");
        assert_eq!(
            end.map_err(|e| e.to_string()),
            whole(body.as_bytes())
                .map(|i| i.len())
                .map_err(|e| e.to_string())
        );
    }
}

/// A field name or value beside the array that does not end within the bound is refused
/// without reading it (serde would copy a 16 MB name into its message).
#[test]
fn a_field_name_or_value_past_the_bound_is_refused_without_reading_it() {
    let long = "k".repeat(MAX_ITEM_BYTES + 1);
    for body in [
        format!(r#"{{"{long}":1}}"#),
        format!(r#"{{"timers":[{}],"{long}":1}}"#, item("a", 1)),
        format!(r#"{{"timers":"{long}"}}"#),
    ] {
        match answer(body.as_bytes()) {
            Err(ApiError::InvalidField(m)) => assert!(m.contains("is not read"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    match answer(format!(r#""{long}""#).as_bytes()) {
        Err(e) => assert_eq!(e, not_an_object("the body")),
        other => panic!("{other:?}"),
    }
    // Within the bound, serde's own answer.
    let short = format!(
        r#"{{"timers":[{}],"{}":1}}"#,
        item("a", 1),
        "k".repeat(1000)
    );
    assert_eq!(answer(short.as_bytes()), whole(short.as_bytes()));
}

/// Prints, per body shape the scan used to leave to the whole-body parse, that parse's
/// time (what one step on the shard took) against the scan's longest step with a slice
/// of 200 µs, and its total.
///
/// `cargo test --release --lib batch_shapes_figure -- --ignored --nocapture`
#[test]
#[ignore]
fn batch_shapes_figure() {
    use std::time::{Duration, Instant};
    const BODY: usize = 16 << 20;
    let tiny = r#"{"key":"k","delay_ms":1}"#;
    let items = vec![tiny; BODY / (tiny.len() + 1)].join(",");
    let numbers = vec!["1"; BODY / 2].join(",");
    let shapes = [
        (
            "a field after the array",
            format!(r#"{{"timers":[{items}],"x":1}}"#),
        ),
        ("the key escaped", format!(r#"{{"\u0074imers":[{items}]}}"#)),
        ("a trailing comma", format!(r#"{{"timers":[{items},]}}"#)),
        (
            "items that are numbers",
            format!(r#"{{"timers":[{numbers}]}}"#),
        ),
        ("an array, not an object", format!("[{numbers}]")),
        (
            "an unknown field name",
            format!(r#"{{"{}":1}}"#, "k".repeat(BODY)),
        ),
    ];
    for round in 0..3 {
        for (name, body) in &shapes {
            let body = body.as_bytes();
            let t = Instant::now();
            let whole_answer = whole(body);
            let whole_ms = t.elapsed().as_secs_f64() * 1e3;
            let mut took = Vec::new();
            let mut scan = BatchScan::new(body);
            let all = Instant::now();
            let scanned = loop {
                let t = Instant::now();
                let step = scan.step(|| t.elapsed() >= Duration::from_micros(200));
                took.push(t.elapsed());
                match step {
                    Step::More => continue,
                    Step::Done(items) => break Ok(items.len()),
                    Step::Refused(e) => break Err(e),
                }
            };
            let total_ms = all.elapsed().as_secs_f64() * 1e3;
            if *name == "an unknown field name" {
                // Refused by the bound, not by serde's reading of the name.
                assert!(scanned.is_err() && whole_answer.is_err());
            } else {
                assert_eq!(scanned, whole_answer.map(|i| i.len()));
            }
            took.sort();
            let micros = |q: f64| took[((took.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
            println!(
                "round {round} {name:24} {:.1} MB: whole parse {whole_ms:.1} ms in one step; \
                 scan: {} steps, p50 {:.0} µs, p99 {:.0} µs, longest {:.0} µs (a preemption \
                 lands in it on a busy host), {total_ms:.1} ms in all",
                body.len() as f64 / 1e6,
                took.len(),
                micros(0.5),
                micros(0.99),
                micros(1.0),
            );
        }
    }
}

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just("\"timers\"".to_string()),
        Just("\"\\u0074imers\"".to_string()),
        Just("\"key\"".to_string()),
        Just(" ".to_string()),
        Just("\n".to_string()),
        Just("1".to_string()),
        Just("null".to_string()),
        Just("\"a\\\"b\"".to_string()),
        Just(r#"{"key":"a","delay_ms":1}"#.to_string()),
        Just("\"".to_string()),
        Just("\\".to_string()),
        Just("x".to_string()),
        Just("tru".to_string()),
        Just("-".to_string()),
        Just("\"x\"".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// A batch with one thing changed (a fragment put in, a byte taken out), or any run
    /// of JSON fragments: the scan's answer is the whole-body parse's.
    #[test]
    fn any_body_gets_the_whole_body_parses_answer(
        n in 1usize..6,
        at in any::<prop::sample::Index>(),
        cut in any::<bool>(),
        put in fragment(),
        run in proptest::collection::vec(fragment(), 0..24),
    ) {
        let items = (0..n).map(|i| item(&format!("k{i}"), i)).collect::<Vec<_>>().join(",\n");
        let plain = format!("{{\"timers\": [\n{items}\n]}}");
        let i = at.index(plain.len() + 1);
        let mut changed = plain.as_bytes().to_vec();
        if cut && i < changed.len() {
            changed.remove(i);
        } else {
            changed.splice(i..i, put.bytes());
        }
        for body in [plain.into_bytes(), changed, run.concat().into_bytes()] {
            prop_assert_eq!(answer(&body), whole(&body), "{:?}", String::from_utf8_lossy(&body));
        }
    }
}
