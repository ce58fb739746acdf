use super::*;
use http_body_util::BodyExt;

/// The array encoded an item at a time, across yields, is the JSON that one encoding of
/// the whole object gives, for none, one and many items (many taking several slices).
#[test]
fn an_array_encoded_in_slices_is_the_whole_objects_json() {
    #[derive(Serialize)]
    struct Item {
        key: String,
        payload: String,
    }
    #[derive(Serialize)]
    struct Whole {
        dead: Vec<Item>,
    }
    let items = |n: usize| -> Vec<Item> {
        (0..n)
            .map(|i| Item {
                key: format!("k{i}"),
                payload: "\"é\\".repeat(i % 7 * 1000),
            })
            .collect()
    };
    crate::runtime::cooperate::on_executor(async move {
        for n in [0, 1, 3_000] {
            let resp = json_array_of(StatusCode::OK, "dead", items(n), 0).await;
            assert_eq!(resp.status(), StatusCode::OK);
            let body = resp.into_body().collect().await.expect("body").to_bytes();
            let whole = serde_json::to_vec(&Whole { dead: items(n) }).expect("JSON");
            assert_eq!(body.as_ref(), whole.as_slice(), "{n} items");
        }
    });
}

/// With its size known, the buffer is reserved once and never grown (each growth copies
/// all it holds, in one step); without, it grows as it fills.
#[test]
fn an_array_of_known_size_is_encoded_in_the_buffer_reserved_for_it() {
    let texts: Vec<String> = (0..2_000)
        .map(|i| format!(r#"{{"k":"{}"}}"#, "v".repeat(i)))
        .collect();
    let items: Vec<&RawValue> = texts
        .iter()
        .map(|t| serde_json::from_str(t).expect("JSON"))
        .collect();
    crate::runtime::cooperate::on_executor(async move {
        let bytes = raw_bytes(items.iter().copied());
        let out = encode_array_of("timers", &items, bytes)
            .await
            .expect("JSON");
        assert_eq!(out.capacity(), "timers".len() + 8 + bytes, "never grown");
        assert_eq!(out.len(), "timers".len() + 7 + bytes - 1);
        let grown = encode_array_of("timers", &items, 0).await.expect("JSON");
        assert_eq!(grown, out);
        assert!(grown.capacity() > "timers".len() + 8);
    });
}

/// A page of a thousand dead letters with 64 KiB payloads (JSON strings): encoded whole
/// in one step, against the longest slice `encode_array_of` held the thread (`Slice`),
/// with no estimate of its size (the buffer doubles as it fills) and with one. Five rounds.
///
/// `cargo test --release --lib dead_page_encoding_figure -- --ignored --nocapture`
#[test]
#[ignore = "a figure, not a check: run it with --ignored --nocapture"]
fn dead_page_encoding_figure() {
    use crate::runtime::cooperate::longest_slice;
    use std::time::Instant;
    #[derive(Serialize)]
    struct Letter {
        key: String,
        payload: String,
    }
    #[derive(Serialize)]
    struct Whole<'a> {
        dead: &'a [Letter],
    }
    let page: Vec<Letter> = (0..1_000)
        .map(|i| Letter {
            key: format!("order-{i:06}"),
            payload: "x".repeat(65_000),
        })
        .collect();
    let estimate: usize = page
        .iter()
        .map(|l| l.key.len() + l.payload.len() + 32)
        .sum();
    crate::runtime::cooperate::on_executor(async move {
        for round in 0..5 {
            let t = Instant::now();
            let whole = serde_json::to_vec(&Whole { dead: &page }).expect("JSON");
            let one_step = t.elapsed();
            drop(whole);
            longest_slice();
            let grown = encode_array_of("dead", &page, 0).await;
            let grown_step = longest_slice();
            drop(grown);
            let sized = encode_array_of("dead", &page, estimate).await;
            let sized_step = longest_slice();
            println!(
                "round {round}: {} MB whole in one step {:.2} ms; in slices, longest step \
                 {:.2} ms growing the buffer, {:.0} µs with its size estimated",
                sized.map_or(0, |v| v.len()) / 1_000_000,
                one_step.as_secs_f64() * 1e3,
                grown_step.as_secs_f64() * 1e3,
                sized_step.as_secs_f64() * 1e6,
            );
        }
    });
}
