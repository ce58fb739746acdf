//! The requests that provoke each documented answer, by route and by server: the single-timer
//! route, the batch and operations routes, methods a path does not list, callbacks and dead
//! letters, admission, a store that is down, the journal store, a small server.

use super::*;

/// The single-timer route, on a server with a token tenant and a quota of 2.
pub(super) fn timer_route(api: &Api) {
    let p = "/v1/timers/shop/order-8812";
    let a = api.put(p, r#"{"delay_ms": 900000, "payload": {"order": 8812}}"#);
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(
        api.put(p, r#"{"fire_at": "2030-01-31T10:15:00.000Z"}"#)
            .status,
        200
    );
    let o2 = r#"{"fire_at_ms": 1896084900000, "payload": "x"}"#;
    assert_eq!(api.put("/v1/timers/shop/o-2", o2).status, 201);
    let got = api.ask("GET", p, "");
    assert_eq!((got.status, &got.body["payload"]), (200, &Value::Null));
    // Conditional writes: `if: absent` on a pending key, `if_version` stale or on no timer.
    let v = got.body["version"]
        .as_u64()
        .expect("a pending timer's version");
    let absent = r#"{"delay_ms": 900000, "if": "absent"}"#;
    assert_eq!(api.put(p, absent).sc(), (409, "exists"));
    let stale = format!(r#"{{"delay_ms": 900000, "if_version": {}}}"#, v + 1);
    assert_eq!(api.put(p, &stale).sc(), (409, "version_mismatch"));
    assert_eq!(
        api.put("/v1/timers/shop/none", &stale).sc(),
        (404, "not_found")
    );
    let del = format!("{p}?if_version={}", v + 1);
    assert_eq!(api.ask("DELETE", &del, "").sc(), (409, "version_mismatch"));
    // The listing by key prefix, and its bad input.
    let listed = api.ask("GET", "/v1/timers/shop?prefix=o", "");
    assert_eq!(listed.status, 200, "{}", listed.body);
    let bad = api.ask("GET", "/v1/timers/shop?limit=0", "");
    assert_eq!(bad.sc(), (400, "invalid_field"));
    assert_eq!(api.oversized_head("GET", "/v1/timers/shop").status, 431);
    for (body, code) in [
        ("not json", "malformed_json"),
        (r#"{"delay_ms": 1, "colour": "red"}"#, "invalid_field"),
        (r#"{"delay_ms": "10"}"#, "invalid_field"),
        ("[1]", "invalid_field"),
        ("{}", "invalid_deadline"),
        (r#"{"delay_ms": 1, "fire_at_ms": 1}"#, "invalid_deadline"),
        (r#"{"fire_at": "2030-01-01 00:00"}"#, "invalid_deadline"),
        (r#"{"delay_ms": 0.5}"#, "invalid_deadline"),
        (r#"{"delay_ms": -1}"#, "deadline_out_of_range"),
        // `null` is not a value of these fields (only the payload may be `null`).
        (r#"{"delay_ms": 600000, "retry": null}"#, "invalid_field"),
        (r#"{"delay_ms": 600000, "callback": null}"#, "invalid_field"),
        (r#"{"delay_ms": 600000, "fire_at": null}"#, "invalid_field"),
        (r#"{"delay_ms": null}"#, "invalid_field"),
        (
            r#"{"fire_at": "9999-12-31T23:59:59Z"}"#,
            "deadline_out_of_range",
        ),
    ] {
        assert_eq!(api.put("/v1/timers/t/k", body).sc(), (400, code), "{body}");
    }
    let long = "k".repeat(129);
    for (path, code) in [
        ("/v1/timers/a%20b/k".to_string(), "invalid_tenant"),
        (format!("/v1/timers/{long}/k"), "invalid_tenant"),
        ("/v1/timers/t/..".to_string(), "invalid_key"),
        (format!("/v1/timers/t/{long}"), "invalid_key"),
    ] {
        for method in ["PUT", "GET", "DELETE"] {
            let a = api.ask(method, &path, r#"{"delay_ms": 1000}"#);
            assert_eq!(a.sc(), (400, code), "{method} {path}");
        }
    }
    // Bearer tokens: checked before the body; 401 carries WWW-Authenticate.
    let locked = "/v1/timers/locked/k";
    for auth in [
        "",
        "Bearer wrong",
        "Basic s3cret-0123456789abcdef0123456789",
    ] {
        let h: Vec<(&str, &str)> = Some(("authorization", auth))
            .filter(|_| !auth.is_empty())
            .into_iter()
            .collect();
        for method in ["PUT", "GET", "DELETE"] {
            let a = api.send(method, locked, &h, "not even JSON");
            assert_eq!(a.sc(), (401, "unauthorized"), "{method} {auth:?}");
        }
        let a = api.send("GET", "/v1/timers/locked", &h, "");
        assert_eq!(a.sc(), (401, "unauthorized"), "list {auth:?}");
    }
    let token = [("authorization", "bearer s3cret-0123456789abcdef0123456789")];
    assert_eq!(
        api.send("PUT", locked, &token, r#"{"delay_ms": 600000}"#)
            .status,
        201
    );
    assert_eq!(api.send("GET", locked, &token, "").status, 200);
    assert_eq!(api.send("DELETE", locked, &token, "").status, 204);
    for method in ["GET", "DELETE"] {
        let a = api.send(method, locked, &token, "");
        assert_eq!(a.sc(), (404, "not_found"), "{method}");
    }
    // Sizes: the body limit (128 KiB by default) and the payload limit (65,536 bytes).
    let big = format!(r#"{{"delay_ms": 1, "payload": "{}"}}"#, "x".repeat(140_000));
    assert_eq!(
        api.put("/v1/timers/t/k", &big).sc(),
        (413, "body_too_large")
    );
    let over = format!(r#"{{"delay_ms": 1, "payload": "{}"}}"#, "x".repeat(65_535));
    assert_eq!(
        api.put("/v1/timers/t/k", &over).sc(),
        (413, "payload_too_large")
    );
    // The quota: a new key past it is 429 with Retry-After; a replacement is not refused.
    let far = r#"{"delay_ms": 600000}"#;
    assert_eq!(api.put("/v1/timers/capped/a", far).status, 201);
    assert_eq!(api.put("/v1/timers/capped/b", far).status, 201);
    assert_eq!(
        api.put("/v1/timers/capped/c", far).sc(),
        (429, "quota_exceeded")
    );
    assert_eq!(api.put("/v1/timers/capped/a", far).status, 200);
    let slow = api.slow_body("PUT", "/v1/timers/t/slow");
    assert_eq!(slow.sc(), (408, "request_timeout"));
    for method in ["PUT", "GET", "DELETE"] {
        assert_eq!(api.oversized_head(method, "/v1/timers/t/k").status, 431);
    }
}

/// The batch route, `/healthz` and `/metrics`, on the same server.
pub(super) fn batch_and_operations(api: &Api) {
    let p = "/v1/timers/acme";
    let clean = json!({"timers": [
        {"key": "a", "delay_ms": 600000, "payload": {"n": 1}},
        {"key": "a", "fire_at_ms": 1893456000000u64},
        {"key": "g", "fire_at": "2030-01-01T00:00:00Z", "payload": null},
    ]});
    assert_eq!(
        api.spec.errors_for("BatchRequest", &clean),
        Vec::<String>::new()
    );
    let a = api.ask("POST", p, &clean.to_string());
    assert_eq!(
        (a.status, a.items()),
        (200, vec![(201, ""), (200, ""), (201, "")])
    );
    let mixed = json!({"timers": [
        {"key": "b/c", "delay_ms": 1},
        {"nokey": 1},
        7,
        {"key": "d", "delay_ms": 1, "fire_at_ms": 1},
        {"key": "e", "delay_ms": -1},
        {"key": "f", "delay_ms": 1, "payload": "x".repeat(65_537)},
        {"key": "h", "delay_ms": 600000},
    ]});
    let a = api.batch(p, &mixed.to_string());
    let want = vec![
        (400, "invalid_key"),
        (400, "invalid_field"),
        (400, "invalid_field"),
        (400, "invalid_deadline"),
        (400, "deadline_out_of_range"),
        (413, "payload_too_large"),
        (201, ""),
    ];
    assert_eq!((a.status, a.items()), (200, want));
    assert_eq!(a.body["results"][1]["key"], Value::Null, "no key to echo");
    // An item of no shape fails alone, as the document says of any item.
    let a = api.batch(
        p,
        r#"{"timers": [{}, {"key": "n", "delay_ms": 600000, "retry": null}]}"#,
    );
    assert_eq!(
        (a.status, a.items()),
        (200, vec![(400, "invalid_field"), (400, "invalid_field")])
    );
    // Items for new keys past the quota: 429, in item order ("capped" holds a and b).
    let over =
        r#"{"timers": [{"key": "a", "delay_ms": 600000}, {"key": "z", "delay_ms": 600000}]}"#;
    let a = api.ask("POST", "/v1/timers/capped", over);
    assert_eq!(a.items(), vec![(200, ""), (429, "quota_exceeded")]);
    for (body, code) in [
        ("{\"timers\": [", "malformed_json"),
        (r#"{"items": []}"#, "invalid_field"),
        (r#"{"timers": {}}"#, "invalid_field"),
        (r#"{"timers": []}"#, "empty_batch"),
    ] {
        assert_eq!(api.ask("POST", p, body).sc(), (400, code), "{body}");
    }
    let a = api.ask("POST", "/v1/timers/a%25", r#"{"timers": []}"#);
    assert_eq!(a.sc(), (400, "invalid_tenant"));
    let a = api.ask("POST", "/v1/timers/locked", "{}");
    assert_eq!(a.sc(), (401, "unauthorized"));
    let items: Vec<_> = (0..10_001)
        .map(|i| json!({"key": format!("k{i}"), "delay_ms": 1}))
        .collect();
    let a = api.ask("POST", p, &json!({ "timers": items }).to_string());
    assert_eq!(a.sc(), (413, "too_many_items"));
    let declared = b"POST /v1/timers/acme HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999\r\n\r\n{";
    assert_eq!(api.raw("POST", p, declared).sc(), (413, "body_too_large"));
    assert_eq!(api.slow_body("POST", p).sc(), (408, "request_timeout"));
    assert_eq!(api.oversized_head("POST", p).status, 431);

    // A bulk cancel and its progress (`tests/api_bulk_cancel.rs` checks what it does).
    let a = api.ask("DELETE", "/v1/timers/acme?prefix=a", "");
    let id = a.body["id"].as_str().unwrap_or("").to_string();
    assert_eq!(a.status, 202);
    assert_eq!(
        api.ask("GET", &format!("/v1/actions/acme/{id}"), "").status,
        200
    );
    assert_eq!(
        api.ask("GET", "/v1/actions/acme/x", "").sc(),
        (404, "not_found")
    );
    assert_eq!(
        api.ask("GET", "/v1/actions/a%25/x", "").sc(),
        (400, "invalid_tenant")
    );
    assert_eq!(
        api.ask("DELETE", "/v1/timers/acme", "").sc(),
        (400, "invalid_field")
    );
    assert_eq!(api.oversized_head("DELETE", "/v1/timers/acme").status, 431);
    assert_eq!(api.oversized_head("GET", "/v1/actions/acme/x").status, 431);

    let h = api.ask("GET", "/healthz", "");
    assert_eq!((h.status, &h.body["store"]), (200, &json!("memory")));
    let m = request(api.s.addr, "GET", "/metrics", &[], b"");
    assert_eq!(Answer::of(api.spec, "GET", "/metrics", &m).status, 200);
    assert!(String::from_utf8_lossy(&m.body).contains("punctual_timers_pending{"));
    assert_eq!(api.oversized_head("GET", "/healthz").status, 431);
    assert_eq!(api.oversized_head("GET", "/metrics").status, 431);
    // Not a node in cluster mode: `/cluster` says so.
    assert_eq!(api.ask("GET", "/cluster", "").sc(), (404, "not_found"));
    assert_eq!(api.oversized_head("GET", "/cluster").status, 431);
}

/// Every documented path, asked with methods it does not list: 405, with an Allow header
/// naming exactly the methods the document lists (`Spec::check` compares them).
pub(super) fn unlisted_methods(api: &Api) {
    let paths: BTreeSet<String> = api.spec.documented().into_iter().map(|c| c.path).collect();
    for template in paths {
        let path = template.replace("{tenant}", "t").replace("{key}", "k");
        let listed = api.spec.methods_of(&template);
        for method in ["PATCH", "OPTIONS", "PUT", "POST", "DELETE", "GET"] {
            if !listed.contains(method) {
                let a = api.ask(method, &path, "");
                assert_eq!(a.sc(), (405, "method_not_allowed"), "{method} {path}");
            }
        }
    }
}

/// Callbacks and the dead-letter routes, on a server whose callbacks may go to a receiver
/// that answers 410 (permanent: each delivery makes a dead letter at once).
pub(super) fn dead_letters(spec: &Spec) {
    let rx = receiver::Receiver::start(|_, _| receiver::Reply::status(410));
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    // Closed tenants (only those listed are served), one of them rate-limited, and a
    // metrics token.
    let conf = format!(
        "callback_allow = [{:?}]\nmetrics_token = \"{METRICS_TOKEN}\"\n[tenants.t]\n[tenants.limited]\nmax_requests_per_s = 1\nburst = 1\n[tenants.locked]\ntoken = \"s3cret-0123456789abcdef0123456789\"\n",
        rx.base()
    );
    f.write_all(conf.as_bytes()).expect("write");
    let path = f.path().to_str().expect("utf-8 path").to_string();
    let s = Server::start(&["--config", &path]);
    let api = Api { spec, s: &s };
    let cb = json!({"url": rx.url("hook")});
    let far = json!({"delay_ms": 600000, "callback": cb, "retry": {"max_attempts": 2}});
    let a = api.put("/v1/timers/t/pending", &far.to_string());
    assert_eq!(a.status, 201, "{}", a.body);
    let g = api.ask("GET", "/v1/timers/t/pending", "");
    assert_eq!(
        (g.status, &g.body["delivery"]["state"]),
        (200, &json!("pending"))
    );
    // A whole number written with a fraction of zero is a JSON Schema `integer`, as the
    // document types the retry fields; a fraction is not.
    let whole = json!({"delay_ms": 600000.0, "callback": cb, "retry": {"max_attempts": 2.0, "max_delay_ms": 1e6}});
    assert_eq!(
        api.put("/v1/timers/t/whole", &whole.to_string()).status,
        201
    );
    let half = json!({"delay_ms": 600000, "callback": cb, "retry": {"max_attempts": 2.5}});
    let a = api.put("/v1/timers/t/half", &half.to_string());
    assert_eq!(a.sc(), (400, "invalid_field"), "{}", a.body);
    let elsewhere = json!({"delay_ms": 1, "callback": {"url": "http://127.0.0.1:1/x"}});
    let a = api.put("/v1/timers/t/k", &elsewhere.to_string());
    assert_eq!(a.sc(), (400, "callback_not_allowed"));
    let now = json!({"delay_ms": 1, "payload": {"n": 1}, "callback": cb});
    assert_eq!(api.put("/v1/timers/t/k", &now.to_string()).status, 201);
    let dead = |api: &Api| {
        for _ in 0..2000 {
            let a = api.ask("GET", "/v1/dead/t", "");
            if a.body["dead"].as_array().is_some_and(|d| !d.is_empty()) {
                return a;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("no dead letter");
    };
    let a = dead(&api);
    assert_eq!(
        (a.status, &a.body["dead"][0]["last_status"]),
        (200, &json!(410))
    );
    // Re-drive: refused while a timer is pending under the key, accepted once it is not.
    assert_eq!(
        api.put("/v1/timers/t/k", r#"{"delay_ms": 600000}"#).status,
        201
    );
    let a = api.ask("POST", "/v1/dead/t/k/retry", "");
    assert_eq!(a.sc(), (409, "timer_pending"));
    assert_eq!(api.ask("DELETE", "/v1/timers/t/k", "").status, 204);
    assert_eq!(api.ask("POST", "/v1/dead/t/k/retry", "").status, 202);
    dead(&api);
    assert_eq!(api.ask("DELETE", "/v1/dead/t/k", "").status, 204);
    for (method, path) in [
        ("DELETE", "/v1/dead/t/none"),
        ("POST", "/v1/dead/t/none/retry"),
    ] {
        assert_eq!(
            api.ask(method, path, "").sc(),
            (404, "not_found"),
            "{method}"
        );
    }
    for (query, code) in [
        ("/v1/dead/t?limit=0", "invalid_field"),
        ("/v1/dead/t?limit=1&limit=2", "invalid_field"),
        ("/v1/dead/t?after=a%2F", "invalid_key"),
        ("/v1/dead/a%20b", "invalid_tenant"),
    ] {
        assert_eq!(api.ask("GET", query, "").sc(), (400, code), "{query}");
    }
    for (method, path) in [("DELETE", "/v1/dead/t/.."), ("POST", "/v1/dead/t/../retry")] {
        assert_eq!(
            api.ask(method, path, "").sc(),
            (400, "invalid_key"),
            "{method}"
        );
    }
    for (method, path) in [
        ("GET", "/v1/dead/locked"),
        ("DELETE", "/v1/dead/locked/k"),
        ("POST", "/v1/dead/locked/k/retry"),
    ] {
        assert_eq!(
            api.ask(method, path, "").sc(),
            (401, "unauthorized"),
            "{method}"
        );
        assert_eq!(api.oversized_head(method, path).status, 431, "{method}");
    }
    admission(&api);
}

/// The tenant admission answers, on every tenant route: an unlisted tenant on a server with
/// tenants configured, and a tenant over its request rate; and `/metrics` behind its token.
pub(super) fn admission(api: &Api) {
    let batch = r#"{"timers": [{"key": "a", "delay_ms": 600000}]}"#;
    let routes = |t: &str| {
        [
            (
                "PUT",
                format!("/v1/timers/{t}/k"),
                r#"{"delay_ms": 600000}"#,
            ),
            ("GET", format!("/v1/timers/{t}/k"), ""),
            ("DELETE", format!("/v1/timers/{t}/k"), ""),
            ("POST", format!("/v1/timers/{t}"), batch),
            ("DELETE", format!("/v1/timers/{t}?prefix=a"), ""),
            ("GET", format!("/v1/timers/{t}?prefix=a"), ""),
            ("GET", format!("/v1/actions/{t}/x"), ""),
            ("GET", format!("/v1/dead/{t}"), ""),
            ("DELETE", format!("/v1/dead/{t}/k"), ""),
            ("POST", format!("/v1/dead/{t}/k/retry"), ""),
            ("GET", format!("/v1/history/{t}"), ""),
            ("GET", format!("/v1/queues/{t}"), ""),
            ("POST", format!("/v1/queues/{t}/receive"), "{}"),
            (
                "POST",
                format!("/v1/queues/{t}/ack"),
                r#"{"receipts": ["x"]}"#,
            ),
            (
                "POST",
                format!("/v1/queues/{t}/nack"),
                r#"{"receipts": ["x"]}"#,
            ),
            (
                "POST",
                format!("/v1/queues/{t}/extend"),
                r#"{"receipts": ["x"]}"#,
            ),
        ]
    };
    let with_schedules = |t: &str| {
        let mut all: Vec<(&str, String, &str)> = routes(t).into();
        all.extend(schedule_routes(t));
        all
    };
    for (method, path, body) in with_schedules("stranger") {
        let a = api.ask(method, &path, body);
        assert_eq!(a.sc(), (401, "unknown_tenant"), "{method} {path}");
    }
    // One request a second: each route is refused once its token is spent (a slow host may
    // let a request through between two refusals; each waits for its own).
    for (method, path, body) in with_schedules("limited") {
        let limited = (0..20).any(|_| api.ask(method, &path, body).sc() == (429, "rate_limited"));
        assert!(limited, "{method} {path} never answered 429 rate_limited");
    }
    assert_eq!(api.ask("GET", "/metrics", "").sc(), (401, "unauthorized"));
    assert_eq!(api.ask("GET", "/cluster", "").sc(), (401, "unauthorized"));
    let token = format!("Bearer {METRICS_TOKEN}");
    assert_eq!(
        api.send("GET", "/cluster", &[("authorization", &token)], "")
            .sc(),
        (404, "not_found")
    );
    assert_eq!(
        api.send("GET", "/metrics", &[("authorization", &token)], "")
            .status,
        200
    );
}

/// A Redis store that is down: writes, reads and cancels wait for the store's
/// acknowledgement timeout (2 s) and are answered 503 store_unavailable; /healthz is 503.
pub(super) fn store_down(spec: &Spec) {
    let url = format!("redis://127.0.0.1:{}/", api_support::free_port());
    let s = Server::start_unhealthy(&["--redis", &url, "--shards", "1"]);
    let api = Api { spec, s: &s };
    let h = api.ask("GET", "/healthz", "");
    assert_eq!((h.status, &h.body["status"]), (503, &json!("unavailable")));
    let batch = r#"{"timers": [{"key": "a", "delay_ms": 1000}]}"#;
    std::thread::scope(|scope| {
        for (method, path, body) in [
            ("PUT", "/v1/timers/t/k", r#"{"delay_ms": 1000}"#),
            ("GET", "/v1/timers/t/k", ""),
            ("DELETE", "/v1/timers/t/k", ""),
            ("GET", "/v1/dead/t", ""),
            ("GET", "/v1/timers/t", ""),
            ("DELETE", "/v1/dead/t/k", ""),
            ("POST", "/v1/dead/t/k/retry", ""),
        ] {
            let api = &api;
            scope.spawn(move || {
                let a = api.ask(method, path, body);
                assert_eq!(a.sc(), (503, "store_unavailable"), "{method}");
            });
        }
        // Recurring schedules are served on Redis, and wait for it as the timers do.
        for (method, path, body) in schedule_routes("t") {
            let api = &api;
            scope.spawn(move || {
                let a = api.ask(method, &path, body);
                assert_eq!(a.sc(), (503, "store_unavailable"), "{method} {path}");
            });
        }
        let a = api.ask("POST", "/v1/timers/t", batch);
        assert_eq!(
            (a.status, a.items()),
            (200, vec![(503, "store_unavailable")])
        );
    });
    for p in ["", "/receive", "/ack", "/nack", "/extend"] {
        let method = if p.is_empty() { "GET" } else { "POST" };
        let a = api.ask(method, &format!("/v1/queues/t{p}"), "{}");
        assert_eq!(a.sc(), (501, "not_implemented"), "{method} {p}");
    }
    let a = api.ask("GET", "/v1/history/t", "");
    assert_eq!(a.sc(), (501, "not_implemented"));
}

/// The default store, the journal: `/healthz` names it.
pub(super) fn journal_store(spec: &Spec) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8 path");
    let s = Server::start(&["--store", "journal", "--data-dir", data, "--shards", "1"]);
    let api = Api { spec, s: &s };
    let h = api.ask("GET", "/healthz", "");
    assert_eq!((h.status, &h.body["store"]), (200, &json!("journal")));
}

/// One shard with a ring of 16: a batch past it has 503 `overloaded` items. Two connections
/// at most: a third, whatever it asks, is 503 `too_many_connections`.
pub(super) fn small_server(spec: &Spec) {
    let args = [
        "--shards",
        "1",
        "--ring-capacity",
        "16",
        "--max-connections",
        "2",
    ];
    let s = Server::start(&args);
    let api = Api { spec, s: &s };
    let items: Vec<_> = (0..40)
        .map(|i| json!({"key": format!("k{i}"), "delay_ms": 600000}))
        .collect();
    let a = api.ask(
        "POST",
        "/v1/timers/t",
        &json!({ "timers": items }).to_string(),
    );
    assert_eq!(a.items()[39], (503, "overloaded"), "{}", a.body);
    let mut held = Vec::new();
    for _ in 0..500 {
        if held.len() == 2 {
            break;
        }
        let mut c = s.connect();
        c.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .expect("write");
        match read_response(&mut c) {
            Ok(r) if r.status == 200 => held.push(c),
            _ => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
    assert_eq!(held.len(), 2, "could not hold two connections");
    for (method, path) in [
        ("PUT", "/v1/timers/t/k"),
        ("GET", "/v1/timers/t/k"),
        ("DELETE", "/v1/timers/t/k"),
        ("POST", "/v1/timers/t"),
        ("GET", "/healthz"),
        ("GET", "/metrics"),
        ("GET", "/cluster"),
    ] {
        let a = api.ask(method, path, r#"{"delay_ms": 1}"#);
        assert_eq!(a.sc(), (503, "too_many_connections"), "{method} {path}");
    }
    for (method, path, body) in schedule_routes("t") {
        let a = api.ask(method, &path, body);
        assert_eq!(a.sc(), (503, "too_many_connections"), "{method} {path}");
    }
}
