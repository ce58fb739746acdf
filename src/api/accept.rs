//! A shard's acceptor: takes connections from its listening socket without ever handing that
//! socket to io_uring, so that a killed process's address stops accepting when it dies.
//!
//! # Why not glommio's accept
//!
//! Every io_uring request holds a reference to the file it works on until it completes or is
//! cancelled, and the requests of a process killed with SIGKILL are cancelled only when its
//! ring is torn down, by a kernel worker, after the process has exited and been reaped
//! (milliseconds to tens of milliseconds later). A listener with an accept pending in the
//! ring (glommio's `TcpListener::accept`, or a poll on the listener) therefore stays in the
//! LISTEN state past its process's death: the kernel completes the handshakes of clients that
//! connect meanwhile, queues them in the dead process's backlog, and resets every one of them
//! when the socket finally closes. A client that connected during a restart saw
//! `Connection reset by peer` after sending its request, and could not tell whether the
//! request had been taken (`tests/journal_recovering.rs` met 41 to 249 such resets of 300
//! requests a run).
//!
//! So the listener is non-blocking and only this module's own `accept4(2)` calls touch it, on
//! the shard's thread. When none is waiting ([`io::ErrorKind::WouldBlock`]), the acceptor asks
//! its waiter thread, which blocks in `poll(2)` on the listener and answers once a connection
//! is there; the answer reaches the shard's task through its doorbell
//! ([`crate::doorbell::relay`]). A thread blocked in `poll(2)` is ended by SIGKILL with the
//! rest of the process, before the process's descriptors are closed: once the process is
//! reaped, its listener is closed, and a client that connects is refused (nothing sent, safe to
//! retry) until the next start listens.
//!
//! The waiter holds a duplicate of the listener's descriptor, so it never polls a descriptor
//! number that was closed and taken by another file; [`Acceptor::shutdown`] (at the drain)
//! wakes its poll, and dropping the acceptor ends the thread.
//!
//! Cost: one idle thread per shard. The first connection of a burst waits one wake of the
//! waiter and one doorbell ring (a few microseconds); the acceptor then takes every connection
//! queued before it asks again.

use futures_channel::oneshot;
use glommio::net::TcpStream;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::mpsc;
use std::time::Duration;

/// How long the waiter pauses after a `poll(2)` that failed (not interrupted) before it lets
/// the acceptor try again: a failing poll must not turn the acceptor into a busy loop.
const POLL_FAILED_PAUSE: Duration = Duration::from_millis(10);

/// A shard's listening socket and its waiter thread.
pub struct Acceptor {
    socket: socket2::Socket,
    /// Where the acceptor asks the waiter to answer once a connection is there.
    asks: mpsc::Sender<oneshot::Sender<()>>,
}

impl Acceptor {
    /// Takes `socket` (bound and listening) for shard `shard`: makes it non-blocking and
    /// starts its waiter thread.
    pub fn new(shard: usize, socket: socket2::Socket) -> io::Result<Acceptor> {
        socket.set_nonblocking(true)?;
        let watched = socket.as_fd().try_clone_to_owned()?;
        let (asks, asked) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("punctual-accept-{shard}"))
            .stack_size(64 * 1024)
            .spawn(move || wait_for_connections(&watched, &asked))?;
        Ok(Acceptor { socket, asks })
    }

    /// The next connection, waiting for one as long as it takes. An error is `accept4(2)`'s
    /// (out of descriptors, a peer that reset before it was taken, the listener shut down).
    pub async fn accept(&self) -> io::Result<TcpStream> {
        loop {
            match self.socket.accept() {
                Ok((stream, _)) => {
                    let fd = stream.into_raw_fd();
                    // SAFETY: `fd` is a connected TCP socket just accepted and released by its
                    // socket2 owner; the glommio stream becomes its sole owner.
                    return Ok(unsafe { TcpStream::from_raw_fd(fd) });
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable().await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Returns once the listener has a connection to accept (or is shut down, or its waiter
    /// could not poll it).
    async fn readable(&self) -> io::Result<()> {
        let (answer, answered) = oneshot::channel();
        self.asks
            .send(answer)
            .map_err(|_| io::Error::other("the acceptor's waiter thread is gone"))?;
        crate::doorbell::relay(answered)
            .await
            .map_err(|_| io::Error::other("the acceptor's waiter thread is gone"))
    }

    /// Leaves the LISTEN state now, with the connections queued and not yet accepted, and
    /// wakes the waiter if it polls.
    pub fn shutdown(&self) {
        let fd: RawFd = self.socket.as_raw_fd();
        // SAFETY: `fd` belongs to `self.socket`, which is alive here; shutdown(2) touches no
        // memory of ours.
        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
    }
}

/// The waiter thread: for each ask, blocks until `listener` is readable (a connection to take,
/// or the socket shut down), then answers. Ends when its acceptor is dropped.
fn wait_for_connections(listener: &OwnedFd, asked: &mpsc::Receiver<oneshot::Sender<()>>) {
    // Started from the shard's thread, pinned to its core: a waiter has no business there.
    let _ = crate::cpus::pin_current_thread(&crate::cpus::off_shard_cores());
    while let Ok(answer) = asked.recv() {
        loop {
            let mut fds = [libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            // SAFETY: `fds` is a valid array of one pollfd that outlives the call; the
            // descriptor is the waiter's own duplicate, open for as long as `listener` lives.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), 1, -1) };
            if r >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(error = %e, "acceptor: cannot poll the listener; retrying");
                std::thread::sleep(POLL_FAILED_PAUSE);
                break;
            }
        }
        // The acceptor may have stopped waiting (the drain): nothing to answer then.
        let _ = answer.send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listening socket on a free loopback port.
    fn listening() -> (socket2::Socket, std::net::SocketAddr) {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("addr");
        s.bind(&any.into()).expect("bind");
        s.listen(16).expect("listen");
        let addr = s.local_addr().expect("addr").as_socket().expect("inet");
        (s, addr)
    }

    /// Connections that arrive before and after the acceptor waits are each taken, on a
    /// glommio executor (the waiter answers through glommio's own wake there: the test's
    /// executor has no doorbell).
    #[test]
    fn takes_connections_queued_before_and_arriving_while_it_waits() {
        let (socket, addr) = listening();
        let early = std::net::TcpStream::connect(addr).expect("connect");
        let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .make()
            .expect("executor");
        ex.run(async move {
            let acceptor = Acceptor::new(0, socket).expect("acceptor");
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
            let acceptor = std::rc::Rc::new(Acceptor::new(0, socket).expect("acceptor"));
            let waiting = glommio::spawn_local({
                let acceptor = acceptor.clone();
                async move { acceptor.accept().await.map(|_| ()) }
            });
            glommio::timer::sleep(Duration::from_millis(50)).await;
            acceptor.shutdown();
            let ended = waiting.await;
            assert!(ended.is_err(), "{ended:?}");
            drop(acceptor);
            assert!(std::net::TcpStream::connect(addr).is_err());
        });
    }
}
