//! End to end with a real redis-server: timers registered over HTTP arrive in the tenant's
//! stream after their deadline with their payload intact, and a store that is down turns
//! durable writes into 503 store_unavailable with Retry-After instead of hanging.

mod api_support;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::Server;
use redis_server::{wait_stream, RedisServer};
use serde_json::json;

#[test]
fn timers_put_over_http_arrive_in_the_stream_after_their_deadline_with_their_payload() {
    let redis = RedisServer::start();
    let url = redis.url();
    let s = Server::start(&["--redis", &url, "--shards", "2"]);
    let (_, health) = s.json("GET", "/healthz", "");
    assert_eq!(health["store"], "redis");
    let mut expected = Vec::new();
    for i in 0..20 {
        let payload = json!({"order": i, "note": "close if unpaid", "nested": [1, {"x": "é"}]});
        let body = json!({"delay_ms": 50 + i * 10, "payload": payload}).to_string();
        let (st, r) = s.json("PUT", &format!("/v1/timers/shop/order-{i}"), &body);
        assert_eq!(st, 201, "{r}");
        expected.push((
            format!("order-{i}"),
            r["version"].as_u64(),
            r["fire_at_us"].as_u64(),
            payload,
        ));
    }
    // A batch too, and a cancelled timer that must not arrive.
    let (st, _) = s.json(
        "POST",
        "/v1/timers/shop",
        r#"{"timers":[{"key":"batch-1","delay_ms":30,"payload":"b"},{"key":"gone","delay_ms":600000}]}"#,
    );
    assert_eq!(st, 200);
    assert_eq!(s.req("DELETE", "/v1/timers/shop/gone", "").status, 204);
    let mut con = redis.client().expect("redis client");
    let entries = wait_stream(&mut con, "shop", |e| e.len() >= 21);
    assert_eq!(entries.len(), 21, "{entries:?}");
    for (key, version, fire_at_us, payload) in &expected {
        let e = entries
            .iter()
            .find(|e| &e.key == key)
            .unwrap_or_else(|| panic!("{key} missing"));
        assert_eq!(Some(e.version), *version);
        assert_eq!(Some(e.fire_at_us), *fire_at_us);
        assert!(e.fired_at_us >= e.fire_at_us, "{key} fired early: {e:?}");
        let got: serde_json::Value = serde_json::from_str(&e.payload).expect("payload is JSON");
        assert_eq!(&got, payload);
    }
    assert!(entries
        .iter()
        .any(|e| e.key == "batch-1" && e.payload == "\"b\""));
    assert!(entries.iter().all(|e| e.key != "gone"));
    // The store's figures reach /metrics; the stream length is sampled every few seconds.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let text = String::from_utf8_lossy(&s.req("GET", "/metrics", "").body).into_owned();
        if text.contains("punctual_stream_length{tenant=\"shop\"} 21")
            || std::time::Instant::now() > give_up
        {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    for name in [
        "punctual_stream_length{tenant=\"shop\"} 21",
        "punctual_store_flush_seconds_bucket{le=",
        "punctual_store_recoveries_total{shard=\"0\"} 1",
        "punctual_store_recovery_seconds{shard=",
    ] {
        assert!(text.contains(name), "/metrics lacks {name}:\n{text}");
    }
}

/// Writes of about 60 KiB, a batch of 100 due together: the pipelines stop at their byte
/// bound (2 MiB, `store::redis::outbox::PIPELINE_BYTES`), so the registrations and the fires
/// (each an atomic XADD and HDEL) go in many pipelines, and each timer still arrives once,
/// with its payload whole, and none stays pending.
#[test]
fn large_writes_go_in_pipelines_of_bounded_size_and_each_arrives_once_whole() {
    let redis = RedisServer::start();
    let s = Server::start(&["--redis", &redis.url(), "--shards", "2"]);
    let pad = |i: usize| char::from(b'a' + (i % 26) as u8).to_string().repeat(60_000);
    for part in 0..4 {
        let timers: Vec<serde_json::Value> = (part * 25..part * 25 + 25)
            .map(|i| json!({"key": format!("big-{i:03}"), "delay_ms": 400, "payload": {"i": i, "pad": pad(i)}}))
            .collect();
        let (st, r) = s.json(
            "POST",
            "/v1/timers/shop",
            &json!({ "timers": timers }).to_string(),
        );
        assert_eq!(st, 200, "{r}");
    }
    let mut con = redis.client().expect("redis client");
    let entries = wait_stream(&mut con, "shop", |e| e.len() >= 100);
    assert_eq!(entries.len(), 100);
    let mut keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 100, "each timer once");
    for e in &entries {
        let got: serde_json::Value = serde_json::from_str(&e.payload).expect("payload is JSON");
        let i = got["i"].as_u64().expect("i") as usize;
        assert_eq!(e.key, format!("big-{i:03}"));
        assert_eq!(
            got["pad"].as_str(),
            Some(pad(i).as_str()),
            "{} whole",
            e.key
        );
        assert!(e.fired_at_us >= e.fire_at_us, "{} fired early", e.key);
    }
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while s.json("GET", "/v1/timers/shop/big-000", "").0 != 404 {
        assert!(
            std::time::Instant::now() < give_up,
            "still pending after its fire"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_store_that_is_down_answers_503_store_unavailable_with_retry_after() {
    let down = RedisServer::stopped(redis_server::free_port());
    let url = down.url();
    let s = Server::start_unhealthy(&["--redis", &url, "--shards", "1"]);
    let h = s.req("GET", "/healthz", "");
    assert_eq!(h.status, 503);
    assert_eq!(h.json()["status"], "unavailable");
    let r = s.req("PUT", "/v1/timers/t/k", r#"{"delay_ms":1000}"#);
    assert_eq!(
        (r.status, r.code().as_str()),
        (503, "store_unavailable"),
        "{:?}",
        String::from_utf8_lossy(&r.body)
    );
    assert!(r.header("retry-after").is_some());
}
