//! Unit tests of `forward.rs`: the bounds, the deadline, the header against loops.

use super::*;
use crate::runtime::cooperate::on_executor;
use hyper::header::RETRY_AFTER;

#[test]
fn addresses_split_into_host_and_port() {
    assert_eq!(split_addr("10.0.0.5:7480"), Some(("10.0.0.5", 7480)));
    assert_eq!(split_addr("node-a.local:80"), Some(("node-a.local", 80)));
    assert_eq!(split_addr("[::1]:7480"), Some(("::1", 7480)));
    for bad in ["10.0.0.5", ":7480", "h:port", "h:70000", ""] {
        assert_eq!(split_addr(bad), None, "{bad:?}");
    }
}

#[test]
fn a_forward_without_an_answer_is_503_peer_unavailable() {
    let e = ApiError::from(ForwardError::Timeout {
        peer: "10.0.0.2:7480".into(),
        ms: 5000,
    });
    assert_eq!((e.status().as_u16(), e.code()), (503, "peer_unavailable"));
    assert!(e.to_string().contains("10.0.0.2:7480"), "{e}");
}

fn get(path: &str) -> Outgoing<'_> {
    Outgoing {
        method: Method::GET,
        path,
        auth: None,
        body: Bytes::new(),
    }
}

/// Past [`MAX_IN_FLIGHT`] forwards to one peer, one more is refused at once (nothing is
/// queued), and a forward that ends gives its place back.
#[test]
fn the_forwards_in_flight_to_a_peer_are_capped_and_one_more_is_refused_at_once() {
    let stats = Arc::new(ForwardStats::default());
    let peers = Peers::new("me:1", None, stats.clone());
    let peer: Arc<str> = Arc::from("127.0.0.1:9");
    let other: Arc<str> = Arc::from("127.0.0.1:10");
    let mut held: Vec<InFlight<'_>> = (0..MAX_IN_FLIGHT)
        .map(|_| peers.enter(&peer).expect("room"))
        .collect();
    assert!(peers.enter(&peer).is_none());
    assert!(
        peers.enter(&other).is_some(),
        "another peer has its own count"
    );
    let refused = on_executor(peers.forward(&peer, get("/v1/timers/t/k")));
    assert_eq!(
        refused.map(|a| a.status),
        Err(ForwardError::Busy {
            peer: peer.to_string(),
            limit: MAX_IN_FLIGHT
        })
    );
    assert_eq!(stats.busy.load(Ordering::Relaxed), 1);
    held.pop();
    assert!(peers.enter(&peer).is_some());
}

/// A peer that takes the connection and never answers is given up at the deadline, with
/// `Timeout`: the wait is bounded whatever the far side does.
#[test]
fn a_peer_that_never_answers_is_given_up_at_the_deadline() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let addr: Arc<str> = Arc::from(silent.local_addr().expect("bound").to_string());
    let stats = Arc::new(ForwardStats::default());
    let peers = Peers::new("me:1", None, stats.clone());
    let answer = on_executor(peers.forward(&addr, get("/v1/timers/t/k")));
    assert!(
        matches!(answer, Err(ForwardError::Timeout { .. })),
        "{answer:?}"
    );
    assert_eq!(stats.timeout.load(Ordering::Relaxed), 1);
    // A port nobody listens on: refused, not a timeout.
    drop(silent);
    let answer = on_executor(peers.forward(&addr, get("/v1/timers/t/k")));
    assert!(
        matches!(answer, Err(ForwardError::Unreachable { .. })),
        "{answer:?}"
    );
}

#[test]
fn a_forwarded_request_is_never_routed_again() {
    let node = Arc::new(Holdings::default());
    let mut headers = HeaderMap::new();
    assert!(view(Some(&node), &headers).is_some());
    assert!(
        view(None, &headers).is_none(),
        "a node alone routes nothing"
    );
    headers.insert(FORWARDED, HeaderValue::from_static("10.0.0.1:7480"));
    assert!(view(Some(&node), &headers).is_none());
}

/// What a test peer saw: the connections it accepted, and each request's head.
type Seen = Arc<std::sync::Mutex<(usize, Vec<String>)>>;

/// A peer that answers every request on a connection with `201 {}` (and two headers), and
/// records the heads it got and the connections it accepted.
fn keep_alive_peer() -> (String, Seen) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let addr = listener.local_addr().expect("bound").to_string();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            log.lock().expect("log").0 += 1;
            let log = log.clone();
            std::thread::spawn(move || {
                let mut out = conn.try_clone().expect("clone");
                let mut lines = BufReader::new(conn);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if lines.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line != "\r\n" {
                        head.push_str(&line);
                        continue;
                    }
                    log.lock().expect("log").1.push(std::mem::take(&mut head));
                    let answer = "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\nretry-after: 7\r\nx-other: no\r\ncontent-length: 2\r\n\r\n{}";
                    if out.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Forwards to one peer reuse one kept-alive connection, carry the header and the caller's
/// `Authorization`, and relay the status, body and the headers that matter, no other.
#[test]
fn forwards_reuse_a_kept_alive_connection_and_relay_the_answer() {
    let (addr, seen) = keep_alive_peer();
    let peer: Arc<str> = Arc::from(addr.as_str());
    let peers = Peers::new("10.0.0.1:7480", None, Arc::new(ForwardStats::default()));
    let auth = HeaderValue::from_static("Bearer t0ken");
    let answers = on_executor(async {
        let mut answers = Vec::new();
        for _ in 0..5 {
            let out = Outgoing {
                auth: Some(&auth),
                ..get("/v1/timers/t/k")
            };
            answers.push(peers.forward(&peer, out).await.map(Answer::into_resp));
        }
        answers
    });
    for a in answers {
        let r = a.expect("answered");
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(
            r.headers().get(RETRY_AFTER).map(|v| v.as_bytes()),
            Some(&b"7"[..])
        );
        assert!(
            r.headers().get("x-other").is_none(),
            "only the headers that matter"
        );
    }
    let (connections, heads) = seen.lock().expect("log").clone();
    assert_eq!(
        connections, 1,
        "one kept-alive connection for five forwards"
    );
    assert_eq!(heads.len(), 5);
    for head in heads {
        let head = head.to_ascii_lowercase();
        assert!(head.starts_with("get /v1/timers/t/k http/1.1"), "{head}");
        assert!(head.contains("punctual-forwarded: 10.0.0.1:7480"), "{head}");
        assert!(head.contains("authorization: bearer t0ken"), "{head}");
    }
}

/// A peer a forward failed to reach is forgotten once nothing is in flight to it, and past
/// a handful of known peers, those with nothing in flight and no open connection are swept:
/// forwarding to ever new addresses (nodes replaced) does not grow a shard's map.
#[test]
fn peers_with_nothing_in_flight_and_no_connection_are_forgotten() {
    let peers = Peers::new("me:1", None, Arc::new(ForwardStats::default()));
    for _ in 0..20 {
        // A port nobody listens on: refused at once.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
        let addr: Arc<str> = Arc::from(closed.local_addr().expect("bound").to_string());
        drop(closed);
        let answer = on_executor(peers.forward(&addr, get("/v1/timers/t/k")));
        assert!(
            matches!(answer, Err(ForwardError::Unreachable { .. })),
            "{answer:?}"
        );
        assert!(peers.peers.borrow().is_empty(), "{addr} still known");
    }
    // Entries left without a place given back (as a peer's idle connections all closed):
    // the next forward past the bound sweeps them.
    for i in 0..=SWEEP_ABOVE {
        peers
            .peers
            .borrow_mut()
            .insert(Arc::from(format!("10.0.0.{i}:7480")), Peer::default());
    }
    let next: Arc<str> = Arc::from("127.0.0.1:9");
    let held = peers.enter(&next).expect("room");
    assert_eq!(
        peers.peers.borrow().len(),
        1,
        "only the peer in flight is left"
    );
    drop(held);
    assert!(peers.peers.borrow().is_empty());
}
