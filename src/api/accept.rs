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
//! So each shard's listener is accepted from by a thread of its own, blocked in `accept4(2)`,
//! which hands each connection to the shard through a bounded channel whose wakes reach the
//! shard's task through its doorbell ([`crate::runtime::doorbell::relay`]). A thread blocked in
//! `accept4(2)` is ended by SIGKILL with the rest of the process, before the process's
//! descriptors are closed: once the process is reaped, its listener is closed, and a client
//! that connects is refused (nothing sent, safe to retry) until the next start listens.
//!
//! The thread owns the listener; the acceptor keeps a duplicate of its descriptor for
//! [`Acceptor::shutdown`] (the drain), which ends the thread's `accept4`. Connections the
//! thread took and the shard did not are closed when the acceptor is dropped. The channel
//! holds [`QUEUED`] connections: past that the thread waits, and clients wait in the kernel's
//! backlog as before, so the connection caps and the backlog still bound what is taken.
//!
//! Cost: one thread per shard, asleep in `accept4(2)`. A connection that finds the shard
//! waiting costs one more wake than io_uring's accept (the thread's, then the shard's through
//! its doorbell); a connection that finds one queued before it costs the shard nothing more.
//! A client that opens one connection per request, one at a time, is the worst case: 5,000
//! `GET /healthz` on connections of their own took 1.24 s against 1.07 s with io_uring's
//! accept (medians of 10, whole process with the server's start, 1 shard, a shared 2-vCPU
//! host), about 35 µs more a connection. Keep-alive connections pay it once.

use futures_channel::mpsc;
use futures_lite::StreamExt;
use glommio::net::TcpStream;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::task::Poll;
use std::time::Duration;

/// Connections the thread may have taken that the shard has not: past them, clients wait in
/// the kernel's backlog.
const QUEUED: usize = 64;

/// How long the thread pauses after an `accept4(2)` that failed (out of descriptors, and the
/// like) before it tries again: a failing accept must not turn it into a busy loop.
const ACCEPT_FAILED_PAUSE: Duration = Duration::from_millis(10);

/// A shard's end of its accept thread.
pub struct Acceptor {
    /// The connections the thread took, in order; ends when the thread does.
    taken: mpsc::Receiver<socket2::Socket>,
    /// A duplicate of the listener's descriptor, to shut it down.
    listener: OwnedFd,
}

impl Acceptor {
    /// Takes `socket` (bound and listening) for shard `shard` and starts its accept thread.
    pub fn new(shard: usize, socket: socket2::Socket) -> io::Result<Acceptor> {
        socket.set_nonblocking(false)?;
        let listener = socket.as_fd().try_clone_to_owned()?;
        let (give, taken) = mpsc::channel(QUEUED);
        std::thread::Builder::new()
            .name(format!("punctual-accept-{shard}"))
            .stack_size(64 * 1024)
            .spawn(move || take_connections(shard, &socket, give))?;
        Ok(Acceptor { taken, listener })
    }

    /// The next connection, waiting for one as long as it takes; an error once the listener
    /// was shut down.
    pub async fn accept(&mut self) -> io::Result<TcpStream> {
        match crate::runtime::doorbell::relay(self.taken.next()).await {
            Some(stream) => {
                let fd = stream.into_raw_fd();
                // SAFETY: `fd` is a connected TCP socket just accepted and released by its
                // socket2 owner; the glommio stream becomes its sole owner.
                Ok(unsafe { TcpStream::from_raw_fd(fd) })
            }
            None => Err(io::Error::other("the listener is shut down")),
        }
    }

    /// Leaves the LISTEN state now, with the connections queued and not yet accepted, and
    /// ends the accept thread.
    pub fn shutdown(&self) {
        // SAFETY: the descriptor is `self.listener`'s, open while it lives; shutdown(2)
        // touches no memory of ours.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

/// The accept thread: takes each connection from `listener` and hands it to the shard through
/// `give`, waiting while the channel is full. Ends when the listener is shut down or the
/// shard's acceptor is dropped.
fn take_connections(
    shard: usize,
    listener: &socket2::Socket,
    mut give: mpsc::Sender<socket2::Socket>,
) {
    // Started from the shard's thread, pinned to its core: this thread has no business there.
    let _ = crate::cpus::pin_current_thread(&crate::cpus::off_shard_cores());
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A peer that reset before it was taken.
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
            // Shut down (the drain).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return,
            Err(e) => {
                tracing::warn!(shard, "accept failed: {e}");
                std::thread::sleep(ACCEPT_FAILED_PAUSE);
                continue;
            }
        };
        let room = futures_lite::future::block_on(futures_lite::future::poll_fn(|cx| {
            match give.poll_ready(cx) {
                Poll::Ready(r) => Poll::Ready(r.is_ok()),
                Poll::Pending => Poll::Pending,
            }
        }));
        if !room || give.start_send(stream).is_err() {
            // The shard's acceptor is gone.
            return;
        }
    }
}

#[cfg(test)]
#[path = "accept_tests.rs"]
mod tests;
