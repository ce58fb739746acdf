//! Delivery signatures through the real binary and a real receiver: a key rotation signs
//! with every configured secret, and the Standard Webhooks scheme verifies with the Standard
//! Webhooks project's own libraries, its Rust crate and its Python package.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::Server;
use punctual::sink::webhook::sign;
use receiver::Receiver;
use serde_json::json;
use std::io::Write;
use std::time::Duration;

const NEW: &str = "rotation-new-0123456789abcdef0123456789";
const OLD: &str = "rotation-old-0123456789abcdef0123456789";
const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const WHSEC_OLD: &str = "whsec_dGhpcy1pcy10aGUtb2xkLWtleS0wMTIzNDU2Nzg5";

fn start(toml: &str) -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(toml.as_bytes()).expect("write config");
    let path = f.path().to_string_lossy().into_owned();
    (Server::start(&["--store", "memory", "--config", &path]), f)
}

/// Schedules `tenant/key` to fire now with a callback to `rx`; the delivery it makes.
fn deliver(s: &Server, rx: &Receiver, tenant: &str, key: &str) -> receiver::Received {
    let body = json!({"delay_ms": 1, "payload": {"n": 1}, "callback": {"url": rx.url("hook")}});
    let (st, r) = s.json(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &body.to_string(),
    );
    assert_eq!(st, 201, "{r}");
    let got = rx.wait(Duration::from_secs(20), |r| {
        r.iter().any(|d| d.json()["key"] == key)
    });
    got.into_iter()
        .find(|d| d.json()["key"] == key)
        .expect("delivered")
}

#[test]
fn a_rotation_signs_with_every_secret_and_either_verifies() {
    let rx = Receiver::ok();
    let (s, _f) = start(&format!(
        "callback_allow = [{:?}]\n[tenants.roll]\nwebhook_secrets = [\"{NEW}\", \"{OLD}\"]\n",
        rx.base()
    ));
    let d = deliver(&s, &rx, "roll", "k1");
    let sig = d.header("punctual-signature").expect("signed");
    let now_s = receiver::now_us() / 1_000_000;
    assert_eq!(sig.matches(",v1=").count(), 2, "{sig}");
    for secret in [NEW, OLD] {
        assert_eq!(
            sign::verify(secret.as_bytes(), sig, &d.body, now_s, 300),
            Ok(()),
            "{secret}"
        );
    }
    assert!(sign::verify(
        b"rotation-gone-0123456789abcdef012345678",
        sig,
        &d.body,
        now_s,
        300
    )
    .is_err());
    assert!(
        d.header("webhook-signature").is_none(),
        "one scheme at a time"
    );
}

#[test]
fn standard_webhooks_deliveries_verify_with_the_standard_library() {
    let rx = Receiver::ok();
    let (s, _f) = start(&format!(
        "callback_allow = [{:?}]\n[tenants.std]\nwebhook_signature = \"standard\"\nwebhook_secrets = [\"{WHSEC}\", \"{WHSEC_OLD}\"]\n",
        rx.base()
    ));
    let d = deliver(&s, &rx, "std", "k1");
    let mut headers = hyper::HeaderMap::new();
    for (k, v) in &d.headers {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(k.as_bytes()),
            hyper::header::HeaderValue::from_str(v),
        ) {
            headers.insert(name, value);
        }
    }
    for secret in [WHSEC, WHSEC_OLD] {
        let wh = standardwebhooks::Webhook::new(secret).expect("a valid secret");
        assert!(
            wh.verify(&d.body, &headers).is_ok(),
            "{secret}: {headers:?}"
        );
        let mut tampered = d.body.clone();
        tampered.push(b' ');
        assert!(wh.verify(&tampered, &headers).is_err());
    }
    // The message id is the delivery's idempotency key: the same across retries.
    assert_eq!(d.header("webhook-id"), d.header("idempotency-key"));
    assert!(d.header("punctual-signature").is_none());
}

/// The same deliveries verify with the Standard Webhooks project's Python library
/// (`standardwebhooks` on PyPI), as a receiver written in Python checks them; a body changed
/// by one byte does not. `scripts/test` installs the library (`PUNCTUAL_TEST_PYTHON`).
#[test]
fn standard_webhooks_deliveries_verify_with_the_python_library() {
    let python = std::env::var("PUNCTUAL_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let rx = Receiver::ok();
    let (s, _f) = start(&format!(
        "callback_allow = [{:?}]\n[tenants.std]\nwebhook_signature = \"standard\"\nwebhook_secrets = [\"{WHSEC}\", \"{WHSEC_OLD}\"]\n",
        rx.base()
    ));
    let d = deliver(&s, &rx, "std", "k1");
    let headers: serde_json::Map<String, serde_json::Value> = d
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), json!(v)))
        .collect();
    let mut body = tempfile::NamedTempFile::new().expect("temp file");
    body.write_all(&d.body).expect("write the body");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/standard_webhooks_verify.py"
    );
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(serde_json::Value::Object(headers).to_string())
        .arg(body.path())
        .args([WHSEC, WHSEC_OLD])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} ({e}): run the tests with scripts/test"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the Python library refused the delivery (or is missing: scripts/test installs it):\n{stdout}{stderr}"
    );
    assert_eq!(
        stdout.matches("verified, tampered refused").count(),
        2,
        "{stdout}"
    );
}

#[test]
fn a_bad_signing_configuration_is_refused_at_start_naming_the_key() {
    for (toml, key) in [
        (
            format!("[tenants.a]\nwebhook_signature = \"standard\"\nwebhook_secret = \"{NEW}\"\n"),
            "tenants.a.webhook_secret",
        ),
        (
            format!("[tenants.a]\nwebhook_secret = \"{NEW}\"\nwebhook_secrets = [\"{OLD}\"]\n"),
            "tenants.a.webhook_secrets",
        ),
        (
            "[tenants.a]\nwebhook_signature = \"hmac\"\n".to_string(),
            "tenants.a.webhook_signature",
        ),
    ] {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(toml.as_bytes()).expect("write config");
        let path = f.path().to_string_lossy().into_owned();
        let (status, err) = Server::refused(&["--store", "memory", "--config", &path]);
        assert!(!status.success(), "{toml}");
        assert!(err.contains(key), "{toml}: {err}");
        assert!(
            !err.contains(NEW) && !err.contains(OLD),
            "no secret echoed: {err}"
        );
    }
}
