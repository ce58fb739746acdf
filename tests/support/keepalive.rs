//! One persistent HTTP/1.1 connection for load tests and benches: requests go out one at a
//! time on the same socket (keep-alive, no pipelining), the way an ordinary client pool's
//! connection behaves. After a transport error the socket is dropped and the next request
//! opens a new one, so a caller decides what a failed exchange means for its own model.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A response: status and body (every keep-alive response carries `content-length`, or is a
/// 204/304 with no body).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

pub struct KeepAlive {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    /// Bytes read past the end of the previous response (none in practice: one request at a
    /// time), kept so that a misbehaving server does not desynchronise the next exchange.
    buf: Vec<u8>,
    timeout: Duration,
}

impl KeepAlive {
    /// A connection to `addr`, opened lazily by the first request. `timeout` bounds every
    /// read and write.
    pub fn new(addr: SocketAddr, timeout: Duration) -> KeepAlive {
        KeepAlive {
            addr,
            stream: None,
            buf: Vec::new(),
            timeout,
        }
    }

    /// Sends one request and reads its response. On an error the connection is closed; the
    /// request may or may not have reached the server.
    pub fn send(&mut self, method: &str, path: &str, body: &[u8]) -> io::Result<Reply> {
        let result = self.exchange(method, path, body);
        if result.is_err() {
            self.stream = None;
            self.buf.clear();
        }
        result
    }

    fn exchange(&mut self, method: &str, path: &str, body: &[u8]) -> io::Result<Reply> {
        if self.stream.is_none() {
            let s = TcpStream::connect(self.addr)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(self.timeout))?;
            s.set_write_timeout(Some(self.timeout))?;
            self.stream = Some(s);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(io::Error::other("no connection"));
        };
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: punctual\r\ncontent-length: {}\r\n",
            body.len()
        );
        if !body.is_empty() {
            req.push_str("content-type: application/json\r\n");
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        stream.write_all(&bytes)?;
        let reply = read_reply(stream, &mut self.buf)?;
        if reply.close {
            self.stream = None;
            self.buf.clear();
        }
        Ok(Reply {
            status: reply.status,
            body: reply.body,
        })
    }
}

struct RawReply {
    status: u16,
    body: Vec<u8>,
    close: bool,
}

fn read_reply(s: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<RawReply> {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before a response",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("bad head: {head}")))?;
    let mut len = None;
    let mut close = false;
    for (k, v) in lines.filter_map(|l| l.split_once(':')) {
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            len = v.parse::<usize>().ok();
        } else if k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close") {
            close = true;
        }
    }
    let len = match (len, status) {
        (Some(len), _) => len,
        (None, 204 | 304) => 0,
        (None, _) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("response without content-length: {head}"),
            ))
        }
    };
    buf.drain(..head_end + 4);
    while buf.len() < len {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside a response body",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Vec<u8> = buf.drain(..len).collect();
    Ok(RawReply {
        status,
        body,
        close,
    })
}
