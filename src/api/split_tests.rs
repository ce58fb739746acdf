use super::*;
use proptest::prelude::*;

proptest! {
    /// Whatever the owners, split then place gives every item back at its own position,
    /// and each owner's items stay in order.
    #[test]
    fn split_then_place_keeps_the_items_order(owners in prop::collection::vec(prop::option::of(0u8..5), 0..200)) {
        let n = owners.len();
        let s = split(owners.clone());
        let mut out: Vec<Option<usize>> = vec![None; n];
        place(&mut out, &s.local, s.local.iter().map(|&i| Some(i)));
        for (owner, positions) in &s.remote {
            prop_assert!(positions.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(positions.iter().all(|&i| owners[i] == Some(*owner)));
            place(&mut out, positions, positions.iter().map(|&i| Some(i)));
        }
        prop_assert!(s.local.iter().all(|&i| owners[i].is_none()));
        let back: Vec<Option<usize>> = (0..n).map(Some).collect();
        prop_assert_eq!(out, back);
    }
}

#[test]
fn owners_are_grouped_in_the_order_of_their_first_item() {
    let s = split(vec![Some("b"), None, Some("a"), Some("b"), None]);
    assert_eq!(
        s,
        Split {
            local: vec![1, 4],
            remote: vec![("b", vec![0, 3]), ("a", vec![2])],
        }
    );
}

fn json(items: &[BatchItem]) -> String {
    serde_json::to_string(items).expect("serialises")
}

#[test]
fn an_owner_answer_is_relayed_item_by_item_and_nothing_else_passes_for_success() {
    crate::runtime::cooperate::on_executor(owner_answers());
}

async fn owner_answers() {
    let keys = || vec![Some("a".to_string()), Some("b".to_string())];
    let ok = br#"{"results":[{"key":"a","status":201,"fire_at_us":5,"version":1},{"key":"b","status":503,"error":{"code":"store_unavailable","message":"m"}}]}"#;
    assert_eq!(
        json(&results(StatusCode::OK, ok, keys(), "p:1").await),
        r#"[{"key":"a","status":201,"fire_at_us":5,"version":1},{"key":"b","status":503,"error":{"code":"store_unavailable","message":"m"}}]"#
    );
    // One result short: no item is taken as applied.
    let short = br#"{"results":[{"key":"a","status":201,"fire_at_us":5,"version":1}]}"#;
    let r = json(&results(StatusCode::OK, short, keys(), "p:1").await);
    assert_eq!(
        r.matches(r#""status":503,"error":{"code":"peer_unavailable""#)
            .count(),
        2,
        "{r}"
    );
    // Refused whole: each item carries the owner's status and error.
    let refused = br#"{"error":{"code":"rate_limited","message":"slow down"}}"#;
    assert_eq!(
        json(&results(StatusCode::TOO_MANY_REQUESTS, refused, keys(), "p:1").await),
        r#"[{"key":"a","status":429,"error":{"code":"rate_limited","message":"slow down"}},{"key":"b","status":429,"error":{"code":"rate_limited","message":"slow down"}}]"#
    );
    let r = json(&results(StatusCode::BAD_GATEWAY, b"<html>", keys(), "p:1").await);
    assert_eq!(r.matches("peer_unavailable").count(), 2, "{r}");
    // An answer of 200 that is not one result per item, whole: nothing passes.
    for bad in [
        &br#"{"results":[{"key":"a"},{"key":"b"}],"x":1}"#[..],
        br#"{"results":[{"key":"a"},{"key":"b"},]}"#,
        br#"{"results":[{"key":"a"},{"key":"b"}"#,
        br#"{"results":[{"key":"a"},{"key":"b"},{"key":"c"}]}"#,
        b"",
    ] {
        let r = json(&results(StatusCode::OK, bad, keys(), "p:1").await);
        assert_eq!(r.matches("peer_unavailable").count(), 2, "{r}");
    }
}

/// Prints what a sub-batch's two big steps took whole, as before: encoding 16 MB of items
/// for the owner, and reading 10,000 results back; against the longest step of each now,
/// with a 200 µs slice (the test binary runs on the system's allocator, not the
/// service's: `perf/probes/buffer_growth.rs` shows what a growing buffer costs under it).
///
/// `cargo test --release --lib sub_batch_figure -- --ignored --nocapture`
#[test]
#[ignore]
fn sub_batch_figure() {
    use crate::api::array::ArrayScan;
    use std::time::{Duration, Instant};
    #[derive(serde::Serialize)]
    struct Sub<'a> {
        timers: &'a [&'a RawValue],
    }
    #[derive(Deserialize)]
    struct Results {
        results: Vec<Box<RawValue>>,
    }
    let texts: Vec<String> = (0..10_000)
        .map(|i| {
            format!(
                r#"{{"key":"order-{i:06}","delay_ms":1,"payload":"{}"}}"#,
                "x".repeat(1_600)
            )
        })
        .collect();
    let items: Vec<&RawValue> = texts
        .iter()
        .map(|t| serde_json::from_str(t).expect("JSON"))
        .collect();
    let answer = format!(
        r#"{{"results":[{}]}}"#,
        (0..10_000)
            .map(|i| format!(r#"{{"key":"order-{i:06}","status":201,"version":{i},"fire_at_us":1700000000000000}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    crate::runtime::cooperate::on_executor(async move {
        for round in 0..3 {
            let t = Instant::now();
            let whole = serde_json::to_vec(&Sub { timers: &items }).expect("JSON");
            let encode_whole = t.elapsed();
            crate::runtime::cooperate::longest_slice();
            let sliced = encode_array_of("timers", &items, raw_bytes(items.iter().copied()))
                .await
                .expect("JSON");
            let longest_encode = crate::runtime::cooperate::longest_slice();
            assert_eq!(sliced, whole);
            let t = Instant::now();
            let r: Results = serde_json::from_slice(answer.as_bytes()).expect("JSON");
            let read_whole = t.elapsed();
            let mut scan = ArrayScan::new(answer.as_bytes(), "results").expect("opens");
            let (mut longest_read, mut n) = (Duration::ZERO, 0);
            loop {
                let t = Instant::now();
                let done = scan
                    .step(
                        || t.elapsed() >= Duration::from_micros(200),
                        |_| {
                            n += 1;
                            Ok(())
                        },
                    )
                    .expect("results");
                longest_read = longest_read.max(t.elapsed());
                if done {
                    break;
                }
            }
            assert_eq!(n, r.results.len());
            println!(
                "round {round}: encoding {:.1} MB of items whole {:.2} ms, longest step now {:.0} µs; \
                 reading {} results ({:.2} MB) whole {:.2} ms, longest step now {:.0} µs",
                whole.len() as f64 / 1e6,
                encode_whole.as_secs_f64() * 1e3,
                longest_encode.as_secs_f64() * 1e6,
                n,
                answer.len() as f64 / 1e6,
                read_whole.as_secs_f64() * 1e3,
                longest_read.as_secs_f64() * 1e6,
            );
        }
    });
}
