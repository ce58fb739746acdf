use super::*;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};

/// A listener on `ip` whose accept queue is full: the kernel drops every further SYN, so
/// a connect to it gets no answer at all (as a black-holed route gives). Kept open with
/// the connections that filled it.
fn black_hole(ip: Ipv4Addr) -> (socket2::Socket, Vec<TcpStream>) {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a socket");
    s.bind(&SocketAddr::from((ip, 0)).into()).expect("bind");
    s.listen(0).expect("listen");
    let addr = s
        .local_addr()
        .expect("bound")
        .as_socket()
        .expect("an inet address");
    let mut filled = Vec::new();
    for _ in 0..16 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(c) => filled.push(c),
            Err(_) => return (s, filled),
        }
    }
    panic!("the accept queue of a listen(0) socket never filled");
}

/// A host whose first address is black-holed and whose second answers: each address gets
/// its share of the connect time, so the connection is made to the second well within the
/// time the attempt allows, instead of the first eating all of it.
#[test]
fn a_black_holed_first_address_leaves_time_for_the_next() {
    let (hole, _filled) = black_hole(Ipv4Addr::new(127, 0, 0, 2));
    let port = hole
        .local_addr()
        .expect("bound")
        .as_socket()
        .expect("inet")
        .port();
    let good = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("the same port on 127.0.0.1");
    let resolver: &'static Resolver = Box::leak(Box::new(Resolver::new(
        crate::resolve::Limits::default(),
        Box::new(|_| {
            Ok(vec![
                Ipv4Addr::new(127, 0, 0, 2).into(),
                Ipv4Addr::LOCALHOST.into(),
            ])
        }),
    )));
    let tls = super::super::settings::tls_config(None).expect("Mozilla's roots");
    let pool = Pool::new(tls, resolver);
    let url = format!("http://hooks.example:{port}/");
    let allow = AllowList::new(
        std::slice::from_ref(&url),
        &["127.0.0.0/8".parse().expect("a net")],
    )
    .expect("valid");
    let (target, _) = Target::parse(&url).expect("a URL");
    let stall = Duration::from_secs(2);
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor");
    let made = ex.run(async {
        let connect = async { Some(pool.connect(&target, "t", &allow, stall).await) };
        let attempt = async {
            glommio::timer::sleep(stall).await;
            None
        };
        futures_lite::future::or(connect, attempt).await
    });
    match made {
        Some(Ok(_)) => {}
        Some(Err(e)) => panic!("no connection: {e}"),
        None => panic!("the black-holed first address took the whole {stall:?}"),
    }
    drop(good);
}
