//! The listening address: the options of the shards' listening sockets, and the start-up check
//! that no other live process serves the address, retried while the sockets of a process that
//! just crashed on it are still closing.
//!
//! Every shard binds its own listener to the same address with SO_REUSEPORT, and the kernel
//! spreads connections over them. SO_REUSEPORT alone would also let a second punctual (same
//! user) join the first one silently, so [`wait_until_free`] first binds a probe socket
//! *without* it. What each bind meets on Linux, by what already holds the port:
//!
//! | already on the port                                   | probe      | shard listener |
//! |-------------------------------------------------------|------------|----------------|
//! | a live listener of another program                    | EADDRINUSE | EADDRINUSE [1] |
//! | a live punctual (its SO_REUSEPORT listeners)          | EADDRINUSE | joins it       |
//! | a killed punctual's listeners, until they close [2]   | EADDRINUSE | joins them     |
//! | a killed punctual's connections (FIN-WAIT, TIME-WAIT) | free [3]   | free [3]       |
//!
//! The probe: SO_REUSEADDR, bound, never listening (so it accepts nothing). A shard listener:
//! SO_REUSEADDR + SO_REUSEPORT.
//!
//! 1. Unless that program set SO_REUSEPORT too, under the same user.
//! 2. After `kill -9` the listeners outlive the process by a few milliseconds: io_uring
//!    releases the sockets of its pending accepts when it tears the ring down, after exit.
//!    A listener that joined them would lose the connections the kernel hands to them.
//! 3. Because the dead process's listeners set SO_REUSEADDR, which their connections inherit.
//!    Without it, those connections hold the port for up to a minute (`tcp_fin_timeout`, or
//!    TIME-WAIT) after a crash with clients connected.
//!
//! So start-up retries the probe on EADDRINUSE for `bind_retry_ms` (sleeping between tries)
//! and, once it succeeds, binds and listens on every shard's socket at once
//! ([`shard_sockets`]), before the engine starts (a journal's recovery can take minutes), and
//! hands each shard its socket. Left open: two punctuals started at the same moment can both
//! pass the probe before either listens; the window is the few microseconds between the probe
//! and the first listen.
//!
//! Cost: start-up only; one socket per try, one try per [`RETRY_PAUSE`], then one per shard.

use glommio::net::TcpListener;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::time::{Duration, Instant};

/// Pause between two probes while the address is in use.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Returns once a probe bind to `addr` succeeds, retrying on EADDRINUSE for up to `retry`;
/// the error says what to check.
pub fn wait_until_free(addr: SocketAddr, retry: Duration) -> Result<(), String> {
    let start = Instant::now();
    let mut told = false;
    loop {
        let err = match probe(addr) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if err.kind() != io::ErrorKind::AddrInUse {
            return Err(format!("listen: cannot bind {addr}: {err}"));
        }
        let waited = start.elapsed();
        if waited >= retry {
            return Err(format!(
                "listen: cannot bind {addr}: {err}; still in use after retrying for {} ms, so \
                 another process may be serving it: check with `ss -ltnp 'sport = :{}'`",
                retry.as_millis(),
                addr.port()
            ));
        }
        if !told {
            tracing::warn!(
                listen = %addr,
                retry_ms = retry.as_millis() as u64,
                "listen address in use; retrying: after a crash the old process's sockets \
                 take a moment to close"
            );
            told = true;
        }
        std::thread::sleep(RETRY_PAUSE.min(retry - waited));
    }
}

/// Binds, and drops, a socket on `addr` without SO_REUSEPORT: fails with EADDRINUSE while
/// any listener holds the address (see the table above).
fn probe(addr: SocketAddr) -> io::Result<()> {
    let socket = new_socket(addr)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())
}

/// The shards' listening sockets, one per shard, bound and listening on `addr` as soon as
/// the probe passed: start-up (a journal's recovery) may take minutes, and the address must
/// not be taken meanwhile. Connections that arrive before a shard accepts wait in its backlog.
pub fn shard_sockets(addr: SocketAddr, shards: usize) -> io::Result<Vec<socket2::Socket>> {
    (0..shards).map(|_| reuseport_socket(addr)).collect()
}

/// A shard's listener, from its socket (see [`shard_sockets`]), handed to glommio on the
/// shard's thread, and its descriptor (for a shutdown(2) when the shard stops accepting).
pub fn shard_listener(socket: socket2::Socket) -> (TcpListener, RawFd) {
    let fd = socket.into_raw_fd();
    // SAFETY: `fd` is a bound, listening TCP socket that we own (just released from the
    // socket2 socket); the glommio listener becomes its sole owner and closes it when dropped.
    let listener = unsafe { TcpListener::from_raw_fd(fd) };
    (listener, fd)
}

/// A listening socket on `addr` with SO_REUSEADDR + SO_REUSEPORT (every shard binds the same
/// address).
fn reuseport_socket(addr: SocketAddr) -> io::Result<socket2::Socket> {
    let socket = new_socket(addr)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket)
}

fn new_socket(addr: SocketAddr) -> io::Result<socket2::Socket> {
    socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_address_passes_at_once() {
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        assert_eq!(wait_until_free(addr, Duration::ZERO), Ok(()));
    }

    #[test]
    fn a_live_listener_is_refused_after_the_window_with_what_to_check() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = holder.local_addr().expect("addr");
        let start = Instant::now();
        let err = wait_until_free(addr, Duration::from_millis(60)).expect_err("in use");
        assert!(start.elapsed() >= Duration::from_millis(60), "{err}");
        assert!(
            err.contains(&addr.to_string()) && err.contains("60 ms"),
            "{err}"
        );
        assert!(err.contains(&format!("sport = :{}", addr.port())), "{err}");
    }

    /// The shards' sockets listen as soon as they are made, before any shard runs: the
    /// probe of another process fails at once, however long the shards take to start.
    #[test]
    fn the_shard_sockets_hold_the_address_before_the_shards_start() {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let first = reuseport_socket(any).expect("first");
        let addr = first
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("bound address");
        drop(first);
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
        let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let first = reuseport_socket(any).expect("first shard");
        let addr = first
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("bound address");
        let second = reuseport_socket(addr).expect("second shard joins");
        let refused = probe(addr).map_err(|e| e.kind());
        assert_eq!(refused, Err(io::ErrorKind::AddrInUse));
        drop((first, second));
        assert!(probe(addr).is_ok());
    }
}
