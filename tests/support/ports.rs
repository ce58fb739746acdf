//! Free ports for the servers tests start: never one that another test, in this process or
//! in another running beside it, was given.
//!
//! The kernel picks the port of a bind to port 0 at random, and a port let go can come back:
//! 126 of 2,000 such binds in a row here got a port handed out before. Two servers given one
//! port collide, and a test then talks to another test's server: punctual binds with
//! SO_REUSEPORT, so both answer on it; Redis fails to bind, and its start-up check reaches the
//! other. So each port given is claimed: an abstract Unix socket named after it is bound and
//! kept for as long as the process lives (the kernel drops it when the process ends, however
//! it ends), and a port whose name is taken is passed over.
//!
//! Each support module that hands out ports includes this file (`#[path]`); the claims are
//! the kernel's, so the copies agree.

use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::sync::Mutex;

/// The claims this copy made, held until the process ends.
static CLAIMS: Mutex<Vec<UnixListener>> = Mutex::new(Vec::new());

/// A port on 127.0.0.1 that was free a moment ago and that no other test was given.
pub fn free_port() -> u16 {
    for _ in 0..1_000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let name = format!("punctual-test-port-{port}");
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("an abstract name");
        match UnixListener::bind_addr(&addr) {
            Ok(claim) => {
                CLAIMS.lock().unwrap_or_else(|p| p.into_inner()).push(claim);
                return port;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
            Err(e) => panic!("cannot claim port {port}: {e}"),
        }
    }
    panic!("no unclaimed port in 1,000 binds of port 0");
}
