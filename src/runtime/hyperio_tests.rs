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
        let n =
            std::future::poll_fn(
                |cx| match Pin::new(&mut *io).poll_write_vectored(cx, &bufs) {
                    Poll::Pending => {
                        pendings += 1;
                        Poll::Pending
                    }
                    ready => ready,
                },
            )
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
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
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
