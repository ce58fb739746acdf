//! Pull queues through the real binary: receive, ack, nack, extend, re-delivery after the
//! visibility timeout with `receive_count` + 1, dead letters after `max_receives`, the long
//! poll, bad input, tenants kept apart, and (on the journal) acks and leases across SIGKILL.

mod api_support;

use api_support::{eventually, Configured, Server};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, Instant};

const TOKEN: &str = "shop-token-0123456789abcdef0123456";
const OTHER: &str = "other-token-0123456789abcdef012345";

fn conf(max_receives: u64) -> String {
    format!(
        "[tenants.shop]\ntoken = \"{TOKEN}\"\nqueue = true\nqueue_max_receives = {max_receives}\n\
         [tenants.other]\ntoken = \"{OTHER}\"\nqueue = true\n\
         [tenants.plain]\ntoken = \"{OTHER}x\"\n"
    )
}

fn memory(max_receives: u64, shards: &str) -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(conf(max_receives).as_bytes()).expect("write");
    let path = f.path().to_str().expect("utf-8 path").to_string();
    let s = Server::start(&["--store", "memory", "--shards", shards, "--config", &path]);
    (s, f)
}

fn put_due(s: &Server, key: &str, delay_ms: u64) {
    let body = json!({"delay_ms": delay_ms, "payload": {"order": key}});
    let (status, b) = s.call(TOKEN, "PUT", &format!("/v1/timers/shop/{key}"), &body);
    assert!(status == 201 || status == 200, "PUT {key}: {status} {b}");
}

fn receive(s: &Server, max: u64, wait_ms: u64, visibility_ms: u64) -> Vec<Value> {
    let body = json!({"max": max, "wait_ms": wait_ms, "visibility_ms": visibility_ms});
    let (status, b) = s.call(TOKEN, "POST", "/v1/queues/shop/receive", &body);
    assert_eq!(status, 200, "receive: {b}");
    b["messages"].as_array().cloned().unwrap_or_default()
}

/// Receives until `n` messages came (each receive leases what it got).
fn receive_n(s: &Server, n: usize, visibility_ms: u64) -> Vec<Value> {
    let mut got = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(30);
    while got.len() < n {
        assert!(
            Instant::now() < give_up,
            "only {} of {n} received",
            got.len()
        );
        got.extend(receive(s, 100, 1000, visibility_ms));
    }
    got
}

/// One receipt's ack, nack or extend: the result's status and error code.
fn settle(s: &Server, token: &str, action: &str, receipt: &str, extra: Value) -> (u16, String) {
    let mut body = json!({"receipts": [receipt]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (status, b) = s.call(token, "POST", &format!("/v1/queues/shop/{action}"), &body);
    assert_eq!(status, 200, "{action}: {b}");
    let r = &b["results"][0];
    assert_eq!(r["receipt"], receipt);
    let code = r["error"]["code"].as_str().unwrap_or("").to_string();
    (r["status"].as_u64().unwrap_or(0) as u16, code)
}

fn by_key(msgs: &[Value], key: &str) -> Value {
    msgs.iter()
        .find(|m| m["key"] == key)
        .cloned()
        .unwrap_or_else(|| panic!("no message {key} in {msgs:?}"))
}

fn receipt(m: &Value) -> String {
    m["receipt"].as_str().expect("a receipt").to_string()
}

#[test]
fn receive_ack_nack_extend_and_redelivery_count_receives_and_end_in_dead_letters() {
    let (s, _f) = memory(3, "2");
    for k in ["a", "b", "c"] {
        put_due(&s, k, 0);
    }
    let first = receive_n(&s, 3, 400);
    let (a, b, c) = (
        by_key(&first, "a"),
        by_key(&first, "b"),
        by_key(&first, "c"),
    );
    for m in [&a, &b, &c] {
        assert_eq!(m["receive_count"], 1, "{m}");
        assert_eq!(m["payload"]["order"], m["key"], "{m}");
        assert!(
            m["version"].as_u64().is_some()
                && m["fired_at_us"].as_u64() >= m["fire_at_us"].as_u64()
        );
    }
    // Ack: once; the second is a stale lease.
    assert_eq!(
        settle(&s, TOKEN, "ack", &receipt(&a), json!({})),
        (204, String::new())
    );
    assert_eq!(
        settle(&s, TOKEN, "ack", &receipt(&a), json!({})),
        (409, "lease_expired".to_string())
    );
    // Extend b well past the others' visibility; nack c back at once.
    let extended = settle(
        &s,
        TOKEN,
        "extend",
        &receipt(&b),
        json!({"visibility_ms": 20_000}),
    );
    assert_eq!(extended, (204, String::new()));
    let nacked = settle(&s, TOKEN, "nack", &receipt(&c), json!({"delay_ms": 0}));
    assert_eq!(nacked, (204, String::new()));
    // c's old receipt names a lease that is over.
    let stale = settle(&s, TOKEN, "ack", &receipt(&c), json!({}));
    assert_eq!(stale, (409, "lease_expired".to_string()));
    let again = receive_n(&s, 1, 300);
    assert_eq!(again.len(), 1, "only c is ready: {again:?}");
    assert_eq!(
        (again[0]["key"].clone(), again[0]["receive_count"].clone()),
        (json!("c"), json!(2))
    );
    // Its visibility passes unacked: it comes back with one more receive.
    let third = receive_n(&s, 1, 300);
    assert_eq!(
        (third[0]["key"].clone(), third[0]["receive_count"].clone()),
        (json!("c"), json!(3))
    );
    let (_, depth) = s.call(TOKEN, "GET", "/v1/queues/shop", &Value::Null);
    assert_eq!(depth["in_flight"], 2, "b extended, c leased: {depth}");
    assert_eq!(depth["max_receives"], 3);
    // The third lease passes too: max_receives reached, c is a dead letter, not ready again.
    let letters = eventually("c becomes a dead letter", || {
        let (_, d) = s.call(TOKEN, "GET", "/v1/dead/shop", &Value::Null);
        let keys: Vec<Value> = d["dead"]
            .as_array()?
            .iter()
            .map(|l| l["key"].clone())
            .collect();
        (!keys.is_empty()).then_some(keys)
    });
    assert_eq!(letters, vec![json!("c")]);
    assert!(
        receive(&s, 10, 0, 1000).is_empty(),
        "b is still leased, c is dead"
    );
    // Re-driven, it is received again, its receives counted afresh.
    let (status, _) = s.call(TOKEN, "POST", "/v1/dead/shop/c/retry", &Value::Null);
    assert_eq!(status, 202);
    let back = receive_n(&s, 1, 1000);
    assert_eq!(
        (back[0]["key"].clone(), back[0]["receive_count"].clone()),
        (json!("c"), json!(1))
    );
    // b's extended lease still stands: its receipt acks.
    assert_eq!(
        settle(&s, TOKEN, "ack", &receipt(&b), json!({})),
        (204, String::new())
    );
}

#[test]
fn a_long_poll_answers_when_a_timer_fires_and_leaves_the_shard_serving() {
    let (s, _f) = memory(10, "1");
    let addr = s.addr;
    let started = Instant::now();
    let poll = std::thread::spawn(move || {
        let auth = format!("Bearer {TOKEN}");
        let body = json!({"max": 5, "wait_ms": 15_000}).to_string();
        let r = api_support::request(
            addr,
            "POST",
            "/v1/queues/shop/receive",
            &[("authorization", &auth)],
            body.as_bytes(),
        );
        (r.status, r.json(), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    // The one shard answers other requests while the receive waits.
    let (status, _) = s.call(TOKEN, "GET", "/v1/timers/shop/none", &Value::Null);
    assert_eq!(status, 404);
    put_due(&s, "late", 200);
    let (status, body, took) = poll.join().expect("poll");
    assert_eq!(status, 200);
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(msgs.len(), 1, "{body}");
    assert_eq!(msgs[0]["key"], "late");
    assert!(
        took < Duration::from_secs(14),
        "answered at the fire, not at wait_ms: {took:?}"
    );
    // A receive with nothing ready answers an empty list once wait_ms passes.
    assert!(receive(&s, 5, 100, 1000).is_empty());
}

#[test]
fn bad_input_is_refused_and_a_tenant_reaches_only_its_own_messages() {
    let (s, _f) = memory(10, "2");
    let post = |token: &str, path: &str, body: Value| s.call(token, "POST", path, &body);
    for body in [
        json!({"max": 0}),
        json!({"max": 1001}),
        json!({"wait_ms": 20_001}),
        json!({"visibility_ms": 0}),
        json!({"max": "ten"}),
        json!({"maximum": 5}),
    ] {
        let (status, b) = post(TOKEN, "/v1/queues/shop/receive", body.clone());
        assert_eq!(
            (status, b["error"]["code"].clone()),
            (400, json!("invalid_field")),
            "{body}"
        );
    }
    let (status, _) = s.call(TOKEN, "POST", "/v1/queues/shop/receive", &json!("{"));
    assert_eq!(status, 400);
    for (action, body) in [
        ("ack", json!({"receipts": []})),
        ("ack", json!({"receipts": ["x"], "delay_ms": 5})),
        ("nack", json!({"receipts": ["x"], "visibility_ms": 5})),
        ("extend", json!({"receipts": ["x"]})),
        ("extend", json!({"receipts": ["x"], "visibility_ms": 0})),
    ] {
        let (status, b) = post(TOKEN, &format!("/v1/queues/shop/{action}"), body.clone());
        assert_eq!(status, 400, "{action} {body}: {b}");
    }
    let (status, _) = s.call(TOKEN, "GET", "/v1/queues/shop/receive", &Value::Null);
    assert_eq!(status, 405);
    let (status, _) = s.call(TOKEN, "POST", "/v1/queues/shop/peek", &json!({}));
    assert_eq!(status, 404);
    // A tenant without a queue has none; another tenant's token opens nothing.
    let (status, b) = s.call(
        &format!("{OTHER}x"),
        "GET",
        "/v1/queues/plain",
        &Value::Null,
    );
    assert_eq!(
        (status, b["error"]["code"].clone()),
        (404, json!("not_found"))
    );
    let (status, _) = s.call(OTHER, "POST", "/v1/queues/shop/receive", &json!({}));
    assert_eq!(status, 401);
    // A message of shop's: other's receive never sees it, and shop's receipt is unknown to other.
    put_due(&s, "mine", 0);
    let got = receive_n(&s, 1, 10_000);
    let r = receipt(&got[0]);
    let (status, b) = s.call(
        OTHER,
        "POST",
        "/v1/queues/other/receive",
        &json!({"wait_ms": 200}),
    );
    assert_eq!((status, b["messages"].clone()), (200, json!([])));
    let (status, b) = s.call(
        OTHER,
        "POST",
        "/v1/queues/other/ack",
        &json!({"receipts": [r]}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        (
            b["results"][0]["status"].clone(),
            b["results"][0]["error"]["code"].clone()
        ),
        (json!(404), json!("unknown_receipt"))
    );
    // A forged receipt (one character changed) is unknown too; the real one still acks.
    let mut forged = r.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).expect("ascii");
    assert_eq!(
        settle(&s, TOKEN, "ack", &forged, json!({})),
        (404, "unknown_receipt".to_string())
    );
    assert_eq!(
        settle(&s, TOKEN, "ack", &r, json!({})),
        (204, String::new())
    );
}

#[test]
fn after_a_sigkill_acked_messages_stay_gone_and_leased_ones_come_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let toml = conf(10);
    let args = ["--shards", "2"];
    let first = Configured::journal(&data, &toml, &args);
    let addr = first.s.addr;
    let keys: Vec<String> = (0..20).map(|i| format!("k{i:02}")).collect();
    for k in &keys {
        put_due(&first.s, k, 0);
    }
    let got = receive_n(&first.s, keys.len(), 1500);
    let mut acked = BTreeSet::new();
    for m in got.iter().take(10) {
        assert_eq!(
            settle(&first.s, TOKEN, "ack", &receipt(m), json!({})),
            (204, String::new())
        );
        acked.insert(m["key"].as_str().expect("key").to_string());
    }
    // Five more fired and ready, never received, at the kill.
    let ready: Vec<String> = (0..5).map(|i| format!("r{i}")).collect();
    for k in &ready {
        put_due(&first.s, k, 0);
    }
    eventually("the five are ready", || {
        let (_, d) = first.s.call(TOKEN, "GET", "/v1/queues/shop", &Value::Null);
        (d["ready"] == 5).then_some(())
    });
    first.sigkill();
    let mut config = tempfile::NamedTempFile::new().expect("config file");
    config.write_all(toml.as_bytes()).expect("write config");
    let (cfg, d) = (config.path().to_string_lossy(), data.to_string_lossy());
    let second = Server::start_at(
        addr,
        &[
            "--config",
            &cfg,
            "--store",
            "journal",
            "--data-dir",
            &d,
            "--shards",
            "2",
        ],
    );
    let back = receive_n(&second, keys.len() - acked.len() + ready.len(), 60_000);
    let count_of = |k: &str| by_key(&back, k)["receive_count"].clone();
    let back_keys: BTreeSet<String> = back
        .iter()
        .map(|m| m["key"].as_str().expect("key").to_string())
        .collect();
    let mut unacked: BTreeSet<String> = keys
        .iter()
        .filter(|k| !acked.contains(*k))
        .cloned()
        .collect();
    assert!(unacked.iter().all(|k| count_of(k) == 2), "{back:?}");
    assert!(ready.iter().all(|k| count_of(k) == 1), "{back:?}");
    unacked.extend(ready.iter().cloned());
    assert_eq!(
        back_keys, unacked,
        "every leased and ready message comes back, no acked one"
    );
    assert!(
        receive(&second, 100, 500, 1000).is_empty(),
        "nothing more comes back"
    );
    // The acked ones are gone for good.
    for k in &acked {
        let (status, _) = second.call(TOKEN, "GET", &format!("/v1/timers/shop/{k}"), &Value::Null);
        assert_eq!(status, 404, "{k} was acked");
    }
}

#[test]
fn a_waiting_receive_answers_an_empty_list_when_the_server_is_stopped() {
    let (mut s, _f) = memory(10, "1");
    let addr = s.addr;
    let started = Instant::now();
    let poll = std::thread::spawn(move || {
        let auth = format!("Bearer {TOKEN}");
        let body = json!({"wait_ms": 20_000}).to_string();
        let path = "/v1/queues/shop/receive";
        let r = api_support::request(
            addr,
            "POST",
            path,
            &[("authorization", &auth)],
            body.as_bytes(),
        );
        (r.status, r.json(), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let pid = s.child.id() as i32;
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let (status, body, took) = poll.join().expect("poll");
    assert_eq!((status, body), (200, json!({"messages": []})));
    assert!(
        took < Duration::from_secs(15),
        "answered at the stop, not at wait_ms: {took:?}"
    );
    assert_eq!(s.child.wait().expect("wait").code(), Some(0));
}
