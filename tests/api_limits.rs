//! Connection-level limits and malformed requests: oversized heads, slow senders, idle
//! connections, the connection cap, truncated and garbage requests. Each gets an answer when
//! one can be sent, and the server stays healthy.

mod api_support;
use api_support::{raw_exchange, read_response, Server};
use std::io::{Read, Write};

fn healthy(s: &Server) {
    assert_eq!(s.req("GET", "/healthz", "").status, 200);
}

/// Reads until the server closes the connection; true if it did (EOF or reset).
fn closed_by_server(stream: &mut std::net::TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn an_oversized_request_head_is_431() {
    let s = Server::start(&["--max-header-bytes", "8192"]);
    let req = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let r = raw_exchange(s.addr, req.as_bytes()).expect("an answer");
    assert_eq!(r.status, 431);
    healthy(&s);
}

#[test]
fn garbage_and_truncated_requests_get_400_or_a_clean_close() {
    let s = Server::start(&[]);
    let r = raw_exchange(s.addr, b"HELLO\r\n\r\n").expect("an answer");
    assert_eq!(r.status, 400);
    let r = raw_exchange(
        s.addr,
        b"PUT /v1/timers/t/k HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n",
    )
    .expect("an answer");
    assert_eq!(r.status, 400);
    // A body shorter than declared, then the client closes its side: no answer is possible
    // for a request that never finished, but nothing breaks.
    let mut c = s.connect();
    c.write_all(b"PUT /v1/timers/t/k HTTP/1.1\r\nhost: x\r\ncontent-length: 50\r\n\r\n{\"delay")
        .expect("write");
    c.shutdown(std::net::Shutdown::Write).expect("shutdown");
    assert!(closed_by_server(&mut c));
    // A complete request whose JSON is cut short.
    let r = raw_exchange(
        s.addr,
        b"PUT /v1/timers/t/k HTTP/1.1\r\nhost: x\r\ncontent-length: 11\r\n\r\n{\"delay_ms\"",
    )
    .expect("an answer");
    assert_eq!((r.status, r.code().as_str()), (400, "malformed_json"));
    healthy(&s);
}

#[test]
fn a_slow_body_is_408() {
    let s = Server::start(&["--body-timeout-ms", "200"]);
    let mut c = s.connect();
    c.write_all(
        b"PUT /v1/timers/t/k HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"delay_ms\":",
    )
    .expect("write");
    let r = read_response(&mut c).expect("an answer");
    assert_eq!((r.status, r.code().as_str()), (408, "request_timeout"));
    healthy(&s);
}

#[test]
fn slow_headers_and_idle_keep_alive_connections_are_closed() {
    let s = Server::start(&["--idle-timeout-ms", "200"]);
    // Slowloris: a head that never completes.
    let mut slow = s.connect();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n")
        .expect("write");
    assert!(closed_by_server(&mut slow));
    // Idle after one request on a keep-alive connection.
    let mut idle = s.connect();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("write");
    assert_eq!(read_response(&mut idle).expect("answer").status, 200);
    assert!(closed_by_server(&mut idle));
    healthy(&s);
}

#[test]
fn connections_over_the_cap_get_503_and_the_rest_keep_working() {
    let s = Server::start(&["--max-connections", "2", "--shards", "1"]);
    let mut held: Vec<_> = (0..2).map(|_| s.held()).collect();
    let r = raw_exchange(s.addr, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").expect("an answer");
    assert_eq!(r.status, 503);
    assert_eq!(r.code(), "too_many_connections");
    assert_eq!(r.header("retry-after"), Some("1"));
    // The held connections still work; once they close, new ones are accepted.
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("write");
    assert_eq!(read_response(&mut held[0]).expect("answer").status, 200);
    drop(held);
    let mut status = 0;
    for _ in 0..500 {
        status = s.req("GET", "/healthz", "").status;
        if status == 200 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(status, 200);
}

/// A connection from `from` (an address of 127.0.0.0/8) to the server, with one request
/// answered on it.
fn held_from(s: &Server, from: [u8; 4]) -> (std::net::TcpStream, api_support::Resp) {
    let sock =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    let local = std::net::SocketAddr::from((from, 0));
    sock.bind(&local.into()).expect("bind a loopback address");
    sock.connect(&s.addr.into()).expect("connect");
    let mut c: std::net::TcpStream = sock.into();
    c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .ok();
    c.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("write");
    let r = read_response(&mut c).expect("an answer");
    (c, r)
}

/// [`held_from`] retried until it is answered 200: start-up's probes from 127.0.0.1 may still
/// hold their places until their close is done.
fn held_ok_from(s: &Server, from: [u8; 4]) -> std::net::TcpStream {
    for _ in 0..1000 {
        let (c, r) = held_from(s, from);
        if r.status == 200 {
            return c;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("no connection from {from:?} was served");
}

/// One address cannot take every connection: past `max_connections_per_address` its new
/// connections are answered 503 `too_many_connections` with `Retry-After` and closed, while
/// another address is still served; a network listed in
/// `max_connections_per_address_exempt` is not counted.
#[test]
fn one_address_holds_at_most_its_share_of_connections() {
    let s = Server::start(&["--max-connections-per-address", "2", "--shards", "2"]);
    let mut held: Vec<_> = (0..2).map(|_| held_ok_from(&s, [127, 0, 0, 1])).collect();
    let (_, r) = held_from(&s, [127, 0, 0, 1]);
    assert_eq!((r.status, r.code().as_str()), (503, "too_many_connections"));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("connection"), Some("close"));
    let (_other, r) = held_from(&s, [127, 0, 0, 2]);
    assert_eq!(r.status, 200, "another address is served");
    // A connection that closes gives its slot back.
    drop(held.pop());
    held.push(held_ok_from(&s, [127, 0, 0, 1]));

    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(b"max_connections_per_address = 2\nmax_connections_per_address_exempt = [\"127.0.0.1/32\"]\n")
        .expect("write");
    let s = Server::start(&["--config", f.path().to_str().expect("utf-8 path")]);
    let exempt: Vec<_> = (0..4).map(|_| held_from(&s, [127, 0, 0, 1])).collect();
    assert!(exempt.iter().all(|(_, r)| r.status == 200), "{exempt:?}");
    let counted: Vec<_> = (0..3).map(|_| held_from(&s, [127, 0, 0, 3])).collect();
    let statuses: Vec<u16> = counted.iter().map(|(_, r)| r.status).collect();
    assert_eq!(
        statuses,
        [200, 200, 503],
        "only the listed network is exempt"
    );
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let s = Server::start(&["--shards", "2"]);
    let mut c = s.connect();
    for i in 0..50 {
        let body = r#"{"delay_ms":600000}"#;
        let req = format!(
            "PUT /v1/timers/t/k{i} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        c.write_all(req.as_bytes()).expect("write");
        assert_eq!(read_response(&mut c).expect("answer").status, 201);
    }
}
