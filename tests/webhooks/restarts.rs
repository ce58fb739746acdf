//! Deliveries across a restart (Redis and the journal: retries resume, dead letters survive),
//! and the receivers users copy: the Python example, and HTTPS over rustls.

use super::*;

#[test]
fn retries_resume_after_a_restart_with_redis_and_dead_letters_survive_it() {
    let redis = redis_server::RedisServer::start();
    let rx = Receiver::start(|r, _| Reply::status(if r.path == "/gone" { 410 } else { 500 }));
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let url = redis.url();
    let mut s = start(&toml, &["--redis", &url]);
    let (st, r) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "payload": {"n": 1}, "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 10, "base_delay_ms": 300, "max_delay_ms": 300}}),
    );
    assert_eq!(st, 201);
    let version = r["version"].as_u64();
    put(
        &s,
        "t",
        "dead",
        json!({"delay_ms": 10, "callback": {"url": rx.url("gone")}}),
    );
    eventually("a dead letter", || (dead(&s, "t").len() == 1).then_some(()));
    rx.wait(LONG, |_| rx.to("/h").len() >= 2);
    // The stream entry was written once, at the timer's own firing.
    let mut con = redis.client().expect("redis client");
    let entries = redis_server::read_stream(&mut con, "t");
    assert_eq!(
        entries.iter().filter(|e| e.key == "k").count(),
        1,
        "{entries:?}"
    );
    // Killed in the middle of the retries.
    let _ = s.s.child.kill();
    let _ = s.s.child.wait();
    let attempts_before = rx.to("/h").len();
    rx.set_script(|_, _| Reply::status(200));
    s = start(&toml, &["--redis", &url]);
    let got = rx.wait(LONG, |_| rx.to("/h").len() > attempts_before);
    let resumed: Vec<_> = got
        .iter()
        .filter(|r| r.path == "/h")
        .skip(attempts_before)
        .collect();
    assert!(!resumed.is_empty(), "no retry after the restart");
    let body = resumed[0].json();
    assert_eq!(
        body["version"].as_u64(),
        version,
        "same version, same Idempotency-Key"
    );
    assert!(body["attempt"].as_u64() >= Some(attempts_before as u64));
    assert_eq!(body["payload"], json!({"n": 1}));
    eventually("the delivered timer leaves", || {
        (s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    // Its record left Redis; the dead letter came back with the restart, and is in its stream.
    eventually("the record leaves Redis", || {
        let n: i64 = redis::cmd("EVAL")
            .arg("local n = 0 for _, k in ipairs(redis.call('KEYS', 'punctual:*:timers')) do n = n + redis.call('HLEN', k) end return n")
            .arg(0)
            .query(&mut con)
            .unwrap_or(-1);
        (n == 0).then_some(())
    });
    let letters = dead(&s, "t");
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (
            letters[0]["key"].as_str(),
            letters[0]["last_status"].as_u64()
        ),
        (Some("dead"), Some(410))
    );
    let dead_stream: redis::Value = redis::cmd("XRANGE")
        .arg("punctual:dead:{t}")
        .arg("-")
        .arg("+")
        .query(&mut con)
        .expect("XRANGE");
    assert!(
        matches!(&dead_stream, redis::Value::Array(v) if v.len() == 1),
        "{dead_stream:?}"
    );
    assert_eq!(s.req("DELETE", "/v1/dead/t/dead", "").status, 204);
}

#[test]
fn the_python_receiver_example_verifies_signatures_and_dedupes() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let port = api_support::free_port();
    let mut py = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/webhook_receiver.py"
        ))
        .arg(format!("127.0.0.1:{port}"))
        .env(
            "PUNCTUAL_WEBHOOK_SECRET",
            "s3cret-0123456789abcdef0123456789",
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    eventually("the Python receiver listens", || {
        std::net::TcpStream::connect(addr).ok()
    });
    let s = start(
        &format!(
            "callback_allow = [\"http://{addr}/\"]\nopen_tenants = true\n[tenants.good]\nwebhook_secret = \"s3cret-0123456789abcdef0123456789\"\n[tenants.bad]\nwebhook_secret = \"wrong-0123456789abcdef0123456789ab\"\n"
        ),
        &[],
    );
    let cb = json!({"url": format!("http://{addr}/hook")});
    let (_, r) = put(
        &s,
        "good",
        "k1",
        json!({"delay_ms": 10, "payload": {"x": 1}, "callback": cb}),
    );
    let version = r["version"].as_u64().expect("version");
    put(
        &s,
        "bad",
        "k2",
        json!({"delay_ms": 10, "callback": cb,
        "retry": {"max_attempts": 1}}),
    );
    eventually("the good delivery is accepted", || {
        (s.req("GET", "/v1/timers/good/k1", "").status == 404).then_some(())
    });
    assert!(dead(&s, "good").is_empty());
    // A wrong signature is answered 401: with one attempt allowed, a dead letter at once.
    let letters = eventually("the badly signed delivery is dead", || {
        let d = dead(&s, "bad");
        (!d.is_empty()).then_some(d)
    });
    assert_eq!(letters[0]["last_status"], 401);
    // A repeat of the good delivery (same Idempotency-Key, a valid signature) is not processed
    // twice.
    let body = json!({"tenant": "good", "key": "k1", "version": version, "fire_at_us": 1,
        "fired_at_us": 1, "attempt": 2, "payload": {"x": 1}})
    .to_string();
    let sig = sign::signature(
        b"s3cret-0123456789abcdef0123456789",
        receiver::now_us() / 1_000_000,
        body.as_bytes(),
    );
    let idem = format!("good/k1/{version}");
    let r = api_support::request(
        addr,
        "POST",
        "/hook",
        &[
            ("Idempotency-Key", idem.as_str()),
            ("Punctual-Signature", sig.as_str()),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 204);
    let _ = py.kill();
    let _ = py.wait();
    let mut out = String::new();
    py.stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("output");
    assert_eq!(out.matches("timer good/k1").count(), 1, "{out}");
    assert!(out.contains(&format!("repeat of {idem}")), "{out}");
    assert!(!out.contains("bad/k2"), "{out}");
}

#[test]
fn an_https_callback_is_delivered_over_rustls_and_an_untrusted_certificate_is_refused() {
    let pki = receiver::test_pki();
    let rx = Receiver::start_tls(&pki, |_, _| Reply::status(200));
    let ca = config_file(&pki.ca_pem);
    let base = format!("https://localhost:{}/", rx.addr.port());
    let toml = |ca: Option<&std::path::Path>| {
        // localhost is loopback: the operator opens it for this receiver.
        let mut t = format!(
            "callback_allow = [{base:?}]\ncallback_allow_networks = [\"127.0.0.1/32\", \"::1/128\"]\n"
        );
        if let Some(p) = ca {
            t.push_str(&format!("webhook_ca_file = {:?}\n", p.to_string_lossy()));
        }
        t
    };
    let s = start(&toml(Some(ca.path())), &[]);
    let (st, _) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "payload": 7, "callback": {"url": format!("{base}tls")}}),
    );
    assert_eq!(st, 201);
    let got = rx.wait(LONG, |r| !r.is_empty());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].json()["payload"], 7);
    eventually("the delivered timer leaves", || {
        (s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    // Without the CA, the certificate does not verify: a connect failure, retried, then dead.
    let untrusting = start(&toml(None), &[]);
    put(
        &untrusting,
        "t",
        "k",
        json!({"delay_ms": 10, "callback": {"url": format!("{base}tls")},
        "retry": {"max_attempts": 2, "base_delay_ms": 10, "max_delay_ms": 10}}),
    );
    let letters = eventually("a dead letter", || {
        let d = dead(&untrusting, "t");
        (!d.is_empty()).then_some(d)
    });
    let err = letters[0]["last_error"].as_str().unwrap_or("").to_string();
    assert_eq!(err, "tls", "a class, the details in the operator's log");
    assert_eq!(
        rx.received().len(),
        1,
        "nothing reached the receiver without trust"
    );
}

/// The same with the journal: retries resume after SIGKILL, a dead letter survives two
/// restarts, and one re-driven before the second restart is delivered, not resurrected as a
/// dead letter or lost.
#[test]
fn retries_resume_after_a_restart_with_the_journal_and_dead_letters_survive_it() {
    let data = tempfile::tempdir().expect("data dir");
    let dir = data.path().to_string_lossy().into_owned();
    let rx = Receiver::start(|r, _| {
        Reply::status(if r.path.starts_with("/gone") {
            410
        } else {
            500
        })
    });
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let args = ["--store", "journal", "--data-dir", dir.as_str()];
    let mut s = start(&toml, &args);
    let (st, r) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "payload": {"n": 1}, "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 10, "base_delay_ms": 300, "max_delay_ms": 300}}),
    );
    assert_eq!(st, 201);
    let version = r["version"].as_u64();
    for key in ["dead-a", "dead-b"] {
        let (st, _) = put(
            &s,
            "t",
            key,
            json!({"delay_ms": 10, "callback": {"url": rx.url(&format!("gone-{key}"))}}),
        );
        assert_eq!(st, 201);
    }
    eventually("two dead letters", || {
        (dead(&s, "t").len() == 2).then_some(())
    });
    rx.wait(LONG, |_| rx.to("/h").len() >= 2);
    let _ = s.s.child.kill(); // SIGKILL in the middle of the retries
    let _ = s.s.child.wait();
    let attempts_before = rx.to("/h").len();
    rx.set_script(|_, _| Reply::status(200));
    s = start(&toml, &args);
    let got = rx.wait(LONG, |_| rx.to("/h").len() > attempts_before);
    let resumed: Vec<_> = got
        .iter()
        .filter(|r| r.path == "/h")
        .skip(attempts_before)
        .collect();
    assert!(!resumed.is_empty(), "no retry after the restart");
    assert_eq!(resumed[0].json()["version"].as_u64(), version);
    eventually("the delivered timer leaves", || {
        (s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    assert_eq!(dead(&s, "t").len(), 2, "both dead letters came back");
    // Re-drive one (the receiver now answers 200), then restart again.
    assert_eq!(s.req("POST", "/v1/dead/t/dead-a/retry", "").status, 202);
    rx.wait(LONG, |_| !rx.to("/gone-dead-a").is_empty());
    eventually("the re-driven timer is delivered and leaves", || {
        (s.req("GET", "/v1/timers/t/dead-a", "").status == 404).then_some(())
    });
    let _ = s.s.child.kill();
    let _ = s.s.child.wait();
    let s = start(&toml, &args);
    let letters = dead(&s, "t");
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["key"].as_str(), Some("dead-b"));
    // The removal after a delivery is written like a cancel, without a caller waiting for it,
    // so a kill right after the delivery may come before it is durable: then the timer is
    // delivered again after the restart (at least once) and leaves. It never becomes a dead
    // letter again, and it never stays.
    eventually("the re-driven timer stays delivered", || {
        (s.req("GET", "/v1/timers/t/dead-a", "").status == 404).then_some(())
    });
    assert_eq!(dead(&s, "t").len(), 1);
    assert_eq!(s.req("DELETE", "/v1/dead/t/dead-b", "").status, 204);
}
