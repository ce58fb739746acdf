//! Glue between glommio's sockets and hyper, for the API's server connections and the webhook
//! client's: [`Io`] adapts a glommio `TcpStream`, or a TLS stream over one (futures-io traits),
//! to hyper's `rt::Read`/`rt::Write`, and [`LocalTimer`] gives hyper glommio's timers for its
//! header-read timeout.
//!
//! [`Io`] also enforces the write-stall timeout: a write that makes no progress for
//! `stall` (the peer stopped reading) fails with `TimedOut`, which closes the connection.
//! [`Io`] also keeps a large answer from holding its shard's thread: it hands the socket at
//! most [`MAX_WRITE`] bytes a write, and once writes in a row have taken a slice of time
//! (`cooperate`), it yields to the executor before the next. A loopback `send` runs the
//! receiver's side of TCP too, on the sender's thread: the megabyte answer of a 10,000-item
//! batch, handed over in one write, held the shard for 1–2 ms of its own CPU time.
//!
//! Everything here lives on one shard's thread: a connection is `spawn_local`ed and never
//! moves. The module is crate-private: its `Send` claim for glommio's timers holds only for
//! the crate's own single-threaded connections.

use crate::runtime::cooperate::{yield_to_reactor, Slice, Yield};
use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use glommio::timer::Timer;
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub struct Io<S = TcpStream> {
    stream: S,
    stall: Duration,
    write_timer: Option<Timer>,
    /// How many bytes of hyper's buffer to offer the next read (they must be zeroed first):
    /// small for ordinary requests, doubled while reads fill it (large bodies).
    read_hint: usize,
    /// The slice that writes in a row run in: from the first write after the socket, a
    /// flush or a yield last stopped them.
    writes: Option<Slice>,
    /// The yield between two slices of writes, while it waits.
    pause: Option<Yield>,
    /// A server connection's lingering close: after its FIN, how long to read and discard
    /// what the client still sends, once the flag says an answer left bytes unread (`None`:
    /// a client connection closes at once).
    linger: Option<(Duration, Rc<Cell<bool>>)>,
    /// While it lingers: the write side is shut, and the linger's deadline.
    closing: Option<Timer>,
    /// Small pieces of a vectored write, copied into one buffer (reused).
    gather: Vec<u8>,
}

const MIN_READ: usize = 4 * 1024;
const MAX_READ: usize = 64 * 1024;

/// The most bytes one write hands the socket: a loopback send of 64 KiB takes tens of
/// microseconds, so the slice is checked often enough.
pub const MAX_WRITE: usize = 64 * 1024;

/// A vectored write whose first piece is shorter than this is gathered into one buffer (an
/// answer's head and a small body: one `send`); from this size a piece is written from where
/// it lies.
const GATHER_BELOW: usize = 16 * 1024;

impl<S> Io<S> {
    pub fn new(stream: S, stall: Duration) -> Self {
        Io {
            stream,
            stall,
            write_timer: None,
            read_hint: MIN_READ,
            writes: None,
            pause: None,
            linger: None,
            closing: None,
            gather: Vec::new(),
        }
    }

    /// A server connection's close lingers for up to `linger` once `wanted` is set (by the
    /// server, when an answer that says `Connection: close` left the request's body unread):
    /// after the FIN, what the client still sends is read and discarded until it closes too.
    /// Closing a socket with unread bytes in it sends a reset, and a reset that reaches the
    /// client before it read the last answer loses that answer (a `413` that said
    /// `Connection: close` before the body was all sent: 1 curl upload in 50 got no answer
    /// without it). Other closes (idle, the client's own) do not wait.
    pub fn lingering(mut self, linger: Duration, wanted: Rc<Cell<bool>>) -> Self {
        self.linger = Some((linger, wanted));
        self
    }

    /// Polls the write-stall timer after the socket said Pending.
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let stall = self.stall;
        let t = self.write_timer.get_or_insert_with(|| Timer::new(stall));
        Pin::new(t).poll(cx).is_ready()
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "peer stopped reading")
}

impl<S: AsyncRead + Unpin> hyper::rt::Read for Io<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // SAFETY: we only write initialised bytes into the cursor's spare capacity (zeros
        // first, then what the socket reads) and never read from it before that.
        let spare: &mut [MaybeUninit<u8>] = unsafe { buf.as_mut() };
        let len = spare.len().min(this.read_hint);
        spare[..len].fill(MaybeUninit::new(0));
        // SAFETY: the first `len` elements were initialised just above, and
        // `MaybeUninit<u8>` has the same layout as `u8`.
        let init: &mut [u8] =
            unsafe { &mut *(&mut spare[..len] as *mut [MaybeUninit<u8>] as *mut [u8]) };
        match Pin::new(&mut this.stream).poll_read(cx, init) {
            Poll::Ready(Ok(n)) => {
                this.read_hint = if n == len {
                    (len * 2).clamp(MIN_READ, MAX_READ)
                } else {
                    MIN_READ.max(n.next_power_of_two()).min(MAX_READ)
                };
                // SAFETY: the socket filled `n <= len` bytes, all initialised above.
                unsafe { buf.advance(n) };
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> hyper::rt::Write for Io<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.writes.is_some_and(|s| s.is_over()) && this.pause.is_none() {
            this.pause = Some(yield_to_reactor());
        }
        if let Some(pause) = this.pause.as_mut() {
            if Pin::new(pause).poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.pause = None;
            this.writes = None;
        }
        this.writes.get_or_insert_with(Slice::begin);
        let buf = &buf[..buf.len().min(MAX_WRITE)];
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Pending => {
                this.writes = None;
                if this.stalled(cx) {
                    Poll::Ready(Err(timed_out()))
                } else {
                    Poll::Pending
                }
            }
            ready => {
                this.write_timer = None;
                ready
            }
        }
    }

    /// hyper hands its head and the body's buffers as they are (its `Queue` strategy), rather
    /// than copying the body behind the head into one buffer (`Flatten`): a megabyte answer
    /// was copied whole, in one stretch, before its first write. Small pieces are still
    /// gathered into one write, so that an ordinary answer is one `send`.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut parts = bufs.iter().filter(|b| !b.is_empty()).peekable();
        let Some(first) = parts.next() else {
            return Poll::Ready(Ok(0));
        };
        if first.len() >= GATHER_BELOW || parts.peek().is_none() {
            return Pin::new(this).poll_write(cx, first);
        }
        let mut gather = std::mem::take(&mut this.gather);
        gather.clear();
        gather.extend_from_slice(first);
        for part in parts {
            let room = MAX_WRITE - gather.len();
            gather.extend_from_slice(&part[..part.len().min(room)]);
            if gather.len() == MAX_WRITE {
                break;
            }
        }
        let written = Pin::new(&mut *this).poll_write(cx, &gather);
        this.gather = gather;
        written
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.writes = None;
        match Pin::new(&mut this.stream).poll_flush(cx) {
            Poll::Pending if this.stalled(cx) => Poll::Ready(Err(timed_out())),
            Poll::Pending => Poll::Pending,
            ready => {
                this.write_timer = None;
                ready
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let linger = match &this.linger {
            Some((linger, wanted)) if wanted.get() => *linger,
            _ => return Pin::new(&mut this.stream).poll_close(cx),
        };
        if this.closing.is_none() {
            match Pin::new(&mut this.stream).poll_close(cx) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
            this.closing = Some(Timer::new(linger));
        }
        // Up to 64 reads a turn, then a turn for the shard's other tasks.
        let mut sink = [0u8; 4096];
        for _ in 0..64 {
            match Pin::new(&mut this.stream).poll_read(cx, &mut sink) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(_)) => continue,
                Poll::Pending => {
                    return match this.closing.as_mut().map(|t| Pin::new(t).poll(cx)) {
                        Some(Poll::Pending) => Poll::Pending,
                        _ => Poll::Ready(Ok(())),
                    }
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// hyper's timer, backed by glommio's (thread-local) timers.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalTimer;

/// A glommio timer that hyper may hold. See the SAFETY note on the `Send`/`Sync` impls.
struct LocalSleep(Timer);

// SAFETY: hyper requires `Sleep: Send + Sync` for multi-threaded runtimes, but a `LocalSleep`
// is only ever created by `LocalTimer`, which only the connections of `api::http` and of the
// webhook client use (this module is crate-private, so no caller outside the crate can hand a
// `LocalTimer` to a multi-threaded hyper); those connections own a glommio `TcpStream` (which is `!Send`), are
// `spawn_local`ed on one shard, and so are created, polled and dropped on that one thread. The timer never crosses threads,
// and no `&LocalSleep` is ever shared with another thread.
unsafe impl Send for LocalSleep {}
// SAFETY: as above: no reference to it leaves its thread.
unsafe impl Sync for LocalSleep {}

impl Future for LocalSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.get_mut().0).poll(cx).map(|_| ())
    }
}

impl hyper::rt::Sleep for LocalSleep {}

impl hyper::rt::Timer for LocalTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(LocalSleep(Timer::new(duration)))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep(deadline.saturating_duration_since(Instant::now()))
    }
}

#[cfg(test)]
#[path = "hyperio_tests.rs"]
mod tests;
