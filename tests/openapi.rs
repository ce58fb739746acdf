//! `docs/openapi.yaml` against the real server: every answer the tests provoke — each
//! documented status of each route, and every error code that a request can provoke cheaply —
//! has a status the document lists for its route and method, the headers it requires, and a
//! body valid against the schema it gives for that status. The document itself is checked
//! too: every `$ref` resolves, every schema compiles, and its paths are exactly the router's.

mod api_support;
mod openapi_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{raw_exchange, read_response, request, Resp, Server};
use openapi_support::{refs, router_routes, shape, Covered, Spec};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::Write;

const TENANTS: &str = r#"
open_tenants = true
[tenants.locked]
token = "s3cret-0123456789abcdef0123456789"
[tenants.capped]
max_pending = 2
"#;

/// Error codes that no cheap request provokes: a shard full at `shard_capacity`, a forward to
/// another node that gave no answer (only nodes on a Redis Cluster forward:
/// `tests/cluster_nodes.rs` provokes it), a request still waiting when the shards stop, and a
/// server bug, and a bulk cancel on a node among others.
const NOT_PROVOKED: [&str; 5] = [
    "capacity_exceeded",
    "internal",
    "not_implemented",
    "peer_unavailable",
    "shutting_down",
];

/// The token of the dead-letter server's `/metrics`.
const METRICS_TOKEN: &str = "metrics-0123456789abcdef0123456789";

/// An answer, already checked against the document.
struct Answer {
    status: u16,
    code: String,
    body: Value,
}

impl Answer {
    fn of(spec: &Spec, method: &str, path: &str, r: &Resp) -> Answer {
        let body = spec.check(method, path, r);
        let code = body["error"]["code"].as_str().unwrap_or("").to_string();
        Answer {
            status: r.status,
            code,
            body,
        }
    }

    /// (status, error code): what most assertions compare.
    fn sc(&self) -> (u16, &str) {
        (self.status, &self.code)
    }

    /// (status, error code) of each batch item.
    fn items(&self) -> Vec<(u64, &str)> {
        let results = self.body["results"].as_array().into_iter().flatten();
        results
            .map(|x| {
                let code = x["error"]["code"].as_str().unwrap_or("");
                (x["status"].as_u64().unwrap_or(0), code)
            })
            .collect()
    }
}

/// Requests to one server, each answer checked against the document.
struct Api<'a> {
    spec: &'a Spec,
    s: &'a Server,
}

impl Api<'_> {
    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        let r = request(self.s.addr, method, path, headers, body.as_bytes());
        Answer::of(self.spec, method, path, &r)
    }

    fn ask(&self, method: &str, path: &str, body: &str) -> Answer {
        self.send(method, path, &[], body)
    }

    /// A PUT whose body is also checked against the request schema: a body the server
    /// accepts must be valid, and one it refuses as `invalid_field` or `invalid_deadline`
    /// must not be (when it is JSON at all).
    fn put(&self, path: &str, body: &str) -> Answer {
        let a = self.ask("PUT", path, body);
        if let Ok(sent) = serde_json::from_str::<Value>(body) {
            let errors = self.spec.errors_for("PutTimerRequest", &sent);
            match a.sc() {
                (200 | 201, _) => assert!(errors.is_empty(), "{body} accepted: {errors:?}"),
                (400, "invalid_field" | "invalid_deadline") => {
                    assert!(
                        !errors.is_empty(),
                        "{body}: {}, the schema takes it",
                        a.code
                    )
                }
                _ => {}
            }
        }
        a
    }

    /// A batch whose body is also checked against the request schema: a body answered 200
    /// (its items each with their own result) must be valid, and one refused as
    /// `invalid_field` must not be.
    fn batch(&self, path: &str, body: &str) -> Answer {
        let a = self.ask("POST", path, body);
        if let Ok(sent) = serde_json::from_str::<Value>(body) {
            let errors = self.spec.errors_for("BatchRequest", &sent);
            match a.sc() {
                (200, _) => assert!(errors.is_empty(), "{body} answered 200: {errors:?}"),
                (400, "invalid_field") => {
                    assert!(
                        !errors.is_empty(),
                        "{body}: invalid_field, the schema takes it"
                    )
                }
                _ => {}
            }
        }
        a
    }

    /// Raw bytes, for what the tiny client cannot send.
    fn raw(&self, method: &str, path: &str, bytes: &[u8]) -> Answer {
        let r = raw_exchange(self.s.addr, bytes).expect("an answer");
        Answer::of(self.spec, method, path, &r)
    }

    /// A body that never completes: 408 after `body_timeout_ms`.
    fn slow_body(&self, method: &str, path: &str) -> Answer {
        let mut c = self.s.connect();
        let head = format!("{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{{");
        c.write_all(head.as_bytes()).expect("write");
        let r = read_response(&mut c).expect("an answer");
        Answer::of(self.spec, method, path, &r)
    }

    /// A request head over `max_header_bytes`: 431 with an empty body.
    fn oversized_head(&self, method: &str, path: &str) -> Answer {
        let big = "a".repeat(20_000);
        let req = format!("{method} {path} HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n");
        self.raw(method, path, req.as_bytes())
    }
}

/// The single-timer route, on a server with a token tenant and a quota of 2.
fn timer_route(api: &Api) {
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
fn batch_and_operations(api: &Api) {
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
fn unlisted_methods(api: &Api) {
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
fn dead_letters(spec: &Spec) {
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
fn admission(api: &Api) {
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
            ("GET", format!("/v1/actions/{t}/x"), ""),
            ("GET", format!("/v1/dead/{t}"), ""),
            ("DELETE", format!("/v1/dead/{t}/k"), ""),
            ("POST", format!("/v1/dead/{t}/k/retry"), ""),
        ]
    };
    for (method, path, body) in routes("stranger") {
        let a = api.ask(method, &path, body);
        assert_eq!(a.sc(), (401, "unknown_tenant"), "{method} {path}");
    }
    // One request a second: each route is refused once its token is spent (a slow host may
    // let a request through between two refusals; each waits for its own).
    for (method, path, body) in routes("limited") {
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
fn store_down(spec: &Spec) {
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
            ("DELETE", "/v1/dead/t/k", ""),
            ("POST", "/v1/dead/t/k/retry", ""),
        ] {
            let api = &api;
            scope.spawn(move || {
                let a = api.ask(method, path, body);
                assert_eq!(a.sc(), (503, "store_unavailable"), "{method}");
            });
        }
        let a = api.ask("POST", "/v1/timers/t", batch);
        assert_eq!(
            (a.status, a.items()),
            (200, vec![(503, "store_unavailable")])
        );
    });
}

/// The default store, the journal: `/healthz` names it.
fn journal_store(spec: &Spec) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8 path");
    let s = Server::start(&["--store", "journal", "--data-dir", data, "--shards", "1"]);
    let api = Api { spec, s: &s };
    let h = api.ask("GET", "/healthz", "");
    assert_eq!((h.status, &h.body["store"]), (200, &json!("journal")));
}

/// One shard with a ring of 16: a batch past it has 503 `overloaded` items. Two connections
/// at most: a third, whatever it asks, is 503 `too_many_connections`.
fn small_server(spec: &Spec) {
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
}

#[test]
fn real_answers_match_the_openapi_document() {
    let spec = Spec::load();
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(TENANTS.as_bytes()).expect("write");
    let conf = f.path().to_str().expect("utf-8 path").to_string();
    std::thread::scope(|scope| {
        scope.spawn(|| store_down(&spec));
        scope.spawn(|| small_server(&spec));
        scope.spawn(|| journal_store(&spec));
        scope.spawn(|| dead_letters(&spec));
        let args = [
            "--config",
            &conf,
            "--body-timeout-ms",
            "1000",
            "--max-header-bytes",
            "8192",
        ];
        let s = Server::start(&args);
        let api = Api { spec: &spec, s: &s };
        timer_route(&api);
        batch_and_operations(&api);
        unlisted_methods(&api);
    });
    // Every documented status was produced, but 500 (a server bug, never provoked) and the
    // answers only a node on a Redis Cluster gives (`/cluster` 200 and its 503 from Redis:
    // `tests/cluster_status.rs` checks them against this document).
    let missing: Vec<Covered> = spec
        .documented()
        .difference(&spec.covered())
        .filter(|c| c.status != 500 && !(c.path == "/cluster" && c.status == 200))
        // A bulk cancel on a node among others, and with a tenant's 64 actions running.
        .filter(|c| !(c.path == "/v1/timers/{tenant}" && c.method == "DELETE" && c.status > 500))
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "documented, never produced: {missing:#?}"
    );
    // Every error code the document lists was produced, but those no cheap request provokes.
    let listed: BTreeSet<String> = spec.doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect();
    let unseen: Vec<_> = listed.difference(&spec.codes_seen()).cloned().collect();
    assert_eq!(unseen, NOT_PROVOKED, "error codes never produced");
}

#[test]
fn the_document_is_complete_and_its_references_resolve() {
    let spec = Spec::load();
    let version = spec.doc["openapi"].as_str().unwrap_or("");
    assert!(version.starts_with("3.1."), "OpenAPI 3.1, not {version:?}");
    let mut all = Vec::new();
    refs(&spec.doc, "", &mut all);
    assert!(all.len() > 50, "only {} $refs found", all.len());
    for (at, r) in &all {
        let target = r.strip_prefix('#').and_then(|p| spec.doc.pointer(p));
        assert!(target.is_some(), "{at}: $ref {r:?} does not resolve");
    }
    let schemas = spec.doc["components"]["schemas"].as_object();
    for (name, schema) in schemas.into_iter().flatten() {
        let valid = jsonschema::meta::is_valid(schema);
        assert!(
            valid,
            "components/schemas/{name} is not a valid JSON Schema"
        );
        spec.validator(schema);
    }
    // Every response of every operation: a description, and schemas that compile.
    for c in spec.documented() {
        let item = &spec.doc["paths"][&c.path];
        let op = match c.method.as_str() {
            "*" => &item["x-unlisted-methods"],
            m => &item[m.to_lowercase()],
        };
        let resp = spec.resolve(&op["responses"][c.status.to_string()]);
        assert!(resp["description"].is_string(), "{c:?} has no description");
        for (_, media) in resp["content"].as_object().into_iter().flatten() {
            spec.validator(&media["schema"]);
        }
    }
    // The document's paths are exactly the router's routes.
    let routes_rs = concat!(env!("CARGO_MANIFEST_DIR"), "/src/api/routes.rs");
    let source = std::fs::read_to_string(routes_rs).expect("read src/api/routes.rs");
    let routes = router_routes(&source);
    assert!(routes.len() >= 4, "read only {routes:?} from route()");
    let paths = spec.doc["paths"].as_object().into_iter().flatten();
    let documented: BTreeSet<String> = paths.map(|(p, _)| shape(p)).collect();
    assert_eq!(
        routes,
        documented,
        "router routes vs {}",
        openapi_support::DOC
    );
    // Each `{name}` of a path is declared as a parameter, and nothing else is.
    for (path, item) in spec.doc["paths"].as_object().into_iter().flatten() {
        let params = item["parameters"].as_array().into_iter().flatten();
        let declared: BTreeSet<&str> = params
            .map(|p| spec.resolve(p)["name"].as_str().unwrap_or(""))
            .collect();
        let used: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .collect();
        assert_eq!(declared, used, "{path}: path parameters");
    }
}

#[test]
fn a_body_off_the_schema_fails_the_check() {
    // The checker must be able to fail: an undocumented or missing field, a code the status
    // does not allow, an undocumented status and a missing header are all refused.
    let spec = Spec::load();
    let resp = |status: u16, body: &str| Resp {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.as_bytes().to_vec(),
    };
    let ok = r#"{"tenant":"t","key":"k","fire_at_us":1,"version":2}"#;
    spec.check("PUT", "/v1/timers/t/k", &resp(201, ok));
    for (status, body) in [
        (
            201,
            r#"{"tenant":"t","key":"k","fire_at_us":1,"version":2,"extra":1}"#,
        ),
        (201, r#"{"tenant":"t","key":"k","fire_at_us":1}"#),
        (
            201,
            r#"{"tenant":"t","key":"k","fire_at_us":1,"version":0}"#,
        ),
        (400, r#"{"error":{"code":"quota_exceeded","message":"m"}}"#),
        (400, r#"{"error":{"code":"invalid_key"}}"#),
        (404, r#"{"error":{"code":"not_found","message":"m"}}"#),
        (401, r#"{"error":{"code":"unauthorized","message":"m"}}"#),
    ] {
        let checked =
            std::panic::catch_unwind(|| spec.check("PUT", "/v1/timers/t/k", &resp(status, body)));
        assert!(checked.is_err(), "{status} {body} passed the check");
    }
}

#[test]
fn the_route_reader_sees_every_match_arm() {
    // A route added to the router shows up here, and so fails the comparison above until
    // the document describes it.
    let source = r#"
fn route(path: &str) -> Route<'_> {
    match (it.next(), it.next(), it.next(), it.next(), it.next()) {
        (Some("metrics"), None, ..) => Route::Metrics,
        (Some("v1"), Some("dead"), Some(t), None, _) if !t.is_empty() => Route::Dead(t),
        _ => Route::NotFound,
    }
}
"#;
    let want: BTreeSet<String> = ["/metrics", "/v1/dead/{}"].map(String::from).into();
    assert_eq!(router_routes(source), want);
}
