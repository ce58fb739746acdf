//! The requests that provoke each documented answer of the recurring schedules' routes, on
//! the main scenario server (the 401, 429 and 503 answers come from `admission`,
//! `store_down` and `small_server`, with the other routes').

use super::*;

/// Every route of `/v1/schedules` for tenant `t`: method, path, body.
pub(super) fn schedule_routes(t: &str) -> [(&'static str, String, &'static str); 6] {
    let every = r#"{"every_ms": 60000}"#;
    [
        ("PUT", format!("/v1/schedules/{t}/s"), every),
        ("GET", format!("/v1/schedules/{t}/s"), ""),
        ("DELETE", format!("/v1/schedules/{t}/s"), ""),
        ("POST", format!("/v1/schedules/{t}/s/pause"), ""),
        ("POST", format!("/v1/schedules/{t}/s/resume"), ""),
        ("GET", format!("/v1/schedules/{t}"), ""),
    ]
}

pub(super) fn schedules(api: &Api) {
    let p = "/v1/schedules/shop/nightly";
    let def = r#"{"cron": "30 2 * * *", "time_zone": "America/New_York", "payload": {"job": 1}}"#;
    let created = api.ask("PUT", p, def);
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(api.ask("PUT", p, def).status, 200);
    let got = api.ask("GET", &format!("{p}?next=3"), "");
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["next"].as_array().map(Vec::len), Some(3));
    assert_eq!(api.ask("POST", &format!("{p}/pause"), "").status, 200);
    assert_eq!(api.ask("POST", &format!("{p}/resume"), "").status, 200);
    let listed = api.ask("GET", "/v1/schedules/shop?limit=10", "");
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body["schedules"][0]["key"], "nightly");
    for (method, path, body) in [
        ("PUT", p, r#"{"cron": "61 * * * *"}"#),
        ("PUT", p, r#"{"every_ms": 1000, "colour": "red"}"#),
        ("GET", "/v1/schedules/shop/nightly?next=0", ""),
        ("GET", "/v1/schedules/shop?limit=0", ""),
    ] {
        assert_eq!(
            api.ask(method, path, body).sc(),
            (400, "invalid_field"),
            "{path} {body}"
        );
    }
    assert_eq!(api.ask("PUT", p, "not json").sc(), (400, "invalid_field"));
    let bad_key = "/v1/schedules/shop/a%20b";
    assert_eq!(api.ask("PUT", bad_key, def).sc(), (400, "invalid_key"));
    assert_eq!(api.ask("GET", bad_key, "").sc(), (400, "invalid_key"));
    assert_eq!(api.ask("DELETE", bad_key, "").sc(), (400, "invalid_key"));
    for action in ["pause", "resume"] {
        let a = api.ask("POST", &format!("{bad_key}/{action}"), "");
        assert_eq!(a.sc(), (400, "invalid_key"));
    }
    let big = format!(
        r#"{{"every_ms": 60000, "payload": "{}"}}"#,
        "x".repeat(70_000)
    );
    assert_eq!(api.ask("PUT", p, &big).sc(), (413, "payload_too_large"));
    assert_eq!(api.ask("DELETE", p, "").status, 204);
    for (method, path) in [
        ("GET", p.to_string()),
        ("DELETE", p.to_string()),
        ("POST", format!("{p}/pause")),
        ("POST", format!("{p}/resume")),
    ] {
        assert_eq!(
            api.ask(method, &path, "").sc(),
            (404, "not_found"),
            "{method} {path}"
        );
    }
    for (method, path, _) in schedule_routes("shop") {
        assert_eq!(
            api.oversized_head(method, &path).status,
            431,
            "{method} {path}"
        );
    }
}
