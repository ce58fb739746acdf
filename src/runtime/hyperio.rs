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
mod tests {
    use super::*;
    use hyper::rt::Write;
    use std::io::IoSlice;

    /// A socket that takes every write whole, recording its size, and spends `cost` of the
    /// thread's time on each (a loopback `send` of that size).
    struct Recorder {
        writes: Vec<Vec<u8>>,
        cost: Duration,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let until = Instant::now() + self.cost;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            self.writes.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A peer that sends nothing and has closed (what a lingering close reads).
    impl AsyncRead for Recorder {
        fn poll_read(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            _buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(0))
        }
    }

    /// Writes `parts` as hyper's queue strategy does (vectored, whatever was taken dropped
    /// from the front) until all is written; how many polls answered Pending on the way.
    async fn write_all(io: &mut Io<Recorder>, parts: &[&[u8]]) -> usize {
        let mut at = 0;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut pendings = 0;
        while at < total {
            let mut skip = at;
            let bufs: Vec<IoSlice<'_>> = parts
                .iter()
                .filter_map(|p| {
                    let from = skip.min(p.len());
                    skip -= from;
                    (from < p.len()).then(|| IoSlice::new(&p[from..]))
                })
                .collect();
            let n = std::future::poll_fn(|cx| {
                match Pin::new(&mut *io).poll_write_vectored(cx, &bufs) {
                    Poll::Pending => {
                        pendings += 1;
                        Poll::Pending
                    }
                    ready => ready,
                }
            })
            .await
            .expect("writes");
            at += n;
        }
        pendings
    }

    fn executor() -> glommio::LocalExecutor {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .make()
            .expect("an executor")
    }

    /// A megabyte answer behind a small head reaches the socket whole and in order, in
    /// writes of at most `MAX_WRITE`, the head gathered with the body's first bytes into one
    /// write, and with yields to the executor between slices of writes rather than one
    /// stretch of the thread.
    #[test]
    fn a_large_answer_is_written_in_bounded_pieces_with_yields_between_slices() {
        executor().run(async {
            let head = b"HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\n\r\n".to_vec();
            let body: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
            let mut io = Io::new(
                Recorder {
                    writes: Vec::new(),
                    cost: Duration::from_micros(60),
                },
                Duration::from_secs(5),
            );
            let pendings = write_all(&mut io, &[&head, &body]).await;
            let writes = &io.stream.writes;
            let sent: Vec<u8> = writes.concat();
            assert_eq!(sent.len(), head.len() + body.len());
            assert!(
                sent.starts_with(&head) && sent.ends_with(&body),
                "out of order"
            );
            assert!(
                writes.iter().all(|w| w.len() <= MAX_WRITE),
                "a write over {MAX_WRITE}: {:?}",
                writes.iter().map(Vec::len).collect::<Vec<_>>()
            );
            assert_eq!(writes[0].len(), MAX_WRITE, "the head was not gathered");
            // 17 writes of 60 µs each are about 1 ms: at least three slices of ~200 µs.
            assert!(
                pendings >= 3,
                "{pendings} yields in {} writes",
                writes.len()
            );
        });
    }

    /// An ordinary answer (a head and a small body) is one write, and writes that stop
    /// before their slice is used up never yield.
    #[test]
    fn a_small_answer_is_one_write_without_a_yield() {
        executor().run(async {
            let mut io = Io::new(
                Recorder {
                    writes: Vec::new(),
                    cost: Duration::ZERO,
                },
                Duration::from_secs(5),
            );
            for _ in 0..100 {
                let pendings = write_all(&mut io, &[b"HTTP/1.1 201 Created\r\n\r\n", b"{}"]).await;
                assert_eq!(pendings, 0);
                let flushed = std::future::poll_fn(|cx| Pin::new(&mut io).poll_flush(cx)).await;
                assert!(flushed.is_ok());
            }
            assert_eq!(io.stream.writes.len(), 100);
            assert!(io
                .stream
                .writes
                .iter()
                .all(|w| w == b"HTTP/1.1 201 Created\r\n\r\n{}"));
        });
    }

    /// A peer that still has `chunks` of 4 KiB to send when the server closes, then closes.
    struct Sender {
        chunks: usize,
        shut: bool,
    }

    impl AsyncRead for Sender {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            if self.chunks == 0 {
                return Poll::Ready(Ok(0));
            }
            self.chunks -= 1;
            let n = buf.len().min(4096);
            buf[..n].fill(b'x');
            Poll::Ready(Ok(n))
        }
    }

    impl AsyncWrite for Sender {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            b: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(b.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.shut = true;
            Poll::Ready(Ok(()))
        }
    }

    /// A server connection's close sends its FIN, then reads what the client still sends until
    /// the client closes too (closing with unread bytes would send a reset, which can lose the
    /// last answer before the client reads it); a client connection just shuts its side.
    #[test]
    fn a_lingering_close_reads_what_the_peer_still_sends() {
        crate::runtime::cooperate::on_executor(async {
            let sender = Sender {
                chunks: 200,
                shut: false,
            };
            let wanted = Rc::new(Cell::new(false));
            let mut io = Io::new(sender, Duration::from_secs(5))
                .lingering(Duration::from_secs(5), wanted.clone());
            wanted.set(true);
            let closed = std::future::poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx)).await;
            assert!(closed.is_ok());
            assert!(io.stream.shut, "the FIN first");
            assert_eq!(io.stream.chunks, 0, "everything the peer sent was read");
            // Not wanted (no answer left a body unread): the close does not wait.
            let sender = Sender {
                chunks: 200,
                shut: false,
            };
            let mut io = Io::new(sender, Duration::from_secs(5))
                .lingering(Duration::from_secs(5), Rc::new(Cell::new(false)));
            let closed = std::future::poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx)).await;
            assert!(closed.is_ok() && io.stream.shut);
            assert_eq!(io.stream.chunks, 200, "no linger unless wanted");
            let sender = Sender {
                chunks: 200,
                shut: false,
            };
            let mut io = Io::new(sender, Duration::from_secs(5));
            let closed = std::future::poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx)).await;
            assert!(closed.is_ok() && io.stream.shut);
            assert_eq!(io.stream.chunks, 200, "a client connection does not linger");
        });
    }
}
