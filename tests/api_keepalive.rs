//! Early answers on a keep-alive connection: an answer given before the request's body was
//! read (401, 404, 405, 408, 413, 429, 431, 503) either leaves the connection usable (the
//! server reads and discards the body, up to the route's body limit) or says
//! `Connection: close` before closing it. A pooled client (Python's `http.client`, Go's
//! `net/http` for a PUT) reports a connection closed without notice as an error, not as a
//! reason to retry.
//!
//! Each request's body is sent a moment after its head, as a client that writes the head and
//! the body separately does, so that the answer is ready before the body arrives.

mod api_support;
use api_support::{read_response, Resp, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// What became of the connection after an early answer.
#[derive(Debug, PartialEq)]
enum After {
    /// A second request on it was answered.
    Kept,
    /// The answer said `Connection: close`, and the server closed it.
    ClosedWithNotice,
}

/// Sends `head` (without its blank line: the `content-length` of `body` is added), then
/// `body` after a pause, reads the answer, and finds out what became of the connection.
fn early(s: &Server, head: &str, body: &[u8]) -> (Resp, After) {
    early_after(s, head, body, Duration::from_millis(150))
}

/// [`early`], with the body sent `pause` after the head.
fn early_after(s: &Server, head: &str, body: &[u8], pause: Duration) -> (Resp, After) {
    let mut c = s.connect();
    let head = format!("{head}\r\ncontent-length: {}\r\n\r\n", body.len());
    c.write_all(head.as_bytes()).expect("write the head");
    std::thread::sleep(pause);
    // The server may have closed already: a write that fails is what the check below sees.
    let _ = c.write_all(body);
    let r = read_response(&mut c).expect("an answer");
    let kept = after(&mut c, &r);
    (r, kept)
}

fn says_close(r: &Resp) -> bool {
    r.header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"))
}

/// After the answer `r` on `c`: a connection the answer let live must answer another request
/// (one for no route: `404` whatever the store's state); one it said it closes must be
/// closed, with nothing more on it.
fn after(c: &mut TcpStream, r: &Resp) -> After {
    if says_close(r) {
        let mut rest = Vec::new();
        c.set_read_timeout(Some(Duration::from_secs(5))).ok();
        match c.read_to_end(&mut rest) {
            Ok(_) => assert!(rest.is_empty(), "bytes after a closing answer: {rest:?}"),
            Err(e) => assert!(
                e.kind() == std::io::ErrorKind::ConnectionReset,
                "the server did not close after `Connection: close`: {e}"
            ),
        }
        return After::ClosedWithNotice;
    }
    let next = c
        .write_all(b"GET /nothing HTTP/1.1\r\nhost: x\r\n\r\n")
        .and_then(|()| read_response(c));
    match next {
        Ok(n) if n.status == 404 => After::Kept,
        other => panic!(
            "the answer {} kept the connection open (no `Connection: close`), but the next \
             request on it failed: {other:?}",
            r.status
        ),
    }
}

const PUT: &str = "PUT /v1/timers/t/k HTTP/1.1\r\nhost: x\r\ncontent-type: application/json";
const BODY: &[u8] = br#"{"delay_ms": 600000, "payload": {"order": 8812}}"#;

fn configured(toml: &str, args: &[&str]) -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(toml.as_bytes()).expect("write");
    let path = f.path().to_str().expect("utf-8 path").to_string();
    let mut all = vec!["--config", path.as_str()];
    all.extend_from_slice(args);
    (Server::start(&all), f)
}

#[test]
fn a_401_keeps_the_connection() {
    let toml = "[tenants.locked]\ntoken = \"s3cret-0123456789abcdef0123456789\"\n";
    let (s, _f) = configured(toml, &[]);
    let head = "PUT /v1/timers/locked/k HTTP/1.1\r\nhost: x";
    let (r, after) = early(&s, head, BODY);
    assert_eq!((r.status, r.code().as_str()), (401, "unauthorized"));
    assert_eq!(after, After::Kept);
    let (r, after) = early(&s, "PUT /v1/timers/stranger/k HTTP/1.1\r\nhost: x", BODY);
    assert_eq!((r.status, r.code().as_str()), (401, "unknown_tenant"));
    assert_eq!(after, After::Kept);
}

#[test]
fn a_404_keeps_the_connection() {
    let s = Server::start(&[]);
    let (r, after) = early(&s, "PUT /v2/nothing HTTP/1.1\r\nhost: x", BODY);
    assert_eq!((r.status, r.code().as_str()), (404, "not_found"));
    assert_eq!(after, After::Kept);
}

#[test]
fn a_405_keeps_the_connection() {
    let s = Server::start(&[]);
    let (r, after) = early(&s, "PATCH /v1/timers/t/k HTTP/1.1\r\nhost: x", BODY);
    assert_eq!((r.status, r.code().as_str()), (405, "method_not_allowed"));
    assert_eq!(after, After::Kept);
    let (r, after) = early(&s, "PUT /v1/timers/t HTTP/1.1\r\nhost: x", BODY);
    assert_eq!((r.status, r.code().as_str()), (405, "method_not_allowed"));
    assert_eq!(after, After::Kept);
}

/// A body slower than `body_timeout_ms` cannot be waited for again: the 408 says close.
#[test]
fn a_408_says_close() {
    let s = Server::start(&["--body-timeout-ms", "100"]);
    let mut c = s.connect();
    c.write_all(format!("{PUT}\r\ncontent-length: 100\r\n\r\n{{").as_bytes())
        .expect("write");
    let r = read_response(&mut c).expect("an answer");
    assert_eq!((r.status, r.code().as_str()), (408, "request_timeout"));
    assert_eq!(after(&mut c, &r), After::ClosedWithNotice);
}

/// A body declared or found over its limit is not read to its end: the 413 says close. A
/// payload over its own limit inside a body within the body limit was read whole: the
/// connection stays.
#[test]
fn a_413_says_close_when_the_body_is_left_unread() {
    let s = Server::start(&["--max-body-bytes", "4096"]);
    let big = format!(r#"{{"delay_ms":1,"payload":"{}"}}"#, "x".repeat(5000));
    let (r, after) = early(&s, PUT, big.as_bytes());
    assert_eq!((r.status, r.code().as_str()), (413, "body_too_large"));
    assert_eq!(after, After::ClosedWithNotice);
    // Declared over the limit: answered before any of it is read.
    let mut c = s.connect();
    c.write_all(format!("{PUT}\r\ncontent-length: 999999999\r\n\r\n{{").as_bytes())
        .expect("write");
    let r = read_response(&mut c).expect("an answer");
    assert_eq!((r.status, r.code().as_str()), (413, "body_too_large"));
    assert_eq!(self::after(&mut c, &r), After::ClosedWithNotice);
    let s = Server::start(&[]);
    let over = format!(r#"{{"delay_ms":1,"payload":"{}"}}"#, "x".repeat(65_535));
    let (r, after) = early(&s, PUT, over.as_bytes());
    assert_eq!((r.status, r.code().as_str()), (413, "payload_too_large"));
    assert_eq!(after, After::Kept);
}

#[test]
fn a_429_keeps_the_connection() {
    let toml =
        "[tenants.t]\nmax_requests_per_s = 1\nburst = 1\n[tenants.capped]\nmax_pending = 1\n";
    let (s, _f) = configured(toml, &[]);
    let mut limited = None;
    for _ in 0..20 {
        let (r, after) = early(&s, PUT, BODY);
        assert_eq!(after, After::Kept, "{}", r.status);
        if r.status == 429 {
            limited = Some(r.code());
            break;
        }
    }
    assert_eq!(limited.as_deref(), Some("rate_limited"));
    // The quota is the shard's to check, after the body was read: the connection stays too.
    let capped = "PUT /v1/timers/capped/a HTTP/1.1\r\nhost: x";
    assert_eq!(early(&s, capped, BODY).0.status, 201);
    let capped = "PUT /v1/timers/capped/b HTTP/1.1\r\nhost: x";
    let (r, after) = early(&s, capped, BODY);
    assert_eq!((r.status, r.code().as_str()), (429, "quota_exceeded"));
    assert_eq!(after, After::Kept);
}

/// A head over `max_header_bytes` was not read whole: the 431 says close.
#[test]
fn a_431_says_close() {
    let s = Server::start(&["--max-header-bytes", "8192"]);
    let head = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}",
        "a".repeat(20_000)
    );
    let (r, after) = early(&s, &head, b"");
    assert_eq!(r.status, 431);
    assert_eq!(after, After::ClosedWithNotice);
}

/// A request that is not HTTP: hyper's own 400 says close.
#[test]
fn a_400_for_a_request_that_is_not_http_says_close() {
    let s = Server::start(&[]);
    let mut c = s.connect();
    c.write_all(b"HELLO\r\n\r\n").expect("write");
    let r = read_response(&mut c).expect("an answer");
    assert_eq!(r.status, 400);
    assert_eq!(after(&mut c, &r), After::ClosedWithNotice);
}

/// A store that is down: a GET with a body (which the route ignores) is answered 503 after the
/// store's acknowledgement timeout (2 s; the body is sent after it), and the connection stays. Past the connection cap, the
/// 503 says close.
#[test]
fn a_503_keeps_the_connection_or_says_close() {
    let url = format!("redis://127.0.0.1:{}/", api_support::free_port());
    let s = Server::start_unhealthy(&["--redis", &url, "--shards", "1"]);
    let head = "GET /v1/timers/t/k HTTP/1.1\r\nhost: x";
    let (r, after) = early_after(&s, head, BODY, Duration::from_millis(2500));
    assert_eq!((r.status, r.code().as_str()), (503, "store_unavailable"));
    assert_eq!(after, After::Kept);
    let s = Server::start(&["--max-connections", "1", "--shards", "1"]);
    let _held = s.held();
    let (r, after) = early(&s, PUT, BODY);
    assert_eq!((r.status, r.code().as_str()), (503, "too_many_connections"));
    assert_eq!(after, After::ClosedWithNotice);
}

/// One connection, a tenant at 5 requests a second, 300 quick PUTs, each written as Python's `http.client` writes it (the head, then the body): every one
/// is answered, 201 or 429, none is a broken pipe.
#[test]
fn quick_puts_through_the_rate_limit_on_one_connection_all_get_answers() {
    let toml = "[tenants.acme]\nmax_requests_per_s = 5\nburst = 5\n";
    let (s, _f) = configured(toml, &["--shards", "2"]);
    let mut c = s.connect();
    let mut statuses = std::collections::BTreeMap::new();
    for i in 0..300 {
        let head = format!(
            "PUT /v1/timers/acme/k{i} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
            BODY.len()
        );
        c.write_all(head.as_bytes())
            .and_then(|()| c.write_all(BODY))
            .expect("write: the connection was closed");
        let r = read_response(&mut c).expect("an answer on the same connection");
        assert!(!says_close(&r), "{i}: {r:?}");
        *statuses.entry(r.status).or_insert(0) += 1;
    }
    assert!(statuses.get(&429).is_some_and(|&n| n > 0), "{statuses:?}");
    assert_eq!(statuses.keys().copied().collect::<Vec<_>>(), [201, 429]);
}
