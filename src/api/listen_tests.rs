use super::test_ports as ports;
use super::*;

/// A port on 127.0.0.1 that no other test was given.
fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], ports::free_port()))
}

/// Port 0: the kernel picks the first shard's port, and every shard listens on it.
#[test]
fn a_free_address_passes_at_once_and_port_0_is_one_port_for_all_shards() {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sockets = bind_shards(addr, 3, Duration::ZERO).expect("bound");
    let ports: Vec<u16> = sockets
        .iter()
        .map(|s| {
            s.local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .map_or(0, |a| a.port())
        })
        .collect();
    assert_eq!(ports.len(), 3);
    assert!(
        ports[0] != 0 && ports.iter().all(|&p| p == ports[0]),
        "{ports:?}"
    );
}

#[test]
fn a_live_listener_is_refused_after_the_window_with_what_to_check() {
    let holder = std::net::TcpListener::bind(free_addr()).expect("bind");
    let addr = holder.local_addr().expect("addr");
    let start = Instant::now();
    let err = bind_shards(addr, 2, Duration::from_millis(60)).expect_err("in use");
    assert!(start.elapsed() >= Duration::from_millis(60), "{err}");
    assert!(
        err.contains(&addr.to_string()) && err.contains("60 ms"),
        "{err}"
    );
    assert!(err.contains(&format!("sport = :{}", addr.port())), "{err}");
}

/// A free port whose start lock another start holds is waited for like a port in use,
/// with an error that names the lock, and taken once the lock is let go.
#[test]
fn a_start_under_way_on_the_port_is_waited_for() {
    let addr = free_addr();
    let lock = start_lock(addr)
        .expect("lock")
        .expect("a lock for a real port");
    let err = bind_shards(addr, 1, Duration::from_millis(60)).expect_err("locked");
    assert!(err.contains("60 ms") && err.contains("start lock"), "{err}");
    assert!(
        err.contains(&format!("grep punctual-listen-{}", addr.port())),
        "{err}"
    );
    drop(lock);
    let sockets = bind_shards(addr, 2, Duration::from_millis(60)).expect("bound");
    assert_eq!(sockets.len(), 2);
    // Bound and listening, the lock let go: another start now meets the listeners.
    assert!(start_lock(addr).expect("lock").is_some());
    let err = bind_shards(addr, 1, Duration::ZERO).expect_err("in use");
    assert!(err.contains("sport = :"), "{err}");
}

/// Starts racing for one port: however they interleave, one of them serves it. Without
/// the start lock both can pass the probe before either listens, and share the port.
#[test]
fn two_starts_at_once_never_share_the_port() {
    for round in 0..300 {
        let addr = free_addr();
        let gate = std::sync::Barrier::new(3);
        let won = std::thread::scope(|s| {
            let starts: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        gate.wait();
                        bind_shards(addr, 1, Duration::ZERO).ok()
                    })
                })
                .collect();
            // Every start's sockets are held until all have returned.
            let served: Vec<_> = starts
                .into_iter()
                .filter_map(|t| t.join().expect("no panic"))
                .collect();
            served.len()
        });
        assert_eq!(won, 1, "round {round}: {won} starts serve {addr}");
    }
}

/// Where Unix sockets are refused to the process (a hardened unit's address families), the
/// lock cannot be made: the start goes on without it, and stops asking.
#[test]
fn a_lock_that_cannot_be_made_does_not_stop_the_start() {
    let addr = free_addr();
    let mut locking = true;
    let refused: fn(SocketAddr) -> io::Result<Option<UnixListener>> =
        |_| Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
    let Try::Bound(sockets) = try_bind(addr, 2, &mut locking, refused) else {
        panic!("the start stopped on the lock");
    };
    assert_eq!(sockets.len(), 2);
    assert!(!locking, "the next tries go without the lock");
}

/// The shards' sockets listen as soon as they are made, before any shard runs: the
/// probe of another process fails at once, however long the shards take to start.
#[test]
fn the_shard_sockets_hold_the_address_before_the_shards_start() {
    let addr = free_addr();
    let sockets = shard_sockets(addr, 2).expect("bound");
    assert_eq!(sockets.len(), 2);
    let refused = probe(addr).map_err(|e| e.kind());
    assert_eq!(refused, Err(io::ErrorKind::AddrInUse));
    // A client can connect already: it waits in the backlog until the shard accepts.
    let client = std::net::TcpStream::connect(addr);
    assert!(client.is_ok(), "{client:?}");
}

#[test]
fn shard_listeners_share_the_address_and_the_probe_sees_them() {
    let addr = free_addr();
    let first = reuseport_socket(addr).expect("first shard");
    let second = reuseport_socket(addr).expect("second shard joins");
    let refused = probe(addr).map_err(|e| e.kind());
    assert_eq!(refused, Err(io::ErrorKind::AddrInUse));
    drop((first, second));
    assert!(probe(addr).is_ok());
}
