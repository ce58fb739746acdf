//! A delivery's TCP stream that is reset, not closed, when it is dropped with a request on it
//! unanswered.
//!
//! An attempt that gives up (its timeout) drops its connection. Closed the ordinary way, the
//! kernel would keep the socket as an orphan and go on retransmitting the request's
//! unacknowledged bytes, then the FIN, for minutes: to a receiver whose accept queue had
//! overflowed (which drops the handshake's last ACK and the data after it) the abandoned
//! request arrives seconds after the attempt ended, and after the next attempt started. With
//! `SO_LINGER` set to 0 the close sends a RST and the kernel discards what is unsent, so no
//! byte of an attempt leaves after it gave up. A connection whose last response was read
//! whole (an idle pooled one) closes the ordinary way.

use futures_lite::{AsyncRead, AsyncWrite};
use std::cell::Cell;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Whether a request is under way on the connection: set before it is sent, cleared once its
/// response was read whole. Shared by the pool (which holds the sender) and the stream.
#[derive(Clone, Default)]
pub struct Busy(Rc<Cell<bool>>);

impl Busy {
    pub fn start(&self) {
        self.0.set(true);
    }

    pub fn done(&self) {
        self.0.set(false);
    }
}

/// `S`, reset on drop while [`Busy`].
pub struct ResetOnAbandon<S: AsRawFd> {
    stream: S,
    busy: Busy,
}

impl<S: AsRawFd> ResetOnAbandon<S> {
    pub fn new(stream: S, busy: Busy) -> Self {
        ResetOnAbandon { stream, busy }
    }
}

impl<S: AsRawFd> Drop for ResetOnAbandon<S> {
    fn drop(&mut self) {
        if self.busy.0.get() {
            linger_zero(self.stream.as_raw_fd());
        }
    }
}

/// `SO_LINGER {on, 0 s}` on `fd`: its close resets the connection.
fn linger_zero(fd: std::os::fd::RawFd) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `fd` is the stream's own socket, open for as long as the stream (this runs in
    // its owner's `drop`, before the stream's); `l` is a live `linger` and the length passed is
    // its size. A failure only leaves the ordinary close.
    let _ = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(l).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

impl<S: AsRawFd + AsyncRead + Unpin> AsyncRead for ResetOnAbandon<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsRawFd + AsyncWrite + Unpin> AsyncWrite for ResetOnAbandon<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    /// hyper shuts a connection down (a FIN) when its request is dropped; while busy, that
    /// would hand the receiver a whole abandoned request, so the close is left to the drop
    /// (a RST) instead.
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.busy.0.get() {
            linger_zero(self.stream.as_raw_fd());
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_close(cx)
    }
}
