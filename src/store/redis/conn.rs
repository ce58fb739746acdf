//! One Redis connection on a glommio `TcpStream`, driven by the shard's own executor.
//!
//! Commands are encoded by the `redis` crate (`Cmd::write_packed_command`), replies decoded by
//! its streaming [`redis::Parser`]. The parser pulls bytes through a small [`Read`] adapter
//! (`Feed`) that hands it what the socket gave and answers `WouldBlock` when that is used
//! up; the parser keeps its partial state and its own buffer, so the next call, after another
//! socket read, resumes where it stopped. No RESP is written or parsed by hand here.
//!
//! A connection that fails in any way (I/O error, timeout, unparsable reply) is dropped whole:
//! the parser's state goes with it, and the caller reconnects.
//!
//! The server's host name is resolved by the process's resolver threads
//! ([`crate::resolve`]), never on the shard's thread (glommio's `connect_timeout` given a host
//! name would call `getaddrinfo` right there); the connect itself goes to the addresses.

use redis::{ConnectionAddr, ConnectionInfo, Value};
use std::io::{self, Read};
use std::time::Duration;

/// Why a round trip failed. Every variant means: drop this connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
    #[error("Redis closed the connection")]
    Closed,
    #[error("unparsable reply: {0}")]
    Protocol(String),
    #[error("{0}")]
    Glommio(String),
    #[error("handshake refused: {0}")]
    Handshake(String),
    #[error("unsupported address {0} (only TCP)")]
    Unsupported(String),
    #[error("{0}")]
    Resolve(#[from] crate::resolve::ResolveError),
}

/// Hands the parser the unread part of the last socket read; `WouldBlock` when it is used up.
struct Feed<'a> {
    data: &'a [u8],
    consumed: usize,
    starved: bool,
}

impl Read for Feed<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let rest = &self.data[self.consumed..];
        if rest.is_empty() || out.is_empty() {
            self.starved = true;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = rest.len().min(out.len());
        out[..n].copy_from_slice(&rest[..n]);
        self.consumed += n;
        Ok(n)
    }
}

/// Bytes read from the socket and not yet handed to the parser, and the parser.
pub struct ReplyReader {
    parser: redis::Parser,
    chunk: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for ReplyReader {
    fn default() -> Self {
        ReplyReader {
            parser: redis::Parser::new(),
            chunk: vec![0; 256 * 1024],
            start: 0,
            end: 0,
        }
    }
}

impl ReplyReader {
    /// The next complete reply from what was fed, or `Ok(None)` when more bytes are needed.
    pub fn next_value(&mut self) -> Result<Option<Value>, ConnError> {
        let mut feed = Feed {
            data: &self.chunk[self.start..self.end],
            consumed: 0,
            starved: false,
        };
        let r = self.parser.parse_value(&mut feed);
        self.start += feed.consumed;
        match r {
            Ok(v) => Ok(Some(v)),
            Err(_) if feed.starved => Ok(None),
            Err(e) => Err(ConnError::Protocol(e.to_string())),
        }
    }

    /// The buffer to read socket bytes into; call [`ReplyReader::filled`] with the count.
    pub fn space(&mut self) -> &mut [u8] {
        // Everything before `end` was handed to the parser once `next_value` returned None.
        self.start = 0;
        self.end = 0;
        &mut self.chunk[..]
    }

    pub fn filled(&mut self, n: usize) {
        self.end = n.min(self.chunk.len());
    }
}

/// A TCP connection to the first of `host`'s addresses that takes one, each within `timeout`;
/// the name is resolved off this thread, within the resolver's deadline.
async fn connect_any(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<glommio::net::TcpStream, ConnError> {
    let addrs = crate::resolve::resolve(host, port, crate::resolve::Caller::Store).await?;
    let mut last = ConnError::Resolve(crate::resolve::ResolveError::NoAddress {
        host: host.to_string(),
    });
    for addr in addrs {
        match glommio::net::TcpStream::connect_timeout(addr, timeout).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e.into(),
        }
    }
    Err(last)
}

impl From<glommio::GlommioError<()>> for ConnError {
    fn from(e: glommio::GlommioError<()>) -> Self {
        ConnError::Glommio(e.to_string())
    }
}

pub struct Conn {
    peer: String,
    stream: glommio::net::TcpStream,
    reader: ReplyReader,
    out: Vec<u8>,
}

impl Conn {
    /// Connects, authenticates and selects the database that `info` names.
    pub async fn connect(info: &ConnectionInfo, timeout: Duration) -> Result<Conn, ConnError> {
        let timeout = crate::units::capped(timeout);
        let (host, port) = match &info.addr {
            ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
            other => return Err(ConnError::Unsupported(other.to_string())),
        };
        let stream = connect_any(&host, port, timeout).await?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut conn = Conn {
            peer: format!("{host}:{port}"),
            stream,
            reader: ReplyReader::default(),
            out: Vec::with_capacity(64 * 1024),
        };
        let r = &info.redis;
        let mut hello = Vec::new();
        if let Some(password) = &r.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = &r.username {
                auth.arg(user);
            }
            auth.arg(password);
            hello.push(auth);
        }
        if r.db != 0 {
            hello.push(redis::cmd("SELECT").arg(r.db).clone());
        }
        if !hello.is_empty() {
            for c in &hello {
                c.write_packed_command(&mut conn.out);
            }
            let replies = conn.round_trip(hello.len()).await?;
            if let Some(Value::ServerError(e)) =
                replies.iter().find(|v| matches!(v, Value::ServerError(_)))
            {
                return Err(ConnError::Handshake(format!(
                    "{} {}",
                    e.code(),
                    e.details().unwrap_or("")
                )));
            }
        }
        Ok(conn)
    }

    /// The server's address, `host:port`, as connected to (the name, not the address).
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The buffer the next pipeline is encoded into (cleared by `round_trip`).
    pub fn out(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// Writes what was encoded into [`Conn::out`] and reads `replies` replies.
    pub async fn round_trip(&mut self, replies: usize) -> Result<Vec<Value>, ConnError> {
        self.send().await?;
        self.receive(replies).await
    }

    /// Writes what was encoded into [`Conn::out`], without waiting for replies (so that
    /// several pipelines can be in flight; Redis answers them in order).
    pub async fn send(&mut self) -> Result<(), ConnError> {
        use futures_lite::AsyncWriteExt;
        let written = self.stream.write_all(&self.out).await;
        self.out.clear();
        Ok(written?)
    }

    /// Reads the next `replies` replies.
    pub async fn receive(&mut self, replies: usize) -> Result<Vec<Value>, ConnError> {
        use futures_lite::AsyncReadExt;
        let mut values = Vec::with_capacity(replies);
        while values.len() < replies {
            if let Some(v) = self.reader.next_value()? {
                values.push(v);
                continue;
            }
            let n = self.stream.read(self.reader.space()).await?;
            if n == 0 {
                return Err(ConnError::Closed);
            }
            self.reader.filled(n);
        }
        Ok(values)
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
