//! What one delivery carries and how a failed attempt is tried again: the signed body and
//! headers, a 500 then a 200, a 429 with `Retry-After`, a timeout.

use super::*;

#[test]
fn a_delivery_is_signed_and_carries_the_documented_body_and_headers() {
    let rx = Receiver::ok();
    let s = start(
        &format!(
            "callback_allow = [{:?}]\nopen_tenants = true\n[tenants.shop]\nwebhook_secret = \"s3cret-0123456789abcdef0123456789\"\n",
            rx.base()
        ),
        &[],
    );
    let (st, r) = put(
        &s,
        "shop",
        "order-1",
        json!({"delay_ms": 300, "payload": {"order": 1},
               "callback": {"url": rx.url("hooks/a")},
               "retry": {"max_attempts": 3, "base_delay_ms": 100, "max_delay_ms": 1000}}),
    );
    assert_eq!(st, 201, "{r}");
    let version = r["version"].as_u64().expect("version");
    let fire_at = r["fire_at_us"].as_u64().expect("fire_at_us");
    // A pending timer shows its callback and retry policy.
    let (st, g) = s.json("GET", "/v1/timers/shop/order-1", "");
    assert_eq!(st, 200, "{g}");
    assert_eq!(g["callback"]["url"], rx.url("hooks/a"));
    assert_eq!(
        g["retry"],
        json!({"max_attempts": 3, "base_delay_ms": 100, "max_delay_ms": 1000})
    );
    assert_eq!(g["delivery"]["state"], "pending");
    assert_eq!(g["fire_at_us"].as_u64(), Some(fire_at));

    let got = rx.wait(LONG, |r| !r.is_empty());
    assert_eq!(got.len(), 1, "{got:?}");
    let d = &got[0];
    assert_eq!(d.path, "/hooks/a");
    assert!(
        d.at_us >= fire_at,
        "delivered before its deadline: {} < {fire_at}",
        d.at_us
    );
    assert!(
        d.at_us < fire_at + 5_000_000,
        "absurdly late: {} µs",
        d.at_us - fire_at
    );
    assert_eq!(
        d.header("idempotency-key"),
        Some(format!("shop/order-1/{version}").as_str())
    );
    assert_eq!(d.header("punctual-attempt"), Some("1"));
    assert_eq!(d.header("content-type"), Some("application/json"));
    let sig = d.header("punctual-signature").expect("signed");
    let now_s = receiver::now_us() / 1_000_000;
    assert_eq!(
        sign::verify(
            b"s3cret-0123456789abcdef0123456789",
            sig,
            &d.body,
            now_s,
            300
        ),
        Ok(())
    );
    assert!(sign::verify(b"wrong", sig, &d.body, now_s, 300).is_err());
    let mut tampered = d.body.clone();
    tampered.push(b' ');
    assert!(sign::verify(
        b"s3cret-0123456789abcdef0123456789",
        sig,
        &tampered,
        now_s,
        300
    )
    .is_err());
    let body = d.json();
    assert_eq!(body["tenant"], "shop");
    assert_eq!(body["key"], "order-1");
    assert_eq!(body["version"].as_u64(), Some(version));
    assert_eq!(body["fire_at_us"].as_u64(), Some(fire_at));
    assert!(body["fired_at_us"].as_u64() >= Some(fire_at));
    assert_eq!(body["attempt"], 1);
    assert_eq!(body["payload"], json!({"order": 1}));
    // Delivered: the timer is no longer pending, and nothing more arrives.
    eventually("the delivered timer leaves", || {
        (s.req("GET", "/v1/timers/shop/order-1", "").status == 404).then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rx.received().len(), 1);
    let metrics = String::from_utf8_lossy(&s.req("GET", "/metrics", "").body).into_owned();
    for m in [
        "punctual_webhook_attempts_total{shard=",
        "punctual_webhook_successes_total{",
        "punctual_webhook_delivery_latency_seconds_bucket{",
    ] {
        assert!(metrics.contains(m), "{m} missing:\n{metrics}");
    }
}

#[test]
fn a_500_then_a_200_is_retried_once_with_the_same_idempotency_key() {
    let rx = Receiver::start(|_, before| Reply::status(if before.is_empty() { 500 } else { 200 }));
    let s = start(&format!("callback_allow = [{:?}]\n", rx.base()), &[]);
    let (st, _) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 3, "base_delay_ms": 50, "max_delay_ms": 50}}),
    );
    assert_eq!(st, 201);
    let got = rx.wait(LONG, |r| r.len() >= 2);
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].header("idempotency-key"),
        got[1].header("idempotency-key")
    );
    assert_eq!(
        (
            got[0].header("punctual-attempt"),
            got[1].header("punctual-attempt")
        ),
        (Some("1"), Some("2"))
    );
    assert_eq!(got[1].json()["attempt"], 2);
    eventually("the delivered timer leaves", || {
        (s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rx.received().len(), 2);
    assert!(dead(&s, "t").is_empty());
}

#[test]
fn a_429_with_retry_after_is_retried_no_sooner_than_it_asked() {
    let rx = Receiver::start(|_, before| {
        if before.is_empty() {
            Reply::status(429).header("Retry-After", "1")
        } else {
            Reply::status(204)
        }
    });
    let s = start(&format!("callback_allow = [{:?}]\n", rx.base()), &[]);
    put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 3, "base_delay_ms": 10, "max_delay_ms": 60000}}),
    );
    let got = rx.wait(LONG, |r| r.len() >= 2);
    assert_eq!(got.len(), 2);
    let gap = got[1].at_us - got[0].at_us;
    // Without Retry-After the backoff would be at most 10 ms.
    assert!(
        gap >= 950_000,
        "retried {gap} µs after a Retry-After of 1 s"
    );
    assert!(gap < 10_000_000, "absurdly late: {gap} µs");
}

#[test]
fn a_timeout_counts_as_a_failed_attempt_and_the_next_one_succeeds() {
    let rx = Receiver::start(|_, before| {
        if before.is_empty() {
            Reply::status(200).after(Duration::from_secs(2))
        } else {
            Reply::status(200)
        }
    });
    let s = start(
        &format!(
            "callback_allow = [{:?}]\nwebhook_timeout_ms = 300\n",
            rx.base()
        ),
        &[],
    );
    put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 3, "base_delay_ms": 20, "max_delay_ms": 20}}),
    );
    let got = rx.wait(LONG, |r| r.len() >= 2);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].header("punctual-attempt"), Some("2"));
    // The second attempt did not wait for the slow first answer.
    assert!(got[1].at_us - got[0].at_us < 1_900_000);
    eventually("the delivered timer leaves", || {
        (s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    let metrics = String::from_utf8_lossy(&s.req("GET", "/metrics", "").body).into_owned();
    assert!(
        metrics.contains(
            "punctual_webhook_failures_total{shard=\"0\",tenant=\"t\",class=\"timeout\"} 1"
        ) || metrics.contains(
            "punctual_webhook_failures_total{shard=\"1\",tenant=\"t\",class=\"timeout\"} 1"
        ),
        "{metrics}"
    );
}
