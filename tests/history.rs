//! `GET /v1/history/{tenant}` end to end: the real binary fires timers to a real receiver (one
//! delivered, one failing into a dead letter), the history shows each fire and its attempts,
//! survives a SIGKILL on the journal, is the tenant's alone, refuses bad input, and answers
//! `501` on the Redis store.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::{eventually, Configured, Server};
use receiver::{Receiver, Reply};
use serde_json::{json, Value};

const TOKEN: &str = "shop-token-0123456789abcdef0123456789";
const OTHER_TOKEN: &str = "other-token-0123456789abcdef012345678";

fn toml(rx: &Receiver) -> String {
    format!(
        "callback_allow = [{:?}]\n[tenants.shop]\ntoken = \"{TOKEN}\"\n\
         [tenants.other]\ntoken = \"{OTHER_TOKEN}\"\n",
        rx.base()
    )
}

fn history(s: &Server, tenant: &str, token: &str, query: &str) -> (u16, Value) {
    s.call(
        token,
        "GET",
        &format!("/v1/history/{tenant}{query}"),
        &Value::Null,
    )
}

/// The key's entries once the newest has `outcome`.
fn settled(s: &Server, key: &str, outcome: &str) -> Vec<Value> {
    eventually(&format!("{key}'s history shows {outcome}"), || {
        let (st, body) = history(s, "shop", TOKEN, &format!("?key={key}"));
        assert_eq!(st, 200, "{body}");
        let entries = body["entries"].as_array().cloned().unwrap_or_default();
        (entries.first()?["outcome"] == outcome).then_some(entries)
    })
}

fn put(s: &Server, key: &str, url: &str) -> Value {
    let body = json!({"delay_ms": 20, "payload": {"order": 8812}, "callback": {"url": url},
                      "retry": {"max_attempts": 2, "base_delay_ms": 10, "max_delay_ms": 10}});
    let (st, r) = s.call(TOKEN, "PUT", &format!("/v1/timers/shop/{key}"), &body);
    assert_eq!(st, 201, "{r}");
    r
}

fn check_delivered(entries: &[Value], put: &Value) {
    assert_eq!(entries.len(), 1, "{entries:?}");
    let e = &entries[0];
    assert_eq!(e["key"], "order-8812");
    assert_eq!(e["version"], put["version"]);
    assert_eq!(e["fire_at_us"], put["fire_at_us"]);
    let (fire_at, fired_at) = (e["fire_at_us"].as_u64(), e["fired_at_us"].as_u64());
    assert!(fired_at >= fire_at, "never early: {e}");
    assert_eq!(
        e["lateness_us"].as_u64(),
        Some(fired_at.unwrap_or(0) - fire_at.unwrap_or(0))
    );
    let attempts = e["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(attempts.len(), 1, "{e}");
    assert_eq!(attempts[0]["status"], 200);
    assert_eq!(attempts[0]["error"], Value::Null);
    assert!(attempts[0]["at_us"].as_u64() >= fired_at);
}

fn check_dead(entries: &[Value]) {
    assert_eq!(entries.len(), 1, "{entries:?}");
    let attempts = entries[0]["attempts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let statuses: Vec<_> = attempts.iter().map(|a| a["status"].clone()).collect();
    assert_eq!(statuses, [json!(503), json!(503)], "{entries:?}");
}

#[test]
fn the_history_shows_each_fire_and_its_attempts_and_survives_a_sigkill_on_the_journal() {
    let rx = Receiver::start(|r, _| Reply::status(if r.path == "/fail" { 503 } else { 200 }));
    let data = tempfile::tempdir().expect("data dir");
    let args = ["--shards", "2"];
    let c = Configured::journal(data.path(), &toml(&rx), &args);
    let ok = put(&c.s, "order-8812", &rx.url("ok"));
    put(&c.s, "order-8813", &rx.url("fail"));
    check_delivered(&settled(&c.s, "order-8812", "delivered"), &ok);
    check_dead(&settled(&c.s, "order-8813", "dead_lettered"));
    // Without a key: the tenant's entries, newest first, paged by the cursor.
    let (st, all) = history(&c.s, "shop", TOKEN, "");
    assert_eq!(st, 200, "{all}");
    assert_eq!(all["entries"].as_array().map(Vec::len), Some(2), "{all}");
    assert!(
        all.get("next").is_none(),
        "the last page has no next: {all}"
    );
    let (st, first) = history(&c.s, "shop", TOKEN, "?limit=1");
    assert_eq!(st, 200);
    let next = first["next"].as_str().expect("a next page").to_string();
    let (_, second) = history(&c.s, "shop", TOKEN, &format!("?limit=1&after={next}"));
    assert_eq!(second["entries"].as_array().map(Vec::len), Some(1));
    assert_ne!(first["entries"][0]["key"], second["entries"][0]["key"]);
    assert!(second.get("next").is_none(), "{second}");
    // A SIGKILL, then the same history from the log beside the journal.
    let c = c.restart_after_sigkill(data.path(), &args);
    check_delivered(&settled(&c.s, "order-8812", "delivered"), &ok);
    check_dead(&settled(&c.s, "order-8813", "dead_lettered"));
    assert!(data.path().join("history").join("history.log").exists());
}

#[test]
fn a_tenant_reads_its_own_history_only_and_bad_input_is_refused() {
    let rx = Receiver::ok();
    let config = {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().expect("config");
        f.write_all(toml(&rx).as_bytes()).expect("write");
        f
    };
    let path = config.path().to_string_lossy().into_owned();
    let s = Server::start(&["--config", &path, "--shards", "2"]);
    put(&s, "order-8812", &rx.url("ok"));
    settled(&s, "order-8812", "delivered");
    // Another tenant's token, or none, is refused as on the tenant's other routes.
    for token in [OTHER_TOKEN, ""] {
        let r = s.req_h(
            "GET",
            "/v1/history/shop?key=order-8812",
            &[("authorization", &format!("Bearer {token}"))],
            "",
        );
        assert_eq!((r.status, r.code()), (401, "unauthorized".into()));
    }
    // The other tenant's own history does not hold shop's fires.
    let (st, body) = history(&s, "other", OTHER_TOKEN, "?key=order-8812");
    assert_eq!((st, body["entries"].clone()), (200, json!([])));
    for query in [
        "?limit=0",
        "?limit=1001",
        "?limit=x",
        "?after=zzz",
        "?after=0",
        "?sort=key",
    ] {
        let r = s.req_h(
            "GET",
            &format!("/v1/history/shop{query}"),
            &[("authorization", &format!("Bearer {TOKEN}"))],
            "",
        );
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_field".into()),
            "{query}"
        );
        assert!(r.json()["error"]["message"].is_string(), "{query}");
    }
    let r = s.req_h(
        "DELETE",
        "/v1/history/shop",
        &[("authorization", &format!("Bearer {TOKEN}"))],
        "",
    );
    assert_eq!(r.status, 405);
}

#[test]
fn the_redis_store_answers_501_not_implemented() {
    let redis = redis_server::RedisServer::start();
    let url = redis.url();
    let s = Server::start(&["--redis", &url, "--shards", "1"]);
    let r = s.req("GET", "/v1/history/shop", "");
    assert_eq!((r.status, r.code()), (501, "not_implemented".into()));
    let message = r.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(message.contains("redis"), "{message}");
}
