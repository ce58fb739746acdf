//! The operator console (`/console`): its files and headers over HTTP, and the page itself
//! driven in a real browser (Debian's chromium through chromedriver, by
//! `tests/clients/console_browser.py` with selenium from `scripts/test`) against the real
//! binary and a real webhook receiver: the overview, dead letters listed, re-driven and
//! discarded, and a tenant's token refused another tenant's letters by the API; the tenants
//! and a tenant's timers, schedules and queue, read with the metrics token (every tenant) and
//! with a tenant's token (its own only). axe-core checks every page shown. Screenshots at
//! 1280×800 go to `target/console-screenshots/`.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{eventually, Server};
use receiver::{Receiver, Reply};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const METRICS_TOKEN: &str = "metrics-token-metrics-token-0123456789";
const SHOP_TOKEN: &str = "shop-token-shop-token-shop-token-0123456789";
const OTHER_TOKEN: &str = "other-token-other-token-other-token-0123456789";

/// `punctual serve` with a metrics token, two tenants with tokens and quotas (`shop` with a
/// pull queue), and callbacks allowed to `rx`.
fn server(rx: &Receiver) -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    write!(
        f,
        "metrics_token = {METRICS_TOKEN:?}\ncallback_allow = [{:?}]\n\
         [tenants.shop]\ntoken = {SHOP_TOKEN:?}\nmax_pending = 1000\nqueue = true\n\
         [tenants.other]\ntoken = {OTHER_TOKEN:?}\nmax_pending = 1000\n",
        rx.base()
    )
    .expect("write config");
    let path = f.path().to_str().expect("utf-8 path").to_string();
    (Server::start(&["--config", &path, "--shards", "2"]), f)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[test]
fn the_page_and_its_assets_carry_the_console_headers() {
    let rx = Receiver::ok();
    let (s, _f) = server(&rx);
    for (path, status, ty) in [
        ("/console", 200, "text/html"),
        ("/console/", 200, "text/html"),
        ("/console/console.js", 200, "text/javascript"),
        ("/console/metrics.js", 200, "text/javascript"),
        ("/console/tenants.js", 200, "text/javascript"),
        ("/console/tenant.js", 200, "text/javascript"),
        ("/console/console.css", 200, "text/css"),
        ("/console/nope.js", 404, "application/json"),
        ("/console/console.js/x", 404, "application/json"),
        ("/console/%2e%2e/metrics", 404, "application/json"),
        ("/console/..%2fmetrics", 404, "application/json"),
    ] {
        let r = s.req("GET", path, "");
        assert_eq!(r.status, status, "{path}");
        assert!(
            r.header("content-type").is_some_and(|t| t.starts_with(ty)),
            "{path}"
        );
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{path}");
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{path}");
        assert!(r.header("set-cookie").is_none(), "{path}");
    }
    let r = s.req("POST", "/console", "x");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET")));
    // The page needs no token; what it reads does.
    assert_eq!(s.req("GET", "/metrics", "").status, 401);
}

#[test]
fn the_page_reads_percentiles_from_the_exposition() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/console_metrics.js");
    let out = Command::new("node")
        .arg(&script)
        .output()
        .expect("run node: scripts/test installs it");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where chromium and chromedriver are, or `None` (the browser test is then skipped).
fn browser() -> Option<()> {
    let found = |p: &str| Path::new(p).exists();
    (found("/usr/bin/chromium") && found("/usr/bin/chromedriver")).then_some(())
}

/// Runs `tests/clients/{script}` against `s` (it prints a line a step, and exits 1 with what
/// the page showed on a failed step); the test fails with what it said.
fn run_browser_script(script: &str, s: &Server) {
    let python = std::env::var("PUNCTUAL_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import selenium"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "{python} cannot import selenium: run the tests with scripts/test, which installs it"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let axe = root.join("target/test-npm/node_modules/axe-core/axe.min.js");
    let axe = std::env::var("PUNCTUAL_TEST_AXE").unwrap_or_else(|_| axe.display().to_string());
    let shots = root.join("target/console-screenshots");
    let base = format!("http://{}", s.addr);
    let out = Command::new(&python)
        .arg(root.join("tests/clients").join(script))
        .args([
            base.as_str(),
            &shots.to_string_lossy(),
            METRICS_TOKEN,
            "shop",
            SHOP_TOKEN,
            "other",
        ])
        .env("PUNCTUAL_TEST_AXE", axe)
        .output()
        .expect("run the browser script");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script} failed:\n{said}");
    eprintln!("{said}");
}

fn put(s: &Server, tenant: &str, token: &str, key: &str, body: serde_json::Value) {
    let auth = bearer(token);
    let r = s.req_h(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &[("authorization", &auth)],
        &body.to_string(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

fn dead_keys(s: &Server, tenant: &str, token: &str) -> Vec<String> {
    let auth = bearer(token);
    let r = s.req_h(
        "GET",
        &format!("/v1/dead/{tenant}"),
        &[("authorization", &auth)],
        "",
    );
    assert_eq!(r.status, 200);
    let letters = r.json()["dead"].as_array().cloned().unwrap_or_default();
    letters
        .iter()
        .filter_map(|l| l["key"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn an_operator_reads_the_overview_and_redrives_dead_letters_in_a_browser() {
    if browser().is_none() {
        eprintln!(
            "SKIPPED: /usr/bin/chromium or /usr/bin/chromedriver is missing \
             (apt-get install chromium chromium-driver; scripts/test --setup installs them)"
        );
        return;
    }

    // Deliveries fail (503) until the page re-drives them.
    let rx = Receiver::start(|_, _| Reply::status(503));
    let (s, _f) = server(&rx);
    let retry = json!({"max_attempts": 2, "base_delay_ms": 10, "max_delay_ms": 10});
    for key in ["order-1", "order-2", "order-3"] {
        let cb = json!({"delay_ms": 10, "callback": {"url": rx.url(key)}, "retry": retry});
        put(&s, "shop", SHOP_TOKEN, key, cb);
    }
    let cb = json!({"delay_ms": 10, "callback": {"url": rx.url("secret-1")}, "retry": retry});
    put(&s, "other", OTHER_TOKEN, "secret-1", cb);
    eventually("four dead letters", || {
        let n = dead_keys(&s, "shop", SHOP_TOKEN).len() + dead_keys(&s, "other", OTHER_TOKEN).len();
        (n == 4).then_some(())
    });
    rx.set_script(|_, _| Reply::status(200));

    run_browser_script("console_browser.py", &s);

    // What the page did, as the receiver and the API saw it: order-1 and order-2 delivered
    // once more each (with 200), order-3 discarded, the other tenant's letter untouched.
    let to = |got: &[receiver::Received], path: &str| got.iter().filter(|r| r.path == path).count();
    let got = rx.wait(Duration::from_secs(20), |got| {
        to(got, "/order-1") >= 3 && to(got, "/order-2") >= 3
    });
    assert_eq!((to(&got, "/order-1"), to(&got, "/order-2")), (3, 3));
    assert_eq!(
        rx.to("/order-3").len(),
        2,
        "a discarded letter is not delivered"
    );
    assert!(dead_keys(&s, "shop", SHOP_TOKEN).is_empty());
    assert_eq!(dead_keys(&s, "other", OTHER_TOKEN), ["secret-1"]);
}

#[test]
fn an_operator_reads_every_tenant_and_a_tenant_only_its_own_in_a_browser() {
    if browser().is_none() {
        eprintln!("SKIPPED: /usr/bin/chromium or /usr/bin/chromedriver is missing");
        return;
    }
    // Deliveries to /fail-* fail (a dead letter and a 5xx refusal on the Tenants page); the
    // others are answered 200.
    let rx = Receiver::start(|r, _| {
        Reply::status(if r.path.starts_with("/fail") {
            503
        } else {
            200
        })
    });
    let (s, _f) = server(&rx);
    for n in 1..=120 {
        put(
            &s,
            "shop",
            SHOP_TOKEN,
            &format!("cart-{n:03}"),
            json!({"delay_ms": 3_600_000}),
        );
    }
    let retry = json!({"max_attempts": 1});
    for key in ["paid-1", "paid-2", "fail-1"] {
        let cb = json!({"delay_ms": 10, "callback": {"url": rx.url(key)}, "retry": retry});
        put(&s, "shop", SHOP_TOKEN, key, cb);
    }
    // No callback: it goes to shop's queue.
    put(&s, "shop", SHOP_TOKEN, "queued-1", json!({"delay_ms": 10}));
    put(
        &s,
        "other",
        OTHER_TOKEN,
        "secret-1",
        json!({"delay_ms": 3_600_000}),
    );
    let auth = bearer(SHOP_TOKEN);
    let r = s.req_h(
        "PUT",
        "/v1/schedules/shop/nightly",
        &[("authorization", &auth)],
        &json!({"cron": "30 2 * * *", "time_zone": "Europe/London"}).to_string(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    eventually("fail-1 a dead letter", || {
        (dead_keys(&s, "shop", SHOP_TOKEN) == ["fail-1"]).then_some(())
    });
    rx.wait(Duration::from_secs(20), |got| got.len() >= 3);

    run_browser_script("console_tenants.py", &s);

    // The pages only read: every timer is still pending, the letter still dead.
    let r = s.req_h(
        "GET",
        "/v1/timers/shop?prefix=cart-&limit=1000",
        &[("authorization", &auth)],
        "",
    );
    assert_eq!(r.json()["timers"].as_array().map(Vec::len), Some(120));
    assert_eq!(dead_keys(&s, "shop", SHOP_TOKEN), ["fail-1"]);
}
