use super::*;

#[test]
fn list_query_reads_limit_and_after_and_refuses_the_rest() {
    assert_eq!(list_query(None), Ok((DEFAULT_LIMIT, None)));
    assert_eq!(
        list_query(Some("limit=5&after=k1")),
        Ok((5, Some("k1".into())))
    );
    for bad in ["limit=0", "limit=1001", "limit=x", "after=a/b", "sort=key"] {
        assert!(list_query(Some(bad)).is_err(), "{bad}");
    }
}

fn raw(key: &str, from: &str) -> (String, Box<RawValue>) {
    let json = serde_json::json!({"key": key, "from": from}).to_string();
    (key.into(), RawValue::from_string(json).expect("JSON"))
}

#[test]
fn pages_merge_by_key_each_key_once_up_to_the_limit() {
    let all = vec![
        raw("c", "a"),
        raw("a", "a"),
        raw("e", "a"),
        raw("b", "b"),
        raw("c", "b"),
        raw("d", "b"),
    ];
    let merged = merge_pages(all, 4);
    let keys: Vec<String> = merged
        .iter()
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(r.get()).expect("JSON")["key"].to_string()
        })
        .collect();
    assert_eq!(keys, [r#""a""#, r#""b""#, r#""c""#, r#""d""#]);
    assert_eq!(
        serde_json::to_string(&merged).expect("JSON"),
        r#"[{"from":"a","key":"a"},{"from":"b","key":"b"},{"from":"a","key":"c"},{"from":"b","key":"d"}]"#
    );
}

/// A letter's key is read from its first field when it comes first, as this service
/// writes it, and from the whole letter otherwise: the same key either way.
#[test]
fn a_letters_key_is_its_key_field_wherever_it_stands() {
    let d = DeadInfo {
        key: "order-\"1\"\u{e9}".into(),
        version: 7,
        fire_at: crate::units::UtcMicros(1),
        attempts: 1,
        last_status: None,
        last_error: None,
        callback: None,
        meta: Vec::new(),
        payload: b"[1,2,3]".to_vec(),
        body_bytes: 7,
    };
    let ours = serde_json::value::to_raw_value(&DeadBody::new(&d)).expect("JSON");
    assert!(ours.get().starts_with(r#"{"key":"#), "{}", ours.get());
    assert_eq!(letter_key(&ours), Ok(d.key.clone()));
    for (text, key) in [
        (r#"{"version":1,"key":"k\u0031"}"#, Some("k1")),
        (r#"{"key" : "spaced"}"#, Some("spaced")),
        (r#"{"key":7}"#, None),
        (r#"{"version":1}"#, None),
    ] {
        let raw = RawValue::from_string(text.to_string()).expect("JSON");
        assert_eq!(letter_key(&raw).ok().as_deref(), key, "{text}");
    }
}

/// A letter's estimate covers its JSON, so that a page's buffer is not grown.
#[test]
fn a_letters_estimate_covers_its_json() {
    for (payload, error) in [
        (
            &br#"{"order":"A-1","items":[1,2,3]}"#[..],
            Some("refused: \"x\"\n".repeat(20)),
        ),
        (b"", None),
        (br#""\u00e9\n""#, Some(String::new())),
    ] {
        let mut d = DeadInfo {
            key: "order-1".repeat(20),
            version: u64::MAX,
            fire_at: crate::units::UtcMicros(u64::MAX),
            attempts: u32::MAX,
            last_status: Some(503),
            last_error: error,
            callback: Some("https://hooks.example.com/a?b=c&d=\"e\"".into()),
            meta: Vec::new(),
            payload: payload.to_vec(),
            body_bytes: 0,
        };
        d.body_bytes = d.payload.len()
            + d.last_error.as_ref().map_or(0, String::len)
            + d.callback.as_ref().map_or(0, String::len);
        let json = serde_json::to_vec(&DeadBody::new(&d)).expect("JSON");
        assert!(
            json.len() <= DeadBody::bytes(&d),
            "{} > {}",
            json.len(),
            DeadBody::bytes(&d)
        );
    }
}

#[test]
fn a_peer_page_that_is_not_a_page_fails_the_list_naming_the_peer() {
    crate::runtime::cooperate::on_executor(async {
        let ok = peer_page(
            "10.0.0.2:7480",
            StatusCode::OK,
            br#"{"dead":[{"key":"k1","x":1}]}"#,
        )
        .await
        .expect("a page");
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].0, "k1");
        assert_eq!(ok[0].1.get(), r#"{"key":"k1","x":1}"#);
        for (status, body) in [
            (StatusCode::SERVICE_UNAVAILABLE, &br#"{"dead":[]}"#[..]),
            (StatusCode::OK, b"not json"),
            (StatusCode::OK, br#"{"dead":[{"nokey":1}]}"#),
            (StatusCode::OK, br#"{"dead":[{"key":7}]}"#),
            (StatusCode::OK, br#"{"other":[]}"#),
            (StatusCode::OK, br#"{"dead":[{"key":"a"}"#),
            (StatusCode::OK, br#"{"dead":[{"key":"a"},]}"#),
            (StatusCode::OK, br#"{"dead":[{"key":"a"}]}x"#),
            (StatusCode::OK, br#"{"dead":[{"key":"a"}],"more":1}"#),
            (StatusCode::OK, br#"{"dead":[{"key":"a"} {"key":"b"}]}"#),
            (StatusCode::OK, b""),
        ] {
            match peer_page("10.0.0.2:7480", status, body).await {
                Err(ApiError::PeerUnavailable(why)) => {
                    assert!(why.contains("10.0.0.2:7480"), "{why}")
                }
                other => panic!("{status} {:?}: {other:?}", String::from_utf8_lossy(body)),
            }
        }
    });
}

/// Prints what a peer's page of 500 letters, each with a payload of 32,000 numbers
/// (64 KB), took to read whole in one step (as it was read before), against the longest
/// letter read now.
///
/// `cargo test --release --lib peer_page_figure -- --ignored --nocapture`
#[test]
#[ignore]
fn peer_page_figure() {
    use std::time::{Duration, Instant};
    #[derive(serde::Deserialize)]
    struct Page {
        dead: Vec<Box<RawValue>>,
    }
    #[derive(serde::Deserialize)]
    struct Keyed {
        key: String,
    }
    let payload = vec!["1"; 32_000].join(",");
    let letters: Vec<String> = (0..500)
        .map(|i| format!(r#"{{"key":"order-{i:06}","version":1,"payload":[{payload}]}}"#))
        .collect();
    let body = format!(r#"{{"dead":[{}]}}"#, letters.join(","));
    for round in 0..3 {
        let t = Instant::now();
        let page: Page = serde_json::from_slice(body.as_bytes()).expect("a page");
        let keyed: Vec<(String, Box<RawValue>)> = page
            .dead
            .into_iter()
            .map(|raw| {
                let k: Keyed = serde_json::from_str(raw.get()).expect("a key");
                (k.key, raw)
            })
            .collect();
        let whole = t.elapsed();
        let mut scan =
            super::super::array::ArrayScan::new(body.as_bytes(), "dead").expect("a page");
        let (mut longest, mut steps) = (Duration::ZERO, 0);
        let mut read = Vec::new();
        loop {
            let t = Instant::now();
            let done = scan
                .step(
                    || true,
                    |raw| {
                        read.push((letter_key(&raw)?, raw));
                        Ok(())
                    },
                )
                .expect("a page");
            longest = longest.max(t.elapsed());
            steps += 1;
            if done {
                break;
            }
        }
        assert_eq!(read.len(), keyed.len());
        println!(
            "round {round}: {:.1} MB, {} letters: whole in one step {:.1} ms; \
             a letter a step, {steps} steps, longest {:.0} µs",
            body.len() as f64 / 1e6,
            read.len(),
            whole.as_secs_f64() * 1e3,
            longest.as_secs_f64() * 1e6
        );
    }
}
