//! The listening address: the options of the shards' listening sockets, and the start-up check
//! that no other live process serves the address, retried while the sockets of a process that
//! just crashed on it are still closing.
//!
//! Every shard binds its own listener to the same address with SO_REUSEPORT, and the kernel
//! spreads connections over them. SO_REUSEPORT alone would also let a second punctual (same
//! user) join the first one silently, so [`bind_shards`] first binds a probe socket
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
//! 2. A killed punctual's listeners close as it dies, before it can be reaped: no io_uring
//!    request ever holds them (`accept`). A listener that an io_uring request holds (an
//!    accept pending) outlives its process until the ring is torn down, after exit; a
//!    listener that joined it would lose the connections the kernel hands to it. The probe
//!    also waits out such sockets of another program, or of a process not yet reaped.
//! 3. Because the dead process's listeners set SO_REUSEADDR, which their connections inherit.
//!    Without it, those connections hold the port for up to a minute (`tcp_fin_timeout`, or
//!    TIME-WAIT) after a crash with clients connected.
//!
//! So start-up retries the probe on EADDRINUSE for `bind_retry_ms` (sleeping between tries)
//! and, once it succeeds, binds and listens on every shard's socket at once, before the
//! engine starts (a journal's recovery can take minutes), and hands each shard its socket
//! ([`bind_shards`]).
//!
//! Two punctuals started at the same moment could both pass the probe before either listens,
//! and then share the port. So each try first takes the port's start lock: an abstract Unix
//! socket named `punctual-listen-<port>`, bound only from the probe until the shards listen.
//! A second start meets the lock (or, once it is let go, the first one's listeners) and
//! retries, as for a port in use. The kernel drops the lock when its holder exits, however it
//! exits, so a crash mid-start holds nothing. The lock is per port, not per address: a start
//! on `0.0.0.0:P` and one on `127.0.0.1:P` conflict too, and the lock is held for microseconds,
//! so two punctuals on different addresses with one port only take turns (within
//! `bind_retry_ms`; with 0, the second gives up). It is per network namespace, like the port.
//! Any local process can hold the name; one that holds it past `bind_retry_ms` stops the start,
//! with an error that names the lock. Where Unix sockets are refused to the process (a unit
//! with `RestrictAddressFamilies=AF_INET AF_INET6`), the start says so once and goes on
//! without the lock.
//!
//! Cost: start-up only; two sockets per try (the lock and the probe), one try per
//! [`RETRY_PAUSE`], then one per shard.

use std::io;
use std::net::SocketAddr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener};
use std::time::{Duration, Instant};

/// Pause between two probes while the address is in use.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// The shards' listening sockets on `addr`, one per shard, bound and listening, once no other
/// process serves it: each try takes the port's start lock, probes, and binds the shards'
/// sockets before letting the lock go; a port in use (or locked by a start under way) is
/// retried for up to `retry`. The error says what to check.
///
/// The sockets listen before the engine starts: start-up (a journal's recovery) may take
/// minutes, and the address must not be taken meanwhile. Connections that arrive before a
/// shard accepts wait in its backlog.
pub fn bind_shards(
    addr: SocketAddr,
    shards: usize,
    retry: Duration,
) -> Result<Vec<socket2::Socket>, String> {
    let start = Instant::now();
    let mut told = false;
    let mut locking = true;
    loop {
        let blocked = match try_bind(addr, shards, &mut locking, start_lock) {
            Try::Bound(sockets) => return Ok(sockets),
            Try::Failed(e) => return Err(format!("listen: cannot bind {addr}: {e}")),
            Try::Blocked(b) => b,
        };
        let waited = start.elapsed();
        if waited >= retry {
            let ms = retry.as_millis();
            let port = addr.port();
            return Err(match blocked {
                Blocked::InUse(e) => format!(
                    "listen: cannot bind {addr}: {e}; still in use after retrying for {ms} ms, \
                     so another process may be serving it: check with `ss -ltnp 'sport = :{port}'`"
                ),
                Blocked::Locked => format!(
                    "listen: cannot bind {addr}: another start on port {port} held its start \
                     lock for all of {ms} ms (a punctual starting, or stopped mid-start): check \
                     with `ss -xlp | grep punctual-listen-{port}`"
                ),
            });
        }
        if !told {
            tracing::warn!(
                listen = %addr,
                retry_ms = retry.as_millis() as u64,
                "{}",
                match blocked {
                    Blocked::InUse(_) => "listen address in use; retrying: after a crash the \
                                          old process's sockets take a moment to close",
                    Blocked::Locked => "another start on this port is under way; retrying",
                }
            );
            told = true;
        }
        std::thread::sleep(RETRY_PAUSE.min(retry - waited));
    }
}

/// One try of [`bind_shards`].
enum Try {
    Bound(Vec<socket2::Socket>),
    /// Worth another try.
    Blocked(Blocked),
    /// Not worth another: the address cannot be bound at all.
    Failed(io::Error),
}

enum Blocked {
    /// The probe found the address in use.
    InUse(io::Error),
    /// Another start holds the port's start lock.
    Locked,
}

/// Takes the start lock (while `locking`), probes, binds the shards' sockets, lets the lock
/// go. A lock that cannot be made at all (Unix sockets refused to the process, as
/// `RestrictAddressFamilies=AF_INET AF_INET6` does) is said once, and the tries go on without
/// it, as before the lock: the window it closes is microseconds wide, the start is not.
fn try_bind(
    addr: SocketAddr,
    shards: usize,
    locking: &mut bool,
    start_lock: fn(SocketAddr) -> io::Result<Option<UnixListener>>,
) -> Try {
    let lock = if *locking {
        match start_lock(addr) {
            Ok(lock) => lock,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Try::Blocked(Blocked::Locked),
            Err(e) => {
                tracing::warn!(
                    listen = %addr,
                    error = %e,
                    "cannot take the port's start lock (an abstract Unix socket, \
                     @punctual-listen-{}); starting without it: two punctuals started on this \
                     port at the same instant could then both serve it",
                    addr.port()
                );
                *locking = false;
                None
            }
        }
    } else {
        None
    };
    match probe(addr) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Try::Blocked(Blocked::InUse(e)),
        Err(e) => return Try::Failed(e),
    }
    let sockets = shard_sockets(addr, shards);
    drop(lock);
    match sockets {
        Ok(sockets) => Try::Bound(sockets),
        Err(e) => Try::Failed(e),
    }
}

/// The start lock of `addr`'s port (see the module's doc): `None` for port 0, which the
/// kernel picks anew for each bind; EADDRINUSE while another start holds it.
fn start_lock(addr: SocketAddr) -> io::Result<Option<UnixListener>> {
    if addr.port() == 0 {
        return Ok(None);
    }
    let name = format!("punctual-listen-{}", addr.port());
    let name = UnixAddr::from_abstract_name(name.as_bytes())?;
    UnixListener::bind_addr(&name).map(Some)
}

/// Binds, and drops, a socket on `addr` without SO_REUSEPORT: fails with EADDRINUSE while
/// any listener holds the address (see the table above).
fn probe(addr: SocketAddr) -> io::Result<()> {
    let socket = new_socket(addr)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())
}

/// One listening socket per shard on `addr`, once the probe passed. On port 0 the first
/// socket's port, which the kernel picked, is every other shard's too.
fn shard_sockets(addr: SocketAddr, shards: usize) -> io::Result<Vec<socket2::Socket>> {
    let mut sockets = Vec::with_capacity(shards);
    let mut addr = addr;
    for _ in 0..shards {
        let socket = reuseport_socket(addr)?;
        if addr.port() == 0 {
            if let Some(bound) = socket.local_addr()?.as_socket() {
                addr = bound;
            }
        }
        sockets.push(socket);
    }
    Ok(sockets)
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

// The ports the integration tests' servers are given, claimed the same way, so that a test
// here never gets a port another test, in this process or beside it, holds.
#[cfg(test)]
#[path = "../../tests/support/ports.rs"]
mod test_ports;

#[cfg(test)]
#[path = "listen_tests.rs"]
mod tests;
