//! Where deliveries may go, through the real binary and a real receiver: a name that resolves
//! to an internal address is refused at connect time unless the operator opened its network,
//! path tricks are refused at registration, errors shown to a tenant name a class and no
//! internal address, and a receiver's 401 is retried a bounded number of times.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::Server;
use receiver::{Receiver, Reply};
use serde_json::{json, Value};
use std::io::Write;
use std::time::{Duration, Instant};

fn start(toml: &str) -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(toml.as_bytes()).expect("write config");
    let path = f.path().to_string_lossy().into_owned();
    (Server::start(&["--store", "memory", "--config", &path]), f)
}

fn put(s: &Server, tenant: &str, key: &str, body: Value) -> (u16, Value) {
    s.json(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &body.to_string(),
    )
}

/// The tenant's dead letters once there are `n`, waiting at most 20 s.
fn dead_letters(s: &Server, tenant: &str, n: usize) -> Vec<Value> {
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        let (st, body) = s.json("GET", &format!("/v1/dead/{tenant}"), "");
        assert_eq!(st, 200, "{body}");
        let dead = body["dead"].as_array().cloned().unwrap_or_default();
        if dead.len() >= n {
            return dead;
        }
        assert!(Instant::now() < give_up, "never {n} dead letters: {dead:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_allow_listed_name_resolving_to_loopback_is_refused_until_its_network_is_listed() {
    let rx = Receiver::ok();
    let port = rx.addr.port();
    let by_name = format!("http://localhost:{port}/");
    let (s, _f) = start(&format!("callback_allow = [\"{by_name}\"]\n"));
    let (st, r) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 1, "callback": {"url": format!("{by_name}hook")}}),
    );
    assert_eq!(st, 201, "{r}");
    let dead = dead_letters(&s, "t", 1);
    assert_eq!(dead[0]["last_error"], "address_not_allowed", "{dead:?}");
    assert_eq!(dead[0]["attempts"], 1, "permanent: no retry");
    assert!(rx.received().is_empty(), "nothing reached the receiver");

    // The operator opens loopback: the same callback is delivered.
    let (open, _g) = start(&format!(
        "callback_allow = [\"{by_name}\"]\ncallback_allow_networks = [\"127.0.0.1/32\", \"::1\"]\n"
    ));
    let (st, r) = put(
        &open,
        "t",
        "k",
        json!({"delay_ms": 1, "callback": {"url": format!("{by_name}hook")}}),
    );
    assert_eq!(st, 201, "{r}");
    let got = rx.wait(Duration::from_secs(20), |r| !r.is_empty());
    assert_eq!(got.len(), 1, "delivered once its network is listed");
    assert_eq!(got[0].path, "/hook");
}

#[test]
fn path_tricks_are_refused_at_registration() {
    let rx = Receiver::ok();
    let (s, _f) = start(&format!("callback_allow = [\"{}acme/\"]\n", rx.base()));
    for url in [
        format!("{}acme/../beta/hook", rx.base()),
        format!("{}acme/%2e%2e/beta/hook", rx.base()),
        format!("{}acme/.%2E/beta/hook", rx.base()),
        format!("{}acme\\..\\beta", rx.base()),
        // What a server in front of the receiver may turn into `..` and `/` (nginx decodes
        // `%2F` before it resolves dot segments; Tomcat and Spring read `..;` as `..`).
        format!("{}acme/..%2Fbeta/hook", rx.base()),
        format!("{}acme/%2e%2e%2fbeta/hook", rx.base()),
        format!("{}acme/..;/beta/hook", rx.base()),
        format!("{}acme/..%252Fbeta/hook", rx.base()),
    ] {
        let (st, r) = put(
            &s,
            "t",
            "k",
            json!({"delay_ms": 1, "callback": {"url": url}}),
        );
        assert_eq!(st, 400, "{url}: {r}");
    }
    let (st, r) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 600000, "callback": {"url": format!("{}ACME/x", rx.base())}}),
    );
    assert_eq!(
        (st, r["error"]["code"].as_str()),
        (400, Some("callback_not_allowed")),
        "{r}"
    );
    let (st, _) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 600000, "callback": {"url": format!("{}acme/x", rx.base())}}),
    );
    assert_eq!(st, 201);
}

#[test]
fn a_tenant_sees_an_error_class_never_an_internal_address() {
    // A port nobody listens on, on an allowed literal address: connection refused. Held
    // bound for the test: a port found free and let go was once taken by another test's
    // receiver, which answered 404.
    let (_held, closed) = api_support::refused_port();
    let base = format!("http://127.0.0.1:{closed}/");
    let (s, _f) = start(&format!("callback_allow = [\"{base}\"]\n"));
    let (st, _) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 1, "callback": {"url": format!("{base}x")},
               "retry": {"max_attempts": 1}}),
    );
    assert_eq!(st, 201);
    let dead = dead_letters(&s, "t", 1);
    let err = dead[0]["last_error"].as_str().unwrap_or("").to_string();
    assert_eq!(err, "connect", "{dead:?}");
    let text = dead[0].to_string();
    assert!(
        !text.contains("os error") && !text.contains(&format!(":{closed} ")),
        "{text}"
    );
}

#[test]
fn a_receivers_401_is_retried_a_bounded_number_of_times_then_dead() {
    let rx = Receiver::start(|_, _| Reply::status(401));
    let (s, _f) = start(&format!("callback_allow = [\"{}\"]\n", rx.base()));
    let (st, _) = put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 1, "callback": {"url": rx.url("hook")},
               "retry": {"max_attempts": 10, "base_delay_ms": 10, "max_delay_ms": 20}}),
    );
    assert_eq!(st, 201);
    let dead = dead_letters(&s, "t", 1);
    assert_eq!(dead[0]["last_status"], 401);
    assert_eq!(dead[0]["attempts"], 3, "{dead:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rx.received().len(), 3, "three attempts, no more");
}

/// One request as the closing receiver saw it: (connection number, `Punctual-Attempt`, path).
type Seen1 = (usize, String, String);

/// A receiver whose every connection answers its first request 200 and closes on its second
/// without answering, as a server does that closed a kept-alive connection just as a request
/// arrived.
fn closing_receiver() -> Receiver {
    Receiver::start(|req, earlier| {
        if earlier.iter().any(|e| e.conn == req.conn) {
            Reply::close()
        } else {
            Reply::status(200)
        }
    })
}

#[test]
fn a_kept_alive_connection_closed_under_a_request_is_replaced_within_the_attempt() {
    let rx = closing_receiver();
    let base = rx.base();
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(format!("callback_allow = [\"{base}\"]\n").as_bytes())
        .expect("write config");
    let path = f.path().to_string_lossy().into_owned();
    // One shard, so both deliveries share its pool.
    let s = Server::start(&["--store", "memory", "--shards", "1", "--config", &path]);
    let log = || -> Vec<Seen1> {
        rx.received()
            .iter()
            .map(|r| {
                let attempt = r.header("punctual-attempt").unwrap_or("").to_string();
                (r.conn, attempt, r.path.clone())
            })
            .collect()
    };
    let wait_for = |what: &str, done: &dyn Fn(&[Seen1]) -> bool| {
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let l = log();
            if done(&l) {
                return l;
            }
            assert!(Instant::now() < give_up, "never {what}: {l:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let cb = |p: &str| json!({"delay_ms": 1, "callback": {"url": format!("{base}{p}")}});
    assert_eq!(put(&s, "t", "a", cb("a")).0, 201);
    wait_for("a delivered", &|l| l.len() == 1);
    // The receiver logs a request before it answers, and the connection is pooled once the
    // answer is read, before the delivery's outcome is written: a's timer leaving (404) says
    // the connection is kept.
    let give_up = Instant::now() + Duration::from_secs(20);
    while s.json("GET", "/v1/timers/t/a", "").0 != 404 {
        assert!(Instant::now() < give_up, "a's delivery never completed");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Within the pool's idle limit: the kept-alive connection is reused, and the receiver
    // closes it under the request.
    assert_eq!(put(&s, "t", "b", cb("b")).0, 201);
    let l = wait_for("b answered on a fresh connection", &|l| {
        l.iter().any(|(n, _, p)| p == "/b" && *n > 0)
    });
    assert!(
        l.iter().any(|(n, _, p)| *n == 0 && p == "/b"),
        "b went first to the kept-alive connection: {l:?}"
    );
    assert!(
        l.iter()
            .filter(|(_, _, p)| p == "/b")
            .all(|(_, a, _)| a == "1"),
        "the closed connection cost no attempt: {l:?}"
    );
    assert!(s.json("GET", "/v1/dead/t", "").1["dead"]
        .as_array()
        .is_some_and(|d| d.is_empty()));
}
