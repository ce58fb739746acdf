use super::*;

/// A listening socket on a free loopback port.
fn listening() -> (socket2::Socket, std::net::SocketAddr) {
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("addr");
    s.bind(&any.into()).expect("bind");
    s.listen(16).expect("listen");
    let addr = s.local_addr().expect("addr").as_socket().expect("inet");
    (s, addr)
}

/// Connections that arrive before and after the acceptor waits are each taken, on a
/// glommio executor (the thread's wakes go through glommio's own there: the test's
/// executor has no doorbell).
#[test]
fn takes_connections_queued_before_and_arriving_while_it_waits() {
    let (socket, addr) = listening();
    let early = std::net::TcpStream::connect(addr).expect("connect");
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("executor");
    ex.run(async move {
        let mut acceptor = Acceptor::new(0, socket).expect("acceptor");
        let first = acceptor.accept().await.expect("the queued one");
        assert_eq!(
            first.peer_addr().expect("peer"),
            early.local_addr().expect("local")
        );
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            std::net::TcpStream::connect(addr).expect("connect")
        });
        let second = acceptor.accept().await.expect("the late one");
        let late = late.join().expect("client");
        assert_eq!(
            second.peer_addr().expect("peer"),
            late.local_addr().expect("local")
        );
    });
}

/// The drain: a shut-down listener wakes a waiting accept, which then fails, and the
/// address refuses connections.
#[test]
fn a_shutdown_ends_a_waiting_accept() {
    let (socket, addr) = listening();
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("executor");
    ex.run(async move {
        let mut acceptor = Acceptor::new(0, socket).expect("acceptor");
        let listener = acceptor.listener.try_clone().expect("dup");
        glommio::spawn_local(async move {
            glommio::timer::sleep(Duration::from_millis(50)).await;
            // SAFETY: a duplicate of the listener, open here.
            unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) };
        })
        .detach();
        let ended = acceptor.accept().await.map(|_| ());
        assert!(ended.is_err(), "{ended:?}");
        drop(acceptor);
        assert!(std::net::TcpStream::connect(addr).is_err());
    });
}
