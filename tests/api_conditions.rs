//! Conditional writes against the real binary: `"if": "absent"` and `"if_version": V` on a
//! PUT and in batch items, `?if_version=V` on a DELETE, a key's whole life through them
//! (absent, pending, replaced, cancelled), their bad input, and the conflicts' counters in
//! `/metrics`. Every condition against every state of a key (in flight, retrying, paged, a
//! dead letter) is `api_conditions_states.rs`.

mod api_support;

use api_support::Server;
use serde_json::{json, Value};

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
    // And per tenant: another tenant's refusal is its own.
    let path = "/v1/timers/u/k";
    s.json("PUT", path, &json!({"delay_ms": 600_000}).to_string());
    let (st, _) = s.json(
        "PUT",
        path,
        &json!({"delay_ms": 1, "if": "absent"}).to_string(),
    );
    assert_eq!(st, 409);
    for (tenant, code, n) in [
        ("t", "exists", 1.0),
        ("t", "version_mismatch", 3.0),
        ("t", "not_pending", 1.0),
        ("u", "exists", 1.0),
        ("u", "version_mismatch", 0.0),
    ] {
        assert_eq!(tenant_conflicts(&s, tenant, code), n, "{tenant} {code}");
    }
    assert_eq!(s.metric("punctual_conflicts_exists"), 2.0);
}

/// `punctual_tenant_conflicts_total` of `tenant` and `code`, all shards together.
fn tenant_conflicts(s: &Server, tenant: &str, code: &str) -> f64 {
    let text = String::from_utf8_lossy(&s.req("GET", "/metrics", "").body).into_owned();
    let (t, c) = (format!("tenant=\"{tenant}\""), format!("code=\"{code}\""));
    text.lines()
        .filter(|l| l.starts_with("punctual_tenant_conflicts_total{"))
        .filter(|l| l.contains(&t) && l.contains(&c))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
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
        {"key": "d", "delay_ms": 600_000, "if": "later"},
        {"key": "e", "delay_ms": 600_000, "if_version": "12"},
        {"key": "f", "debounce": {"max_wait_ms": 5}}
    ]});
    let (st, out) = s.json("POST", "/v1/timers/t", &body.to_string());
    assert_eq!(st, 200, "{out}");
    let r = out["results"].as_array().expect("results");
    let statuses: Vec<u64> = r
        .iter()
        .map(|i| i["status"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(statuses, [201, 409, 409, 200, 404, 400, 400, 400], "{out}");
    assert_eq!(r[1]["error"]["code"], "exists");
    assert_eq!(r[1]["error"]["version"], r[0]["version"]);
    assert_eq!(r[1]["error"]["fire_at_us"], r[0]["fire_at_us"]);
    assert_eq!(r[2]["error"]["code"], "version_mismatch");
    assert_eq!(r[2]["error"]["version"].as_u64(), Some(v));
    assert_eq!(r[5]["error"]["code"], "invalid_field");
    assert!(r[5]["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("\"if\""));
    assert_eq!(r[6]["error"]["code"], "invalid_field");
    assert!(r[6]["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("if_version"));
    assert_eq!(
        r[7]["error"]["code"], "invalid_deadline",
        "a debounce needs a deadline"
    );
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
            json!({"delay_ms": 1, "if_version": 18_446_744_073_709_551_616.0}),
            "if_version",
        ),
        (json!({"delay_ms": 1, "if_version": null}), "if_version"),
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
    // A DELETE's condition: not a number, out of range, or given twice (which one holds?).
    for v in [
        "x",
        "0",
        "-1",
        "1.5",
        "",
        "18446744073709551616",
        "5&if_version=6",
    ] {
        let (st, e) = delete_if(&s, "k", v);
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("invalid_field")),
            "{v}: {e}"
        );
        let message = e["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("if_version"), "{v}: {message}");
    }
    assert_eq!(get(&s, "k").0, 404, "nothing was scheduled");
}

/// A write's query holds only what the route knows: a misspelt `?if_verison=5` on a DELETE
/// must not cancel without its condition, a PUT's `?if_version=5` must not replace without
/// one, and neither may change anything. A GET's query is ignored.
#[test]
fn a_write_with_a_parameter_it_does_not_know_is_refused_and_changes_nothing() {
    let s = Server::start(&["--shards", "2"]);
    let (st, v) = put(&s, "k", json!({"delay_ms": 600_000, "payload": 1}));
    assert_eq!(st, 201, "{v}");
    let first = version(&v);
    for query in ["if_verison=5", "if_version=1&force=true", "if_version"] {
        let r = s.req("DELETE", &format!("/v1/timers/t/k?{query}"), "");
        assert_eq!(
            r.status,
            400,
            "DELETE ?{query}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let e = r.json();
        assert_eq!(e["error"]["code"].as_str(), Some("invalid_field"), "{e}");
        let message = e["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("unknown query parameter"), "{message}");
    }
    let body = json!({"delay_ms": 1_000_000, "payload": 2}).to_string();
    for query in ["if_version=99", "if=absent"] {
        let r = s.req("PUT", &format!("/v1/timers/t/k?{query}"), &body);
        assert_eq!(
            r.status,
            400,
            "PUT ?{query}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let message = r.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(message.contains("in its body"), "{message}");
    }
    let r = s.req("PUT", "/v1/timers/t/new?if=absent", &body);
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(get(&s, "new").0, 404, "a refused PUT made nothing");
    let (st, v) = s.json("GET", "/v1/timers/t/k?pretty=1", "");
    assert_eq!(st, 200, "a GET's query is ignored: {v}");
    assert_eq!(
        (version(&v), v["payload"].clone()),
        (first, json!(1)),
        "nothing above changed the timer"
    );
    // The condition itself still works, and an empty query is no parameter.
    assert_eq!(delete_if(&s, "k", &(first + 1).to_string()).0, 409);
    let r = s.req("DELETE", "/v1/timers/t/k?", "");
    assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.body));
}
