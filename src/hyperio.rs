//! Glue between glommio's sockets and hyper, for the API's server connections and the webhook
//! client's: [`Io`] adapts a glommio `TcpStream`, or a TLS stream over one (futures-io traits),
//! to hyper's `rt::Read`/`rt::Write`, and [`LocalTimer`] gives hyper glommio's timers for its
//! header-read timeout.
//!
//! [`Io`] also enforces the write-stall timeout: a write that makes no progress for
//! `stall` (the peer stopped reading) fails with `TimedOut`, which closes the connection.
//! Everything here lives on one shard's thread: a connection is `spawn_local`ed and never
//! moves. The module is crate-private: its `Send` claim for glommio's timers holds only for
//! the crate's own single-threaded connections.

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use glommio::timer::Timer;
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub struct Io<S = TcpStream> {
    stream: S,
    stall: Duration,
    write_timer: Option<Timer>,
    /// How many bytes of hyper's buffer to offer the next read (they must be zeroed first):
    /// small for ordinary requests, doubled while reads fill it (large bodies).
    read_hint: usize,
}

const MIN_READ: usize = 4 * 1024;
const MAX_READ: usize = 64 * 1024;

impl<S> Io<S> {
    pub fn new(stream: S, stall: Duration) -> Self {
        Io {
            stream,
            stall,
            write_timer: None,
            read_hint: MIN_READ,
        }
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

impl<S: AsyncWrite + Unpin> hyper::rt::Write for Io<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Pending if this.stalled(cx) => Poll::Ready(Err(timed_out())),
            Poll::Pending => Poll::Pending,
            ready => {
                this.write_timer = None;
                ready
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
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
        Pin::new(&mut self.get_mut().stream).poll_close(cx)
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
