//! Contract tests: every route and error code of docs/API.md, against the real binary
//! over real TCP. (No Redis store exists yet, so 503 store_unavailable is not covered.)

mod api_support;
use api_support::Server;
use serde_json::json;

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[test]
fn put_new_is_201_and_replacing_a_pending_timer_is_200() {
    let s = Server::start(&[]);
    let (st, a) = s.json(
        "PUT",
        "/v1/timers/acme/order-8812",
        r#"{"fire_at_ms":1893456000000}"#,
    );
    assert_eq!(st, 201, "{a}");
    assert_eq!(a["tenant"], "acme");
    assert_eq!(a["key"], "order-8812");
    assert_eq!(a["fire_at_us"], 1_893_456_000_000_000u64);
    let v1 = a["version"].as_u64().expect("version");
    assert!(v1 > 0);
    let (st, b) = s.json(
        "PUT",
        "/v1/timers/acme/order-8812",
        r#"{"fire_at":"2030-01-01T00:00:00.1234567Z"}"#,
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        b["fire_at_us"], 1_893_456_000_123_456u64,
        "RFC 3339 truncated to the µs"
    );
    assert!(b["version"].as_u64().expect("version") > v1);
}

#[test]
fn put_after_cancel_is_201_again_with_a_higher_version() {
    let s = Server::start(&[]);
    let (_, a) = s.json("PUT", "/v1/timers/t/k", r#"{"delay_ms":600000}"#);
    assert_eq!(s.req("DELETE", "/v1/timers/t/k", "").status, 204);
    let (st, b) = s.json("PUT", "/v1/timers/t/k", r#"{"delay_ms":600000}"#);
    assert_eq!(st, 201);
    assert!(b["version"].as_u64() > a["version"].as_u64());
}

#[test]
fn delay_ms_counts_from_the_server_clock_at_arrival() {
    let s = Server::start(&[]);
    let before = now_us();
    let (st, a) = s.json("PUT", "/v1/timers/t/k", r#"{"delay_ms":60000}"#);
    let after = now_us();
    assert_eq!(st, 201);
    let at = a["fire_at_us"].as_u64().expect("fire_at_us");
    assert!(
        at >= before + 60_000_000 && at <= after + 60_000_000,
        "{at} not in [{before}, {after}] + 60 s"
    );
}

#[test]
fn get_returns_the_timer_with_its_payload_as_the_same_json() {
    let s = Server::start(&[]);
    let payload =
        json!({"order": 8812, "items": [1, 2.5, "x"], "nested": {"ok": true}, "u": "é\n"});
    let body = json!({"delay_ms": 600000, "payload": payload}).to_string();
    let (_, put) = s.json("PUT", "/v1/timers/shop/o-1", &body);
    let (st, got) = s.json("GET", "/v1/timers/shop/o-1", "");
    assert_eq!(st, 200);
    assert_eq!(got["tenant"], "shop");
    assert_eq!(got["key"], "o-1");
    assert_eq!(got["fire_at_us"], put["fire_at_us"]);
    assert_eq!(got["version"], put["version"]);
    assert_eq!(got["payload"], payload);
    s.req("PUT", "/v1/timers/shop/o-2", r#"{"delay_ms":600000}"#);
    assert_eq!(
        s.json("GET", "/v1/timers/shop/o-2", "").1["payload"],
        json!(null)
    );
}

#[test]
fn get_and_delete_of_unknown_fired_or_cancelled_timers_are_404() {
    let s = Server::start(&[]);
    let r = s.req("GET", "/v1/timers/t/never", "");
    assert_eq!((r.status, r.code()), (404, "not_found".to_string()));
    assert_eq!(s.req("DELETE", "/v1/timers/t/never", "").status, 404);
    // A deadline in the past is accepted and fires at once.
    assert_eq!(
        s.req("PUT", "/v1/timers/t/past", r#"{"fire_at_ms":0}"#)
            .status,
        201
    );
    let mut status = 0;
    for _ in 0..500 {
        status = s.req("GET", "/v1/timers/t/past", "").status;
        if status == 404 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(status, 404, "a fired timer is gone");
    assert_eq!(s.req("DELETE", "/v1/timers/t/past", "").status, 404);
    s.req("PUT", "/v1/timers/t/c", r#"{"delay_ms":600000}"#);
    let d = s.req("DELETE", "/v1/timers/t/c", "");
    assert_eq!(d.status, 204);
    assert!(d.body.is_empty());
    assert_eq!(s.req("GET", "/v1/timers/t/c", "").status, 404);
    assert_eq!(s.req("DELETE", "/v1/timers/t/c", "").status, 404);
}

#[test]
fn batch_answers_one_result_per_item_in_order() {
    let s = Server::start(&[]);
    let big = "x".repeat(65_537);
    let body = json!({"timers": [
        {"key": "a", "delay_ms": 600000, "payload": {"n": 1}},
        {"key": "a", "fire_at_ms": 1893456000000u64},
        {"key": "b/c", "delay_ms": 1},
        {"nokey": 1},
        {"key": "d", "delay_ms": 1, "fire_at_ms": 1},
        {"key": "e", "delay_ms": -1},
        {"key": "f", "delay_ms": 1, "payload": big},
        {"key": "g", "fire_at": "2030-01-01T00:00:00Z"},
    ]})
    .to_string();
    let (st, r) = s.json("POST", "/v1/timers/acme", &body);
    assert_eq!(st, 200, "{r}");
    let res = r["results"].as_array().expect("results");
    let summary: Vec<(serde_json::Value, u64, String)> = res
        .iter()
        .map(|x| {
            (
                x["key"].clone(),
                x["status"].as_u64().unwrap_or(0),
                x["error"]["code"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let expect = [
        (json!("a"), 201, ""),
        (json!("a"), 200, ""),
        (json!("b/c"), 400, "invalid_key"),
        (json!(null), 400, "invalid_field"),
        (json!("d"), 400, "invalid_deadline"),
        (json!("e"), 400, "deadline_out_of_range"),
        (json!("f"), 413, "payload_too_large"),
        (json!("g"), 201, ""),
    ];
    let expect: Vec<_> = expect
        .iter()
        .map(|(k, c, e)| (k.clone(), *c, e.to_string()))
        .collect();
    assert_eq!(summary, expect);
    assert_eq!(res[1]["fire_at_us"], 1_893_456_000_000_000u64);
    assert!(res[1]["version"].as_u64() > res[0]["version"].as_u64());
    // The later item replaced the earlier one.
    let (_, got) = s.json("GET", "/v1/timers/acme/a", "");
    assert_eq!(got["version"], res[1]["version"]);
    assert_eq!(got["payload"], json!(null));
}

#[test]
fn batch_size_bounds_are_one_to_ten_thousand_items() {
    let s = Server::start(&[]);
    let items = |n: usize| {
        let v: Vec<_> = (0..n)
            .map(|i| json!({"key": format!("k{i}"), "delay_ms": 600000}))
            .collect();
        json!({ "timers": v }).to_string()
    };
    let (st, r) = s.json("POST", "/v1/timers/t", &items(10_000));
    assert_eq!(st, 200);
    let res = r["results"].as_array().expect("results");
    assert_eq!(res.len(), 10_000);
    assert!(res.iter().all(|x| x["status"] == 201));
    let r = s.req("POST", "/v1/timers/t", &items(10_001));
    assert_eq!((r.status, r.code()), (413, "too_many_items".to_string()));
    let r = s.req("POST", "/v1/timers/t", r#"{"timers":[]}"#);
    assert_eq!((r.status, r.code()), (400, "empty_batch".to_string()));
    let r = s.req("POST", "/v1/timers/t", r#"{"timers":{}}"#);
    assert_eq!((r.status, r.code()), (400, "invalid_field".to_string()));
}

#[test]
fn metrics_and_healthz_answer() {
    let s = Server::start(&["--shards", "2"]);
    s.req("PUT", "/v1/timers/t/k", r#"{"delay_ms":600000}"#);
    let (st, h) = s.json("GET", "/healthz", "");
    assert_eq!(st, 200);
    assert_eq!(h["status"], "ok");
    let m = s.req("GET", "/metrics", "");
    assert_eq!(m.status, 200);
    let text = String::from_utf8_lossy(&m.body);
    for name in [
        "punctual_timers_pending{shard=\"0\"}",
        "punctual_timers_pending{shard=\"1\"}",
        "punctual_timers_fired_total{shard=",
        "punctual_fire_lateness_seconds_bucket{",
        "punctual_ring_depth{shard=",
        "punctual_ring_rejected_total{shard=",
        "punctual_clock_offset_seconds{shard=",
        "punctual_clock_steps_total{shard=",
        "punctual_clock_fallback{shard=\"0\"}",
        "punctual_shard_watchdog_wakes_total{shard=",
        "punctual_executor_stalls_total{shard=",
        "punctual_shard_failed{shard=\"0\"}",
        "punctual_conflicts_exists_total{shard=",
        "punctual_conflicts_version_mismatch_total{shard=",
        "punctual_conflicts_not_pending_total{shard=",
        "punctual_build_info{",
        "punctual_http_requests_total{shard=",
        "route=\"put_timer\",status=\"201\"",
        "punctual_http_request_duration_seconds_bucket{",
    ] {
        assert!(text.contains(name), "/metrics lacks {name}:\n{text}");
    }
    let pending: u64 = text
        .lines()
        .filter(|l| l.starts_with("punctual_timers_pending{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(pending, 1);
}

#[test]
fn unknown_routes_and_empty_segments_are_404_and_wrong_methods_405() {
    let s = Server::start(&[]);
    for path in [
        "/",
        "/v1",
        "/v1/timers",
        "/v1/timers/",
        "/v1/timers//k",
        "/v1/timers/t/",
        "/v1/timers/t/k/x",
        "/v2/timers/t/k",
        "/metrics/x",
    ] {
        let r = s.req("GET", path, "");
        assert_eq!(
            (r.status, r.code()),
            (404, "not_found".to_string()),
            "{path}"
        );
    }
    let r = s.req("POST", "/v1/timers/t/k", "{}");
    assert_eq!(
        (r.status, r.code()),
        (405, "method_not_allowed".to_string())
    );
    assert_eq!(r.header("allow"), Some("PUT, GET, DELETE"));
    let r = s.req("PATCH", "/v1/timers/t", "");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, POST")));
    let r = s.req("DELETE", "/metrics", "");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET")));
}
