//! Unit tests of `forward.rs`: the bounds, the deadline, the header against loops.

use super::*;

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

fn on_executor<T>(f: impl std::future::Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor")
        .run(f)
}

/// Past [`MAX_IN_FLIGHT`] forwards to one peer, one more is refused at once (nothing is
/// queued), and a forward that ends gives its place back.
#[test]
fn the_forwards_in_flight_to_a_peer_are_capped_and_one_more_is_refused_at_once() {
    let stats = Arc::new(ForwardStats::default());
    let peers = Peers::new("me:1", stats.clone());
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
    let peers = Peers::new("me:1", stats.clone());
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
