//! What a schedule's `PUT` refuses, through the real binary: a new schedule past the tenant's
//! `max_schedules` (`429 quota_exceeded`), counted from what the store holds, so across a
//! SIGKILL and a restart on the journal too; a body that is not an object, or `null` for a
//! field; a query parameter on any write.

mod api_support;

use api_support::{Configured, Server};
use std::io::Write;

const YEARLY: &str = r#"{"cron": "0 0 1 1 *", "time_zone": "Europe/London"}"#;

fn put(s: &Server, tenant: &str, key: &str, body: &str) -> (u16, String, String) {
    let r = s.req("PUT", &format!("/v1/schedules/{tenant}/{key}"), body);
    let j = r.json();
    let code = j["error"]["code"].as_str().unwrap_or_default().to_string();
    let message = j["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (r.status, code, message)
}

fn listed(s: &Server, tenant: &str) -> usize {
    let (status, page) = s.json("GET", &format!("/v1/schedules/{tenant}"), "");
    assert_eq!(status, 200, "{page}");
    page["schedules"].as_array().map_or(0, Vec::len)
}

#[test]
fn a_new_schedule_past_max_schedules_is_refused_and_the_count_survives_a_sigkill() {
    let toml = "open_tenants = true\nmax_schedules = 3\n[tenants.small]\nmax_schedules = 2\n";
    let data = tempfile::tempdir().expect("tempdir");
    let args = ["--shards", "2"];
    let first = Configured::journal(data.path(), toml, &args);
    let s = &first.s;
    // Schedules firing every second hold occurrences too; they are not schedules.
    let ticking = r#"{"every_ms": 1000}"#;
    assert_eq!(put(s, "small", "a", ticking).0, 201);
    assert_eq!(put(s, "small", "b", YEARLY).0, 201);
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let (status, code, message) = put(s, "small", "c", YEARLY);
    assert_eq!(
        (status, code.as_str()),
        (429, "quota_exceeded"),
        "{message}"
    );
    assert!(
        message.contains("max_schedules") && message.contains('2'),
        "{message:?} names neither the setting nor the quota"
    );
    assert_eq!(s.req("GET", "/v1/schedules/small/c", "").status, 404);
    // A replacement, a pause and a resume are always allowed; a delete frees a slot.
    assert_eq!(put(s, "small", "a", YEARLY).0, 200);
    assert_eq!(put(s, "small", "b", ticking).0, 200);
    assert_eq!(s.req("POST", "/v1/schedules/small/a/pause", "").status, 200);
    assert_eq!(s.req("DELETE", "/v1/schedules/small/b", "").status, 204);
    assert_eq!(put(s, "small", "c", ticking).0, 201);
    assert_eq!(put(s, "small", "d", YEARLY).0, 429);
    // The top-level default for a tenant without its own.
    for key in ["x", "y", "z"] {
        assert_eq!(put(s, "open", key, YEARLY).0, 201, "{key}");
    }
    assert_eq!(put(s, "open", "w", YEARLY).0, 429);
    // Timers are not schedules.
    let t = s.req("PUT", "/v1/timers/small/t", r#"{"delay_ms": 600000}"#);
    assert_eq!(t.status, 201);

    // After a SIGKILL the count is what recovery loads: a and c.
    let second = first.restart_after_sigkill(data.path(), &args);
    let s = &second.s;
    assert_eq!(listed(s, "small"), 2);
    assert_eq!(put(s, "small", "d", YEARLY).0, 429);
    assert_eq!(put(s, "small", "c", YEARLY).0, 200);
    assert_eq!(s.req("DELETE", "/v1/schedules/small/a", "").status, 204);
    assert_eq!(put(s, "small", "d", YEARLY).0, 201);
    assert_eq!(put(s, "open", "w", YEARLY).0, 429);
}

#[test]
fn max_schedules_of_zero_is_refused_at_start() {
    for toml in ["max_schedules = 0\n", "[tenants.a]\nmax_schedules = 0\n"] {
        let mut config = tempfile::NamedTempFile::new().expect("config");
        write!(config, "{toml}").expect("write config");
        let cfg = config.path().to_string_lossy();
        let (status, stderr) = Server::refused(&["--config", &cfg, "--store", "memory"]);
        assert!(!status.success(), "{toml}");
        assert!(stderr.contains("max_schedules"), "{toml}: {stderr}");
    }
}

#[test]
fn a_put_refuses_null_and_a_body_that_is_not_an_object() {
    let s = Server::start(&["--store", "memory"]);
    let cases = [
        ("null", "object"),
        ("[]", "object"),
        ("\"x\"", "object"),
        ("7", "object"),
        (r#"{"every_ms": 1000, "cron": null}"#, "cron"),
        (r#"{"cron": "* * * * *", "every_ms": null}"#, "every_ms"),
        (r#"{"every_ms": null}"#, "every_ms"),
        (
            r#"{"every_ms": 1000, "max_occurrences": null}"#,
            "max_occurrences",
        ),
        (r#"{"every_ms": 1000, "start_at": null}"#, "start_at"),
        (
            r#"{"every_ms": 1000, "catch_up": {"window_ms": null}}"#,
            "catch_up.window_ms",
        ),
        (r#"{"every_ms": 1000, "catch_up": null}"#, "catch_up"),
        (r#"{"cron": "* * * * *", "dst": {"gap": null}}"#, "dst.gap"),
        (r#"{"every_ms": 1000, "callback": null}"#, "callback"),
        (r#"{"every_ms": 1000, "retry": null}"#, "retry"),
    ];
    for (body, field) in cases {
        let (status, code, message) = put(&s, "shop", "n", body);
        assert_eq!(
            (status, code.as_str()),
            (400, "invalid_field"),
            "{body}: {message}"
        );
        assert!(
            message.contains(field),
            "{body}: {message:?} does not name {field}"
        );
        assert_eq!(
            s.req("GET", "/v1/schedules/shop/n", "").status,
            404,
            "{body}"
        );
    }
    // A payload may be null, and hold nulls.
    let (status, _, message) = put(&s, "shop", "n", r#"{"every_ms": 60000, "payload": null}"#);
    assert_eq!(status, 201, "{message}");
    let body = r#"{"every_ms": 60000, "payload": {"a": null, "b": [null]}}"#;
    let (status, _, message) = put(&s, "shop", "n", body);
    assert_eq!(status, 200, "{message}");
}

#[test]
fn a_schedule_write_refuses_any_query_parameter() {
    let s = Server::start(&["--store", "memory"]);
    let body = r#"{"every_ms": 60000}"#;
    for query in ["if_version=1", "next=3", "x", "if=absent&x=1"] {
        let (status, _, message) = put(&s, "shop", &format!("q?{query}"), body);
        assert_eq!(status, 400, "PUT ?{query}: {message}");
        assert!(message.contains("query parameter"), "{message:?}");
        assert_eq!(
            s.req("GET", "/v1/schedules/shop/q", "").status,
            404,
            "PUT ?{query}"
        );
    }
    assert_eq!(s.req("PUT", "/v1/schedules/shop/q", body).status, 201);
    for (method, path) in [
        ("DELETE", "q?if_version=1"),
        ("POST", "q/pause?x=1"),
        ("POST", "q/resume?x=1"),
    ] {
        let (status, e) = s.json(method, &format!("/v1/schedules/shop/{path}"), "");
        assert_eq!(
            (status, &e["error"]["code"]),
            (400, &"invalid_field".into()),
            "{path}: {e}"
        );
    }
    let (status, got) = s.json("GET", "/v1/schedules/shop/q", "");
    assert_eq!(
        (status, &got["paused"]),
        (200, &serde_json::json!(false)),
        "{got}"
    );
    // A GET keeps its own parameter; an unknown one is refused as before.
    assert_eq!(s.req("GET", "/v1/schedules/shop/q?next=2", "").status, 200);
    assert_eq!(s.req("GET", "/v1/schedules/shop/q?nxt=2", "").status, 400);
    assert_eq!(s.req("DELETE", "/v1/schedules/shop/q", "").status, 204);
}
