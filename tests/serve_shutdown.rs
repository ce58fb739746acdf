//! `punctual serve` lifecycle: SIGTERM and SIGINT drain and exit 0, start-up errors exit
//! non-zero with a message, and a second instance cannot take a port already served.

mod api_support;
use api_support::{read_response, Server};
use std::io::Write;
use std::process::Command;

fn signal_and_wait(mut s: Server, sig: i32) -> std::process::ExitStatus {
    let pid = s.child.id() as i32;
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    s.child.wait().expect("wait")
}

#[test]
fn sigterm_finishes_and_exits_zero() {
    let s = Server::start(&[]);
    assert_eq!(
        s.req("PUT", "/v1/timers/t/k", r#"{"delay_ms":600000}"#)
            .status,
        201
    );
    let status = signal_and_wait(s, libc::SIGTERM);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn sigint_exits_zero_and_stops_listening() {
    let s = Server::start(&[]);
    let addr = s.addr;
    let status = signal_and_wait(s, libc::SIGINT);
    assert_eq!(status.code(), Some(0));
    assert!(std::net::TcpStream::connect(addr).is_err());
}

#[test]
fn a_keep_alive_connection_is_closed_cleanly_on_shutdown() {
    let s = Server::start(&[]);
    let mut c = s.connect();
    c.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("write");
    assert_eq!(read_response(&mut c).expect("answer").status, 200);
    let status = signal_and_wait(s, libc::SIGTERM);
    assert_eq!(status.code(), Some(0));
    let mut buf = [0u8; 16];
    assert!(matches!(
        std::io::Read::read(&mut c, &mut buf),
        Ok(0) | Err(_)
    ));
}

#[test]
fn a_request_in_flight_at_sigterm_is_answered_before_exit() {
    let mut s = Server::start(&[]);
    let mut c = s.connect();
    let body = br#"{"delay_ms":600000}"#;
    let head = format!(
        "PUT /v1/timers/t/in-flight HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).expect("write head");
    // hyper sends "100 Continue" once the handler starts reading the body: from then on the
    // request is in flight.
    let mut interim = Vec::new();
    let mut byte = [0u8; 1];
    while !interim.ends_with(b"\r\n\r\n") {
        let n = std::io::Read::read(&mut c, &mut byte).expect("read 100 Continue");
        assert_eq!(n, 1, "closed before 100 Continue");
        interim.push(byte[0]);
    }
    assert!(interim.starts_with(b"HTTP/1.1 100"));
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
    assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) }, 0);
    c.write_all(body).expect("write the body");
    let r = read_response(&mut c).expect("the in-flight request is answered");
    assert_eq!(r.status, 201);
    assert_eq!(s.child.wait().expect("wait").code(), Some(0));
}

#[test]
fn a_second_instance_on_the_same_port_refuses_to_start() {
    let s = Server::start(&[]);
    let out = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args([
            "serve",
            "--listen",
            &s.addr.to_string(),
            "--pinning",
            "none",
            "--bind-retry-ms",
            "200",
            "--store",
            "memory",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("listen"));
    assert_eq!(s.req("GET", "/healthz", "").status, 200);
}
