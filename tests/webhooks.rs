//! Webhook delivery end to end: the real `punctual` binary, a real receiver on a free port
//! (`support/receiver.rs`), and for the restart a real `redis-server`. Timing is asserted only
//! as correctness bounds (never early; not absurdly late).

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::Server;
use punctual::sink::webhook::sign;
use receiver::{Receiver, Reply};
use serde_json::{json, Value};
use std::time::Duration;

/// A running server and the config file it reads.
struct Svc {
    s: Server,
    _config: tempfile::NamedTempFile,
}

impl std::ops::Deref for Svc {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.s
    }
}

fn config_file(toml: &str) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(toml.as_bytes()).expect("write config");
    f
}

/// `punctual serve` with `toml` as its config file, plus `args`.
fn start(toml: &str, args: &[&str]) -> Svc {
    let config = config_file(toml);
    let path = config.path().to_string_lossy().into_owned();
    let mut all = vec!["--config", path.as_str()];
    if !args.contains(&"--shards") {
        all.extend(["--shards", "2"]);
    }
    all.extend_from_slice(args);
    Svc {
        s: Server::start(&all),
        _config: config,
    }
}

fn put(s: &Server, tenant: &str, key: &str, body: Value) -> (u16, Value) {
    s.json(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &body.to_string(),
    )
}

fn dead(s: &Server, tenant: &str) -> Vec<Value> {
    let (st, body) = s.json("GET", &format!("/v1/dead/{tenant}"), "");
    assert_eq!(st, 200, "{body}");
    body["dead"].as_array().cloned().unwrap_or_default()
}

/// Polls `f` until it returns `Some`, or 20 s pass.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "never happened: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

const LONG: Duration = Duration::from_secs(20);

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

#[test]
fn a_404_is_permanent_and_the_timer_is_dead_at_once() {
    let rx = Receiver::start(|_, _| Reply::status(404));
    let s = start(&format!("callback_allow = [{:?}]\n", rx.base()), &[]);
    let (_, r) = put(
        &s,
        "t",
        "gone",
        json!({"delay_ms": 10, "payload": "p", "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 5, "base_delay_ms": 10, "max_delay_ms": 10}}),
    );
    let letters = eventually("a dead letter", || {
        let d = dead(&s, "t");
        (!d.is_empty()).then_some(d)
    });
    assert_eq!(letters.len(), 1);
    let l = &letters[0];
    assert_eq!(l["key"], "gone");
    assert_eq!(l["attempts"], 1);
    assert_eq!(l["last_status"], 404);
    assert_eq!(l["version"], r["version"]);
    assert_eq!(l["fire_at_us"], r["fire_at_us"]);
    assert_eq!(l["payload"], "p");
    assert_eq!(l["callback"]["url"], rx.url("h"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rx.received().len(), 1, "a permanent failure is not retried");
    assert_eq!(s.req("GET", "/v1/timers/t/gone", "").status, 404);
}

#[test]
fn after_max_attempts_a_dead_letter_that_can_be_redriven_or_discarded() {
    let rx = Receiver::start(|_, _| Reply::status(503));
    let s = start(&format!("callback_allow = [{:?}]\n", rx.base()), &[]);
    let retry = json!({"max_attempts": 3, "base_delay_ms": 10, "max_delay_ms": 20});
    for key in ["a", "b"] {
        let (st, _) = put(
            &s,
            "t",
            key,
            json!({"delay_ms": 10, "callback": {"url": rx.url(key)}, "retry": retry}),
        );
        assert_eq!(st, 201);
    }
    let letters = eventually("two dead letters", || {
        let d = dead(&s, "t");
        (d.len() == 2).then_some(d)
    });
    for l in &letters {
        assert_eq!(
            (l["attempts"].as_u64(), l["last_status"].as_u64()),
            (Some(3), Some(503))
        );
    }
    assert_eq!(rx.to("/a").len(), 3);
    let (_, listed) = s.json("GET", "/v1/dead/t?limit=1", "");
    assert_eq!(listed["dead"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["dead"][0]["key"], "a");
    let (_, after) = s.json("GET", "/v1/dead/t?after=a", "");
    assert_eq!(after["dead"][0]["key"], "b");

    // Re-drive "a" against a receiver that now answers 200: one more delivery, same key.
    rx.set_script(|_, _| Reply::status(200));
    let key_before = rx.to("/a")[0].header("idempotency-key").map(str::to_string);
    let r = s.req("POST", "/v1/dead/t/a/retry", "");
    assert_eq!(r.status, 202, "{:?}", String::from_utf8_lossy(&r.body));
    let got = rx.wait(LONG, |_| rx.to("/a").len() >= 4);
    let a: Vec<_> = got.iter().filter(|r| r.path == "/a").collect();
    assert_eq!(a.len(), 4);
    assert_eq!(a[3].header("punctual-attempt"), Some("1"), "a fresh budget");
    assert_eq!(
        a[3].header("idempotency-key").map(str::to_string),
        key_before
    );
    eventually("the re-driven letter leaves the list", || {
        let d = dead(&s, "t");
        (d.len() == 1 && d[0]["key"] == "b").then_some(())
    });
    eventually("the re-driven timer is delivered", || {
        (s.req("GET", "/v1/timers/t/a", "").status == 404).then_some(())
    });
    assert_eq!(s.req("POST", "/v1/dead/t/a/retry", "").status, 404);

    // Discard "b".
    assert_eq!(s.req("DELETE", "/v1/dead/t/b", "").status, 204);
    assert_eq!(s.req("DELETE", "/v1/dead/t/b", "").status, 404);
    assert!(dead(&s, "t").is_empty());
    assert_eq!(s.req("GET", "/v1/dead/t", "").status, 200);
    assert_eq!(s.req("PUT", "/v1/dead/t", "").status, 405);
}

#[test]
fn a_cancel_during_retries_stops_them() {
    let rx = Receiver::start(|_, _| Reply::status(500));
    let s = start(&format!("callback_allow = [{:?}]\n", rx.base()), &[]);
    put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 100, "base_delay_ms": 100, "max_delay_ms": 100}}),
    );
    rx.wait(LONG, |r| r.len() >= 2);
    let (st, g) = s.json("GET", "/v1/timers/t/k", "");
    assert_eq!(st, 200);
    assert!(g["delivery"]["attempts"].as_u64() >= Some(1), "{g}");
    assert!(
        matches!(
            g["delivery"]["state"].as_str(),
            Some("retrying" | "in_flight")
        ),
        "{g}"
    );
    assert_eq!(s.req("DELETE", "/v1/timers/t/k", "").status, 204);
    let at_cancel = rx.received().len();
    std::thread::sleep(Duration::from_millis(800));
    // An attempt already on the wire may still land; no retry follows it.
    assert!(
        rx.received().len() <= at_cancel + 1,
        "retries went on after the cancel"
    );
    assert!(dead(&s, "t").is_empty());
}

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

#[test]
fn retries_resume_after_a_restart_with_redis_and_dead_letters_survive_it() {
    let redis = redis_server::RedisServer::start();
    let rx = Receiver::start(|r, _| Reply::status(if r.path == "/gone" { 410 } else { 500 }));
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let url = redis.url();
    let mut s = start(&toml, &["--redis", &url]);
    let (st, r) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "payload": {"n": 1}, "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 10, "base_delay_ms": 300, "max_delay_ms": 300}}),
    );
    assert_eq!(st, 201);
    let version = r["version"].as_u64();
    put(
        &s,
        "t",
        "dead",
        json!({"delay_ms": 10, "callback": {"url": rx.url("gone")}}),
    );
    eventually("a dead letter", || (dead(&s, "t").len() == 1).then_some(()));
    rx.wait(LONG, |_| rx.to("/h").len() >= 2);
    // The stream entry was written once, at the timer's own firing.
    let mut con = redis.client().expect("redis client");
    let entries = redis_server::read_stream(&mut con, "t");
    assert_eq!(
        entries.iter().filter(|e| e.key == "k").count(),
        1,
        "{entries:?}"
    );
    // Killed in the middle of the retries.
    let _ = s.s.child.kill();
    let _ = s.s.child.wait();
    let attempts_before = rx.to("/h").len();
    rx.set_script(|_, _| Reply::status(200));
    s = start(&toml, &["--redis", &url]);
    let got = rx.wait(LONG, |_| rx.to("/h").len() > attempts_before);
    let resumed: Vec<_> = got
        .iter()
        .filter(|r| r.path == "/h")
        .skip(attempts_before)
        .collect();
    assert!(!resumed.is_empty(), "no retry after the restart");
    let body = resumed[0].json();
    assert_eq!(
        body["version"].as_u64(),
        version,
        "same version, same Idempotency-Key"
    );
    assert!(body["attempt"].as_u64() >= Some(attempts_before as u64));
    assert_eq!(body["payload"], json!({"n": 1}));
    eventually("the delivered timer leaves", || {
        (s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    // Its record left Redis; the dead letter came back with the restart, and is in its stream.
    eventually("the record leaves Redis", || {
        let n: i64 = redis::cmd("EVAL")
            .arg("local n = 0 for _, k in ipairs(redis.call('KEYS', 'punctual:*:timers')) do n = n + redis.call('HLEN', k) end return n")
            .arg(0)
            .query(&mut con)
            .unwrap_or(-1);
        (n == 0).then_some(())
    });
    let letters = dead(&s, "t");
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (
            letters[0]["key"].as_str(),
            letters[0]["last_status"].as_u64()
        ),
        (Some("dead"), Some(410))
    );
    let dead_stream: redis::Value = redis::cmd("XRANGE")
        .arg("punctual:dead:{t}")
        .arg("-")
        .arg("+")
        .query(&mut con)
        .expect("XRANGE");
    assert!(
        matches!(&dead_stream, redis::Value::Array(v) if v.len() == 1),
        "{dead_stream:?}"
    );
    assert_eq!(s.req("DELETE", "/v1/dead/t/dead", "").status, 204);
}

#[test]
fn the_python_receiver_example_verifies_signatures_and_dedupes() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let port = api_support::free_port();
    let mut py = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/webhook_receiver.py"
        ))
        .arg(format!("127.0.0.1:{port}"))
        .env(
            "PUNCTUAL_WEBHOOK_SECRET",
            "s3cret-0123456789abcdef0123456789",
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    eventually("the Python receiver listens", || {
        std::net::TcpStream::connect(addr).ok()
    });
    let s = start(
        &format!(
            "callback_allow = [\"http://{addr}/\"]\nopen_tenants = true\n[tenants.good]\nwebhook_secret = \"s3cret-0123456789abcdef0123456789\"\n[tenants.bad]\nwebhook_secret = \"wrong-0123456789abcdef0123456789ab\"\n"
        ),
        &[],
    );
    let cb = json!({"url": format!("http://{addr}/hook")});
    let (_, r) = put(
        &s,
        "good",
        "k1",
        json!({"delay_ms": 10, "payload": {"x": 1}, "callback": cb}),
    );
    let version = r["version"].as_u64().expect("version");
    put(
        &s,
        "bad",
        "k2",
        json!({"delay_ms": 10, "callback": cb,
        "retry": {"max_attempts": 1}}),
    );
    eventually("the good delivery is accepted", || {
        (s.req("GET", "/v1/timers/good/k1", "").status == 404).then_some(())
    });
    assert!(dead(&s, "good").is_empty());
    // A wrong signature is answered 401: with one attempt allowed, a dead letter at once.
    let letters = eventually("the badly signed delivery is dead", || {
        let d = dead(&s, "bad");
        (!d.is_empty()).then_some(d)
    });
    assert_eq!(letters[0]["last_status"], 401);
    // A repeat of the good delivery (same Idempotency-Key, a valid signature) is not processed
    // twice.
    let body = json!({"tenant": "good", "key": "k1", "version": version, "fire_at_us": 1,
        "fired_at_us": 1, "attempt": 2, "payload": {"x": 1}})
    .to_string();
    let sig = sign::signature(
        b"s3cret-0123456789abcdef0123456789",
        receiver::now_us() / 1_000_000,
        body.as_bytes(),
    );
    let idem = format!("good/k1/{version}");
    let r = api_support::request(
        addr,
        "POST",
        "/hook",
        &[
            ("Idempotency-Key", idem.as_str()),
            ("Punctual-Signature", sig.as_str()),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 204);
    let _ = py.kill();
    let _ = py.wait();
    let mut out = String::new();
    py.stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("output");
    assert_eq!(out.matches("timer good/k1").count(), 1, "{out}");
    assert!(out.contains(&format!("repeat of {idem}")), "{out}");
    assert!(!out.contains("bad/k2"), "{out}");
}

#[test]
fn an_https_callback_is_delivered_over_rustls_and_an_untrusted_certificate_is_refused() {
    let pki = receiver::test_pki();
    let rx = Receiver::start_tls(&pki, |_, _| Reply::status(200));
    let ca = config_file(&pki.ca_pem);
    let base = format!("https://localhost:{}/", rx.addr.port());
    let toml = |ca: Option<&std::path::Path>| {
        // localhost is loopback: the operator opens it for this receiver.
        let mut t = format!(
            "callback_allow = [{base:?}]\ncallback_allow_networks = [\"127.0.0.1/32\", \"::1/128\"]\n"
        );
        if let Some(p) = ca {
            t.push_str(&format!("webhook_ca_file = {:?}\n", p.to_string_lossy()));
        }
        t
    };
    let s = start(&toml(Some(ca.path())), &[]);
    let (st, _) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "payload": 7, "callback": {"url": format!("{base}tls")}}),
    );
    assert_eq!(st, 201);
    let got = rx.wait(LONG, |r| !r.is_empty());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].json()["payload"], 7);
    eventually("the delivered timer leaves", || {
        (s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    // Without the CA, the certificate does not verify: a connect failure, retried, then dead.
    let untrusting = start(&toml(None), &[]);
    put(
        &untrusting,
        "t",
        "k",
        json!({"delay_ms": 10, "callback": {"url": format!("{base}tls")},
        "retry": {"max_attempts": 2, "base_delay_ms": 10, "max_delay_ms": 10}}),
    );
    let letters = eventually("a dead letter", || {
        let d = dead(&untrusting, "t");
        (!d.is_empty()).then_some(d)
    });
    let err = letters[0]["last_error"].as_str().unwrap_or("").to_string();
    assert_eq!(err, "tls", "a class, the details in the operator's log");
    assert_eq!(
        rx.received().len(),
        1,
        "nothing reached the receiver without trust"
    );
}

/// The same with the journal: retries resume after SIGKILL, a dead letter survives two
/// restarts, and one re-driven before the second restart is delivered, not resurrected as a
/// dead letter or lost.
#[test]
fn retries_resume_after_a_restart_with_the_journal_and_dead_letters_survive_it() {
    let data = tempfile::tempdir().expect("data dir");
    let dir = data.path().to_string_lossy().into_owned();
    let rx = Receiver::start(|r, _| {
        Reply::status(if r.path.starts_with("/gone") {
            410
        } else {
            500
        })
    });
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let args = ["--store", "journal", "--data-dir", dir.as_str()];
    let mut s = start(&toml, &args);
    let (st, r) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "payload": {"n": 1}, "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 10, "base_delay_ms": 300, "max_delay_ms": 300}}),
    );
    assert_eq!(st, 201);
    let version = r["version"].as_u64();
    for key in ["dead-a", "dead-b"] {
        let (st, _) = put(
            &s,
            "t",
            key,
            json!({"delay_ms": 10, "callback": {"url": rx.url(&format!("gone-{key}"))}}),
        );
        assert_eq!(st, 201);
    }
    eventually("two dead letters", || {
        (dead(&s, "t").len() == 2).then_some(())
    });
    rx.wait(LONG, |_| rx.to("/h").len() >= 2);
    let _ = s.s.child.kill(); // SIGKILL in the middle of the retries
    let _ = s.s.child.wait();
    let attempts_before = rx.to("/h").len();
    rx.set_script(|_, _| Reply::status(200));
    s = start(&toml, &args);
    let got = rx.wait(LONG, |_| rx.to("/h").len() > attempts_before);
    let resumed: Vec<_> = got
        .iter()
        .filter(|r| r.path == "/h")
        .skip(attempts_before)
        .collect();
    assert!(!resumed.is_empty(), "no retry after the restart");
    assert_eq!(resumed[0].json()["version"].as_u64(), version);
    eventually("the delivered timer leaves", || {
        (s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    assert_eq!(dead(&s, "t").len(), 2, "both dead letters came back");
    // Re-drive one (the receiver now answers 200), then restart again.
    assert_eq!(s.req("POST", "/v1/dead/t/dead-a/retry", "").status, 202);
    rx.wait(LONG, |_| !rx.to("/gone-dead-a").is_empty());
    eventually("the re-driven timer is delivered and leaves", || {
        (s.req("GET", "/v1/timers/t/dead-a", "").status == 404).then_some(())
    });
    let _ = s.s.child.kill();
    let _ = s.s.child.wait();
    let s = start(&toml, &args);
    let letters = dead(&s, "t");
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["key"].as_str(), Some("dead-b"));
    // The removal after a delivery is written like a cancel, without a caller waiting for it,
    // so a kill right after the delivery may come before it is durable: then the timer is
    // delivered again after the restart (at least once) and leaves. It never becomes a dead
    // letter again, and it never stays.
    eventually("the re-driven timer stays delivered", || {
        (s.req("GET", "/v1/timers/t/dead-a", "").status == 404).then_some(())
    });
    assert_eq!(dead(&s, "t").len(), 1);
    assert_eq!(s.req("DELETE", "/v1/dead/t/dead-b", "").status, 204);
}
