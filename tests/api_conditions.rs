//! Conditional writes against the real binary: `"if": "absent"` and `"if_version": V` on a
//! PUT and in batch items, `?if_version=V` on a DELETE, against every state of a key (absent,
//! pending, in flight to a webhook, retrying, dead letter), their bad input, and the
//! conflicts' counters in `/metrics`.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{eventually, Server};
use receiver::{Receiver, Reply};
use serde_json::{json, Value};
use std::time::Duration;

fn put(s: &Server, key: &str, body: Value) -> (u16, Value) {
    s.json("PUT", &format!("/v1/timers/t/{key}"), &body.to_string())
}

fn get(s: &Server, key: &str) -> (u16, Value) {
    s.json("GET", &format!("/v1/timers/t/{key}"), "")
}

fn delete_if(s: &Server, key: &str, version: &str) -> (u16, Value) {
    let r = s.req(
        "DELETE",
        &format!("/v1/timers/t/{key}?if_version={version}"),
        "",
    );
    let body = if r.body.is_empty() {
        Value::Null
    } else {
        r.json()
    };
    (r.status, body)
}

fn version(v: &Value) -> u64 {
    v["version"].as_u64().expect("a version")
}

#[test]
fn each_condition_against_an_absent_and_a_pending_key() {
    let s = Server::start(&["--shards", "2"]);
    // Absent: "if": "absent" creates; "if_version" finds nothing (404), and so does a DELETE.
    let (st, v) = put(
        &s,
        "k",
        json!({"delay_ms": 600_000, "if": "absent", "payload": 1}),
    );
    assert_eq!(st, 201, "{v}");
    let (first, fire_at) = (version(&v), v["fire_at_us"].as_u64());
    let (st, e) = put(&s, "other", json!({"delay_ms": 1, "if_version": first}));
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{e}"
    );
    assert_eq!(get(&s, "other").0, 404, "a refused write made nothing");
    assert_eq!(delete_if(&s, "other", "5").0, 404);

    // Pending: "if": "absent" is 409 exists with the pending timer's version and deadline,
    // and changes nothing.
    let (st, e) = put(
        &s,
        "k",
        json!({"delay_ms": 5, "if": "absent", "payload": 2}),
    );
    assert_eq!(st, 409, "{e}");
    assert_eq!(e["error"]["code"], "exists");
    assert_eq!(e["error"]["version"].as_u64(), Some(first));
    assert_eq!(e["error"]["fire_at_us"].as_u64(), fire_at);
    let (_, g) = get(&s, "k");
    assert_eq!((version(&g), &g["payload"]), (first, &json!(1)));

    // "if_version" of another version: 409 version_mismatch with the current one.
    let (st, e) = put(&s, "k", json!({"delay_ms": 5, "if_version": first + 1}));
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("version_mismatch"))
    );
    assert_eq!(e["error"]["version"].as_u64(), Some(first));
    assert!(e["error"].get("fire_at_us").is_none(), "{e}");
    // Of its own version: replaced (200), under a new version.
    let (st, r) = put(
        &s,
        "k",
        json!({"delay_ms": 600_000, "if_version": first, "payload": 3}),
    );
    assert_eq!(st, 200, "{r}");
    let second = version(&r);
    assert!(second > first);
    // The old version no longer matches: a lost update is refused.
    let (st, e) = put(&s, "k", json!({"delay_ms": 1, "if_version": first}));
    assert_eq!((st, e["error"]["version"].as_u64()), (409, Some(second)));

    // DELETE ?if_version: another version is 409 and cancels nothing; its own cancels.
    let (st, e) = delete_if(&s, "k", &first.to_string());
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("version_mismatch"))
    );
    assert_eq!(e["error"]["version"].as_u64(), Some(second));
    assert_eq!(get(&s, "k").0, 200);
    assert_eq!(delete_if(&s, "k", &second.to_string()).0, 204);
    assert_eq!(get(&s, "k").0, 404);
    // Cancelled: absent again, so "if": "absent" creates.
    assert_eq!(
        put(&s, "k", json!({"delay_ms": 1000, "if": "absent"})).0,
        201
    );

    assert_eq!(s.metric("punctual_conflicts_exists"), 1.0);
    assert_eq!(s.metric("punctual_conflicts_version_mismatch"), 3.0);
    assert_eq!(s.metric("punctual_conflicts_not_pending"), 1.0);
}

#[test]
fn a_timer_in_flight_or_retrying_is_pending_and_a_dead_letter_is_absent() {
    let rx = Receiver::start(|r, _| match r.path.as_str() {
        "/slow" => Reply::status(200).after(Duration::from_secs(4)),
        "/fail" => Reply::status(503),
        _ => Reply::status(500),
    });
    let config = format!(
        "callback_allow = [{:?}]\ncallback_allow_networks = [\"127.0.0.1/32\"]\nwebhook_timeout_ms = 10000\n",
        rx.base()
    );
    let dir = tempfile::tempdir().expect("dir");
    let s = api_support::Configured::journal(dir.path(), &config, &["--shards", "2"]);
    let s = &s.s;
    let with = |path: &str, attempts: u64| {
        json!({"delay_ms": 0, "callback": {"url": rx.url(path)},
               "retry": {"max_attempts": attempts, "base_delay_ms": 60_000, "max_delay_ms": 60_000}})
    };
    let state = |key: &str| {
        let (st, g) = get(s, key);
        (st == 200).then(|| g["delivery"]["state"].as_str().unwrap_or("").to_string())
    };

    // In flight: pending to every condition, under the version it was scheduled with, and
    // its own deadline (not the safety net it waits at).
    let (_, r) = put(s, "flying", with("slow", 3));
    let (v, fire_at) = (version(&r), r["fire_at_us"].as_u64());
    eventually("in flight", || {
        (state("flying").as_deref() == Some("in_flight")).then_some(())
    });
    let (st, e) = put(s, "flying", json!({"delay_ms": 1, "if": "absent"}));
    assert_eq!((st, e["error"]["version"].as_u64()), (409, Some(v)), "{e}");
    assert_eq!(e["error"]["fire_at_us"].as_u64(), fire_at);
    let (st, e) = put(s, "flying", json!({"delay_ms": 1, "if_version": v + 1}));
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("version_mismatch"))
    );
    let (st, r) = put(
        s,
        "flying",
        json!({"delay_ms": 600_000, "if_version": v, "payload": "replaced"}),
    );
    assert_eq!(st, 200, "replacing a timer in flight by its version: {r}");
    assert_eq!(
        state("flying").as_deref(),
        Some(""),
        "no delivery state left"
    );

    // Retrying: the same.
    let (_, r) = put(s, "again", with("fail", 3));
    let v = version(&r);
    eventually("retrying", || {
        (state("again").as_deref() == Some("retrying")).then_some(())
    });
    let (st, e) = put(s, "again", json!({"delay_ms": 1, "if": "absent"}));
    assert_eq!((st, e["error"]["version"].as_u64()), (409, Some(v)), "{e}");
    let (st, _) = delete_if(s, "again", &(v + 1).to_string());
    assert_eq!(st, 409);
    assert_eq!(delete_if(s, "again", &v.to_string()).0, 204);
    assert_eq!(get(s, "again").0, 404);

    // A dead letter: no timer is pending under its key.
    let (_, r) = put(s, "gone", with("dead", 1));
    let v = version(&r);
    eventually("a dead letter", || {
        let (_, d) = s.json("GET", "/v1/dead/t", "");
        (d["dead"].as_array().map_or(0, Vec::len) == 1).then_some(())
    });
    let (st, e) = put(s, "gone", json!({"delay_ms": 1, "if_version": v}));
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{e}"
    );
    assert_eq!(delete_if(s, "gone", &v.to_string()).0, 404);
    let (st, r) = put(s, "gone", json!({"delay_ms": 600_000, "if": "absent"}));
    assert_eq!(st, 201, "{r}");
    let (_, d) = s.json("GET", "/v1/dead/t", "");
    assert_eq!(
        d["dead"][0]["key"], "gone",
        "the letter stays beside the new timer"
    );
}

#[test]
fn batch_items_carry_their_own_conditions() {
    let s = Server::start(&["--shards", "2"]);
    let (_, r) = put(&s, "b", json!({"delay_ms": 600_000}));
    let v = version(&r);
    let body = json!({"timers": [
        {"key": "a", "delay_ms": 600_000, "if": "absent"},
        {"key": "a", "delay_ms": 600_000, "if": "absent"},
        {"key": "b", "delay_ms": 600_000, "if_version": v + 1},
        {"key": "b", "delay_ms": 600_000, "if_version": v},
        {"key": "c", "delay_ms": 600_000, "if_version": v},
        {"key": "d", "delay_ms": 600_000, "if": "later"}
    ]});
    let (st, out) = s.json("POST", "/v1/timers/t", &body.to_string());
    assert_eq!(st, 200, "{out}");
    let r = out["results"].as_array().expect("results");
    let statuses: Vec<u64> = r
        .iter()
        .map(|i| i["status"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(statuses, [201, 409, 409, 200, 404, 400], "{out}");
    assert_eq!(r[1]["error"]["code"], "exists");
    assert_eq!(r[1]["error"]["version"], r[0]["version"]);
    assert_eq!(r[1]["error"]["fire_at_us"], r[0]["fire_at_us"]);
    assert_eq!(r[2]["error"]["code"], "version_mismatch");
    assert_eq!(r[2]["error"]["version"].as_u64(), Some(v));
    assert_eq!(r[5]["error"]["code"], "invalid_field");
}

#[test]
fn bad_conditions_are_400_naming_the_field() {
    let s = Server::start(&[]);
    for (body, field) in [
        (json!({"delay_ms": 1, "if": "present"}), "\"if\""),
        (json!({"delay_ms": 1, "if": null}), "\"if\""),
        (json!({"delay_ms": 1, "if": 1}), "\"if\""),
        (json!({"delay_ms": 1, "if_version": "12"}), "if_version"),
        (json!({"delay_ms": 1, "if_version": 0}), "if_version"),
        (json!({"delay_ms": 1, "if_version": 1.5}), "if_version"),
        (json!({"delay_ms": 1, "if_version": -3}), "if_version"),
        (
            json!({"delay_ms": 1, "if": "absent", "if_version": 3}),
            "if_version",
        ),
    ] {
        let (st, e) = put(&s, "k", body.clone());
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("invalid_field")),
            "{body}"
        );
        let message = e["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(field), "{body}: {message}");
    }
    let (st, e) = delete_if(&s, "k", "x");
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (400, Some("invalid_field"))
    );
    assert!(e["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("if_version"));
    assert_eq!(get(&s, "k").0, 404, "nothing was scheduled");
}
