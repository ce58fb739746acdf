//! What one tenant can do to another: callbacks outside the allow-list, and a slow endpoint
//! that must not slow another tenant's deliveries.

use super::*;

#[test]
fn a_callback_outside_the_allow_list_is_refused() {
    let rx = Receiver::ok();
    let s = start(
        &format!(
            "callback_allow = [{:?}]\nopen_tenants = true\n[tenants.locked]\ncallback_allow = [\"https://only.example.com/\"]\n",
            rx.base()
        ),
        &[],
    );
    for url in [
        "http://127.0.0.1:1/elsewhere".to_string(),
        format!("http://{}.evil.net/x", rx.addr.ip()),
        "http://169.254.169.254/latest/meta-data".to_string(),
    ] {
        let (st, r) = put(
            &s,
            "t",
            "k",
            json!({"delay_ms": 10, "callback": {"url": url}}),
        );
        assert_eq!(
            (st, r["error"]["code"].as_str()),
            (400, Some("callback_not_allowed")),
            "{url}: {r}"
        );
    }
    // A tenant with its own list does not get the top-level one.
    let (st, r) = put(
        &s,
        "locked",
        "k",
        json!({"delay_ms": 10, "callback": {"url": rx.url("h")}}),
    );
    assert_eq!(
        (st, r["error"]["code"].as_str()),
        (400, Some("callback_not_allowed"))
    );
    // In a batch, the item fails alone.
    let body = json!({"timers": [
        {"key": "ok", "delay_ms": 60000, "callback": {"url": rx.url("h")}},
        {"key": "bad", "delay_ms": 60000, "callback": {"url": "http://127.0.0.1:1/x"}},
    ]});
    let (st, r) = s.json("POST", "/v1/timers/t", &body.to_string());
    assert_eq!(st, 200);
    assert_eq!(r["results"][0]["status"], 201);
    assert_eq!(r["results"][1]["status"], 400);
    assert_eq!(r["results"][1]["error"]["code"], "callback_not_allowed");
    // A retry policy out of bounds is an invalid field.
    let (st, r) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "callback": {"url": rx.url("h")}, "retry": {"max_attempts": 0}}),
    );
    assert_eq!(
        (st, r["error"]["code"].as_str()),
        (400, Some("invalid_field"))
    );
    // Without any allow-list, callbacks are refused.
    let closed = start("", &[]);
    let (st, r) = put(
        &closed,
        "t",
        "k",
        json!({"delay_ms": 10, "callback": {"url": rx.url("h")}}),
    );
    assert_eq!(
        (st, r["error"]["code"].as_str()),
        (400, Some("callback_not_allowed"))
    );
    assert!(rx.received().is_empty());
}

#[test]
fn a_slow_endpoint_of_one_tenant_does_not_slow_another() {
    // Each of A's deliveries holds its slot 4 s: long enough that none frees before the
    // checks of B's deliveries and of A's cap below end, on a slow host too; three rounds of
    // 8 still end within `LONG`.
    let slow = Receiver::start(|_, _| Reply::status(200).after(Duration::from_secs(4)));
    let fast = Receiver::ok();
    let s = start(
        &format!(
            "callback_allow = [{:?}, {:?}]\nwebhook_max_in_flight_per_tenant = 8\nwebhook_timeout_ms = 10000\n",
            slow.base(),
            fast.base()
        ),
        &["--shards", "1"],
    );
    let mut timers = Vec::new();
    for i in 0..24 {
        timers.push(
            json!({"key": format!("a{i}"), "delay_ms": 50, "callback": {"url": slow.url("a")}}),
        );
    }
    let (st, _) = s.json(
        "POST",
        "/v1/timers/A",
        &json!({"timers": timers}).to_string(),
    );
    assert_eq!(st, 200);
    std::thread::sleep(Duration::from_millis(300));
    // A's deliveries now fill its cap, each for 4 s; B's go out on time.
    let mut deadlines = Vec::new();
    for i in 0..20 {
        let (st, r) = put(
            &s,
            "B",
            &format!("b{i}"),
            json!({"delay_ms": 20 + i * 10, "callback": {"url": fast.url("b")}}),
        );
        assert_eq!(st, 201);
        deadlines.push(r["fire_at_us"].as_u64().expect("fire_at_us"));
    }
    let got = fast.wait(LONG, |r| r.len() >= 20);
    assert_eq!(got.len(), 20);
    for r in &got {
        let fire_at = r.json()["fire_at_us"].as_u64().expect("fire_at_us");
        let late = r.at_us.saturating_sub(fire_at);
        assert!(r.at_us >= fire_at, "early");
        assert!(late < 1_000_000, "B waited behind A: {late} µs late");
    }
    assert!(
        slow.received().len() <= 8,
        "A's cap was not kept: {}",
        slow.received().len()
    );
    let metrics = String::from_utf8_lossy(&s.req("GET", "/metrics", "").body).into_owned();
    let refused = metrics
        .lines()
        .find(|l| l.starts_with("punctual_webhook_refused_total{shard=\"0\",tenant=\"A\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<u64>().ok());
    assert!(
        refused.is_some_and(|n| n > 0),
        "refusals not counted:\n{metrics}"
    );
    let in_flight = metrics
        .lines()
        .find(|l| l.starts_with("punctual_webhook_in_flight{shard=\"0\",tenant=\"A\"}"))
        .map(str::to_string);
    assert!(in_flight.is_some_and(|l| l.ends_with(" 8")), "{metrics}");
    // Held back is not lost: each of A's deliveries goes out once a slot frees, in turn.
    let got = slow.wait(LONG, |r| r.len() >= 24);
    assert_eq!(got.len(), 24, "held-back deliveries were lost");
    let mut keys: Vec<String> = got
        .iter()
        .map(|r| r.json()["key"].as_str().unwrap_or("").to_string())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 24, "a delivery went twice: {keys:?}");
    assert!(dead(&s, "A").is_empty());
}
