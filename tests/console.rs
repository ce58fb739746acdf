//! The operator console (`/console`): its files and headers over HTTP, and the page itself
//! driven in a real browser (Debian's chromium through chromedriver, by
//! `tests/clients/console_browser.py` with selenium from `scripts/test`) against the real
//! binary and a real webhook receiver: the overview, dead letters listed, re-driven and
//! discarded, and a tenant's token refused another tenant's letters by the API. Screenshots
//! at 1280×800 go to `target/console-screenshots/`.

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

/// `punctual serve` with a metrics token, two tenants with tokens, and callbacks allowed to
/// `rx`.
fn server(rx: &Receiver) -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    write!(
        f,
        "metrics_token = {METRICS_TOKEN:?}\ncallback_allow = [{:?}]\n\
         [tenants.shop]\ntoken = {SHOP_TOKEN:?}\n[tenants.other]\ntoken = {OTHER_TOKEN:?}\n",
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
    let python = std::env::var("PUNCTUAL_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import selenium"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "{python} cannot import selenium: run the tests with scripts/test, which installs it"
    );

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

    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/console_browser.py");
    let base = format!("http://{}", s.addr);
    let shots = shots.to_string_lossy();
    let out = Command::new(&python)
        .arg(&script)
        .args([
            base.as_str(),
            &shots,
            METRICS_TOKEN,
            "shop",
            SHOP_TOKEN,
            "other",
        ])
        .output()
        .expect("run the browser script");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the console script failed:\n{said}");
    eprintln!("{said}");

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
