//! What webhook delivery may hold, and what happens at each bound: the real binary, real
//! receivers on real sockets. Asserted as correctness only (nothing dropped, nothing lost,
//! each bound kept); timing stays out.

mod api_support;
#[path = "support/bare.rs"]
mod bare;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::Server;
use receiver::{Receiver, Reply};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// `punctual serve` with `toml` as its config and exactly `args` (plus light test settings).
fn start(dir: &tempfile::TempDir, toml: &str, args: &[&str]) -> Server {
    let config = dir.path().join("punctual.toml");
    std::fs::write(&config, toml).expect("config");
    let mut all = bare::os(&["--pinning", "none", "--spin-us", "0", "--config"]);
    all.push(config.into());
    all.extend(bare::os(args));
    bare::serve(&[], &all)
}

fn put(s: &Server, tenant: &str, key: &str, body: Value) -> (u16, Value) {
    s.json(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &body.to_string(),
    )
}

/// Every dead letter of `tenant`, paging by `limit`.
fn all_dead(s: &Server, tenant: &str, limit: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let q = if after.is_empty() {
            format!("/v1/dead/{tenant}?limit={limit}")
        } else {
            format!("/v1/dead/{tenant}?limit={limit}&after={after}")
        };
        let (st, body) = s.json("GET", &q, "");
        assert_eq!(st, 200, "{body}");
        let page = body["dead"].as_array().cloned().unwrap_or_default();
        assert!(page.len() <= limit, "a page longer than its limit");
        let Some(last) = page.last() else {
            return all;
        };
        after = last["key"].as_str().unwrap_or_default().to_string();
        all.extend(page);
    }
}

/// Polls `f` until it returns `Some`, or 30 s pass.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < give_up, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn dead_letters_count_against_the_shard_capacity_and_are_never_dropped_for_room() {
    let rx = Receiver::start(|_, _| Reply::status(404));
    let dir = tempfile::tempdir().expect("temp dir");
    let s = start(
        &dir,
        &format!("callback_allow = [{:?}]\n", rx.base()),
        &[
            "--store",
            "memory",
            "--shards",
            "1",
            "--shard-capacity",
            "10",
        ],
    );
    for i in 0..10 {
        let (st, r) = put(
            &s,
            "t",
            &format!("k{i}"),
            json!({"delay_ms": 1, "callback": {"url": rx.url("h")}, "payload": {"i": i}}),
        );
        assert_eq!(st, 201, "{r}");
    }
    // A 404 is permanent: each is a dead letter at once.
    eventually("10 dead letters", || {
        (all_dead(&s, "t", 100).len() == 10).then_some(())
    });
    // The shard is full: pending timers and dead letters together.
    let (st, r) = put(&s, "t", "new", json!({"delay_ms": 60000}));
    assert_eq!(
        (st, r["error"]["code"].as_str()),
        (503, Some("capacity_exceeded")),
        "{r}"
    );
    let (st, r) = put(&s, "other", "new", json!({"delay_ms": 60000}));
    assert_eq!(
        r["error"]["code"].as_str(),
        Some("capacity_exceeded"),
        "{st} {r}"
    );
    // Nothing was dropped to make room; each letter still has its payload.
    let dead = all_dead(&s, "t", 3);
    assert_eq!(dead.len(), 10);
    for (i, d) in dead.iter().enumerate() {
        assert_eq!(d["key"], format!("k{i}"));
        assert_eq!(d["payload"]["i"], i);
    }
    // Discarding one makes room for one.
    assert_eq!(s.req("DELETE", "/v1/dead/t/k0", "").status, 204);
    let (st, r) = put(&s, "t", "new", json!({"delay_ms": 60000}));
    assert_eq!(st, 201, "{r}");
    let (st, _) = put(&s, "t", "newer", json!({"delay_ms": 60000}));
    assert_eq!(st, 503);
    // A replacement of a pending key is not a new timer: still accepted at the bound.
    let (st, r) = put(&s, "t", "new", json!({"delay_ms": 50000}));
    assert_eq!(st, 200, "{r}");
}

#[test]
fn dead_letters_page_by_key_across_shards_each_once_with_its_payload() {
    let rx = Receiver::start(|_, _| Reply::status(404));
    let dir = tempfile::tempdir().expect("temp dir");
    let s = start(
        &dir,
        &format!("callback_allow = [{:?}]\n", rx.base()),
        &["--store", "memory", "--shards", "3"],
    );
    let timers: Vec<Value> = (0..40)
        .map(|i| json!({"key": format!("k{i:02}"), "delay_ms": 1, "callback": {"url": rx.url("h")}, "payload": {"i": i}}))
        .collect();
    let (st, r) = s.json(
        "POST",
        "/v1/timers/t",
        &json!({"timers": timers}).to_string(),
    );
    assert_eq!(st, 200, "{r}");
    eventually("40 dead letters", || {
        (all_dead(&s, "t", 1000).len() == 40).then_some(())
    });
    for limit in [1, 7, 40] {
        let dead = all_dead(&s, "t", limit);
        let keys: Vec<&str> = dead.iter().filter_map(|d| d["key"].as_str()).collect();
        let want: Vec<String> = (0..40).map(|i| format!("k{i:02}")).collect();
        assert_eq!(keys, want, "limit {limit}");
        for (i, d) in dead.iter().enumerate() {
            assert_eq!(d["payload"]["i"], i, "limit {limit}");
        }
    }
}
