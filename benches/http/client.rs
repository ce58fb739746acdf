//! The bench's HTTP/1.1 clients, on their own glommio threads: hyper's client on keep-alive
//! connections (one request in flight each, as an ordinary client pool's connection), and a
//! pipelined client that keeps `depth` requests in flight on each connection and reads the
//! answers with `httparse`.
//!
//! Every exchange is bounded by [`EXCHANGE_TIMEOUT`]: a server that stops answering ends the
//! connection's task with an error instead of hanging the bench.

use bytes::Bytes;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::TcpStream;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The most one request and its answer may take.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// A glommio socket as hyper's I/O: reads go through a buffer of our own, zeroed once (one
/// copy of each answer, a few hundred bytes for a PUT), so no uninitialised memory is handled
/// here.
struct Io {
    stream: TcpStream,
    chunk: Box<[u8]>,
}

impl hyper::rt::Read for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let want = buf.remaining().min(this.chunk.len());
        match Pin::new(&mut this.stream).poll_read(cx, &mut this.chunk[..want]) {
            Poll::Ready(Ok(n)) => {
                buf.put_slice(&this.chunk[..n]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl hyper::rt::Write for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_close(cx)
    }
}

/// `fut`, or `Err` once `limit` has passed.
async fn bounded<T>(
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    futures_lite::future::or(fut, async {
        glommio::timer::sleep(limit).await;
        Err(format!("{what}: no answer within {limit:?}"))
    })
    .await
}

/// One keep-alive connection driven by hyper's client.
pub struct KeepAlive {
    sender: SendRequest<Full<Bytes>>,
}

impl KeepAlive {
    /// Connects to `addr` and spawns the connection's task on this executor.
    pub async fn connect(addr: SocketAddr) -> Result<KeepAlive, String> {
        bounded(EXCHANGE_TIMEOUT, "connect", async {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect {addr}: {e}"))?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            let io = Io {
                stream,
                chunk: vec![0u8; 16 * 1024].into_boxed_slice(),
            };
            let (sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            glommio::spawn_local(async move {
                let _ = conn.await;
            })
            .detach();
            Ok(KeepAlive { sender })
        })
        .await
    }

    /// Sends one request and reads its answer whole: status and body.
    pub async fn send(&mut self, req: hyper::Request<Full<Bytes>>) -> Result<(u16, Bytes), String> {
        let sender = &mut self.sender;
        bounded(EXCHANGE_TIMEOUT, "request", async move {
            sender
                .ready()
                .await
                .map_err(|e| format!("connection: {e}"))?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| format!("request: {e}"))?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            Ok((status, body))
        })
        .await
    }
}

/// Answers counted by a pipelined connection.
#[derive(Default, Clone, Copy)]
pub struct Counts {
    pub ok: u64,
    pub other: u64,
}

/// Until `end`, keeps `depth` requests in flight on one connection (the `k`-th is the whole
/// HTTP/1.1 request `request(k)`), then reads the rest of the answers; counts them.
pub async fn pipelined(
    addr: SocketAddr,
    depth: usize,
    end: Instant,
    request: impl Fn(u64) -> Vec<u8>,
) -> Result<Counts, String> {
    let mut stream = bounded(EXCHANGE_TIMEOUT, "connect", async {
        TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))
    })
    .await?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (mut sent, mut counts) = (0u64, Counts::default());
    let mut out = Vec::new();
    for _ in 0..depth {
        out.extend_from_slice(&request(sent));
        sent += 1;
    }
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if !out.is_empty() {
            bounded(EXCHANGE_TIMEOUT, "write", async {
                stream.write_all(&out).await.map_err(|e| e.to_string())
            })
            .await?;
            out.clear();
        }
        let answered = counts.ok + counts.other;
        if answered == sent {
            return Ok(counts);
        }
        let n = bounded(EXCHANGE_TIMEOUT, "read", async {
            stream.read(&mut chunk).await.map_err(|e| e.to_string())
        })
        .await?;
        if n == 0 {
            return Err("the server closed a pipelined connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut used = 0;
        while let Some((len, status)) = complete_response(&buf[used..])? {
            used += len;
            if (200..300).contains(&status) {
                counts.ok += 1;
            } else {
                counts.other += 1;
            }
            if Instant::now() < end {
                out.extend_from_slice(&request(sent));
                sent += 1;
            }
        }
        buf.drain(..used);
    }
}

/// The length and status of the first complete response in `buf`, `None` while incomplete.
fn complete_response(buf: &[u8]) -> Result<Option<(usize, u16)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(buf) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("unparsable response: {e}")),
    };
    let len = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        })
        .ok_or("a response without content-length")?;
    let status = resp.code.unwrap_or(0);
    Ok((buf.len() >= head + len).then_some((head + len, status)))
}
