//! Tenant admission through the real binary: closed tenants once any is configured, the
//! metrics token, and per-tenant request rates (one tenant's flood never refuses another).

mod api_support;

use api_support::{Resp, Server};
use std::io::Write;

const TOKEN: &str = "tenant-token-0123456789abcdef0123";
const METRICS_TOKEN: &str = "metrics-token-0123456789abcdef012";

fn start(conf: &str) -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(conf.as_bytes()).expect("write");
    let path = f.path().to_str().expect("utf-8 path").to_string();
    (Server::start(&["--store", "memory", "--config", &path]), f)
}

fn auth(token: &str) -> String {
    format!("Bearer {token}")
}

fn status_code(r: &Resp) -> (u16, String) {
    (r.status, r.code())
}

#[test]
fn an_unlisted_tenant_is_refused_on_every_route_once_tenants_are_configured() {
    let (s, _f) = start(&format!(
        "[tenants.shop]\ntoken = \"{TOKEN}\"\n[tenants.plain]\n"
    ));
    let unknown = (401, "unknown_tenant".to_string());
    let body = r#"{"delay_ms":600000}"#;
    for (method, path, body) in [
        ("PUT", "/v1/timers/stranger/k", body),
        ("GET", "/v1/timers/stranger/k", ""),
        ("DELETE", "/v1/timers/stranger/k", ""),
        (
            "POST",
            "/v1/timers/stranger",
            r#"{"timers":[{"key":"a","delay_ms":1000}]}"#,
        ),
        ("GET", "/v1/dead/stranger", ""),
        ("DELETE", "/v1/dead/stranger/k", ""),
        ("POST", "/v1/dead/stranger/k/retry", ""),
    ] {
        let r = s.req(method, path, body);
        assert_eq!(status_code(&r), unknown, "{method} {path}");
        // Another tenant's token opens nothing either.
        let r = s.req_h(method, path, &[("authorization", &auth(TOKEN))], body);
        assert_eq!(
            status_code(&r),
            unknown,
            "{method} {path} with shop's token"
        );
    }
    // Listed tenants are served as before: one with a token, one without.
    let r = s.req_h(
        "PUT",
        "/v1/timers/shop/k",
        &[("authorization", &auth(TOKEN))],
        body,
    );
    assert_eq!(r.status, 201);
    assert_eq!(s.req("PUT", "/v1/timers/plain/k", body).status, 201);
    // The dead-letter routes need the tenant's token as the timer routes do.
    assert_eq!(status_code(&s.req("GET", "/v1/dead/shop", "")).0, 401);
    let r = s.req_h(
        "GET",
        "/v1/dead/shop",
        &[("authorization", &auth(TOKEN))],
        "",
    );
    assert_eq!(r.status, 200);
}

#[test]
fn open_tenants_serves_unlisted_tenants_and_no_table_is_the_open_quick_start() {
    let (s, _f) = start("open_tenants = true\n[tenants.shop]\nmax_pending = 5\n");
    assert_eq!(
        s.req("PUT", "/v1/timers/stranger/k", r#"{"delay_ms":600000}"#)
            .status,
        201
    );
    let quick = Server::start(&["--store", "memory"]);
    assert_eq!(
        quick
            .req("PUT", "/v1/timers/anyone/k", r#"{"delay_ms":600000}"#)
            .status,
        201
    );
}

#[test]
fn metrics_need_the_metrics_token_when_one_is_set() {
    let (s, _f) = start(&format!("metrics_token = \"{METRICS_TOKEN}\"\n"));
    for h in [
        None,
        Some(auth(TOKEN)),
        Some(format!("Basic {METRICS_TOKEN}")),
    ] {
        let headers: Vec<(&str, &str)> = h.iter().map(|a| ("authorization", a.as_str())).collect();
        let r = s.req_h("GET", "/metrics", &headers, "");
        assert_eq!(status_code(&r), (401, "unauthorized".into()), "{h:?}");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        assert!(
            !r.body.windows(9).any(|w| w == b"punctual_"),
            "no series leak"
        );
    }
    let r = s.req_h(
        "GET",
        "/metrics",
        &[("authorization", &auth(METRICS_TOKEN))],
        "",
    );
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body).contains("punctual_"));
    // /healthz stays open: a load balancer's probe carries no token.
    assert_eq!(s.req("GET", "/healthz", "").status, 200);
}

#[test]
fn a_tenant_over_its_rate_gets_429_with_retry_after_and_another_tenant_none() {
    let (s, _f) = start(
        "[tenants.flood]\nmax_requests_per_s = 5\nburst = 10\nmax_pending = 1000\n[tenants.calm]\nmax_requests_per_s = 100000\n",
    );
    let body = r#"{"delay_ms":600000}"#;
    let mut limited = 0;
    let mut admitted = 0;
    for i in 0..200 {
        let r = s.req("PUT", &format!("/v1/timers/flood/k{i}"), body);
        match status_code(&r) {
            (201, _) => admitted += 1,
            (429, code) if code == "rate_limited" => {
                limited += 1;
                let after: u64 = r
                    .header("retry-after")
                    .and_then(|v| v.parse().ok())
                    .expect("Retry-After in whole seconds");
                assert!((1..=60).contains(&after), "Retry-After {after}");
            }
            other => panic!("flood {i}: unexpected {other:?}"),
        }
        // The other tenant, between every flood request, is never refused.
        let r = s.req("PUT", &format!("/v1/timers/calm/k{i}"), body);
        assert_eq!(r.status, 201, "calm {i}: {:?}", r.code());
    }
    // The burst passes; then about 5 a second do. However slow this host, 200 requests take
    // far less than the 38 s that would let all of them through.
    assert!(admitted >= 10, "the burst is admitted: {admitted}");
    assert!(
        limited > 0 && admitted < 200,
        "admitted {admitted}, limited {limited}"
    );
    // Refused requests were not applied: exactly the admitted keys are pending (read from
    // /metrics, since the tenant's own GETs would count against its rate).
    let metrics = String::from_utf8_lossy(&s.req("GET", "/metrics", "").body).into_owned();
    let pending = metrics
        .lines()
        .find_map(|l| l.strip_prefix("punctual_tenant_pending{tenant=\"flood\"} "))
        .and_then(|v| v.trim().parse::<usize>().ok());
    assert_eq!(pending, Some(admitted), "{metrics}");
}

#[test]
fn the_metrics_token_reads_every_tenant_and_acts_on_none() {
    let (s, _f) = start(&format!(
        "metrics_token = \"{METRICS_TOKEN}\"\n\
         [tenants.shop]\ntoken = \"{TOKEN}\"\nqueue = true\n"
    ));
    let own = [("authorization", auth(TOKEN))];
    let own: Vec<(&str, &str)> = own.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = s.req_h("PUT", "/v1/timers/shop/k", &own, r#"{"delay_ms":600000}"#);
    assert_eq!(r.status, 201);
    let r = s.req_h(
        "PUT",
        "/v1/schedules/shop/nightly",
        &own,
        r#"{"every_ms":3600000}"#,
    );
    assert_eq!(r.status, 201);

    let reader = auth(METRICS_TOKEN);
    let reader = [("authorization", reader.as_str())];
    for (path, status) in [
        ("/v1/timers/shop?prefix=k&limit=10", 200),
        ("/v1/timers/shop/k", 200),
        ("/v1/dead/shop", 200),
        ("/v1/schedules/shop", 200),
        ("/v1/schedules/shop/nightly?next=5", 200),
        ("/v1/queues/shop", 200),
    ] {
        let r = s.req_h("GET", path, &reader, "");
        assert_eq!(r.status, status, "GET {path} with the metrics token");
        // Without any token, the same read is refused: the tenant has one.
        let r = s.req("GET", path, "");
        assert_eq!(status_code(&r), (401, "unauthorized".into()), "GET {path}");
    }
    let listed = s.req_h("GET", "/v1/timers/shop", &reader, "").json();
    assert_eq!(listed["timers"][0]["key"], "k");
    let next = s.req_h("GET", "/v1/schedules/shop/nightly?next=5", &reader, "");
    assert_eq!(next.json()["next"].as_array().map(Vec::len), Some(5));

    // Every write and action stays the tenant's own token's.
    let refused = (401, "unauthorized".to_string());
    for (method, path, body) in [
        ("PUT", "/v1/timers/shop/k2", r#"{"delay_ms":600000}"#),
        ("DELETE", "/v1/timers/shop/k", ""),
        ("DELETE", "/v1/timers/shop?prefix=k", ""),
        (
            "POST",
            "/v1/timers/shop",
            r#"{"timers":[{"key":"b","delay_ms":1000}]}"#,
        ),
        ("DELETE", "/v1/dead/shop/k", ""),
        ("POST", "/v1/dead/shop/k/retry", ""),
        ("PUT", "/v1/schedules/shop/n2", r#"{"every_ms":3600000}"#),
        ("DELETE", "/v1/schedules/shop/nightly", ""),
        ("POST", "/v1/schedules/shop/nightly/pause", ""),
        ("POST", "/v1/queues/shop/receive", r#"{"max":1}"#),
    ] {
        let r = s.req_h(method, path, &reader, body);
        assert_eq!(
            status_code(&r),
            refused,
            "{method} {path} with the metrics token"
        );
    }
    // The timer and the schedule are as they were.
    assert_eq!(s.req_h("GET", "/v1/timers/shop/k", &own, "").status, 200);
    let sched = s
        .req_h("GET", "/v1/schedules/shop/nightly", &own, "")
        .json();
    assert_eq!(sched["paused"], false);
    // An unknown tenant stays unknown to the metrics token.
    let r = s.req_h("GET", "/v1/timers/stranger", &reader, "");
    assert_eq!(status_code(&r), (401, "unknown_tenant".into()));
}
