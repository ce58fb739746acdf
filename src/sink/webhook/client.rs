//! The shard's HTTP client for deliveries: hyper's HTTP/1.1 client over glommio sockets (and
//! rustls for https, through `futures-rustls`), with a keep-alive pool per target.
//!
//! One pool per shard, used only on its thread. A target is (scheme, host, port); its idle
//! connections wait in a stack (the most recently used first, so a quiet period lets the
//! oldest ones go). A connection serves one request at a time (HTTP/1.1), so the per-host cap
//! on deliveries in flight also caps the connections to a host. A connection goes back to the
//! pool only after its response was read whole; an idle one older than [`IDLE_MAX`] or closed
//! by the peer is dropped when it is next looked at.
//!
//! Host names are resolved by the process's resolver threads ([`crate::resolve`]: never on
//! the shard's thread, nor on the executor's blocking thread), which keep answers and
//! failures for a while and bound every lookup.
//!
//! A connection dropped while its request is unanswered (the attempt's timeout) is reset, not
//! closed, so none of the abandoned request's bytes reach the receiver later (`reset.rs`).
//!
//! Every resolved address is checked against the tenant's networks (`address.rs`) before a
//! connection is made, and only an address that passed is connected to: from the same lookup,
//! so DNS cannot answer one thing to the check and another to the connect. Idle connections are
//! pooled per (target, allowed networks), so a tenant never reuses a connection that another
//! tenant's wider networks let through. Each address gets its share of the attempt's time
//! (at least `MIN_CONNECT`), so a black-holed first address does not eat the whole attempt.
//! A pooled connection the peer closed while it was idle (the request fails before any answer)
//! is replaced once by a fresh one within the same attempt.
//!
//! What fails is a [`SendError`], by class: `Busy` (our own resolver had no room: the
//! receiver was never tried, and the attempt is not counted), `Resolve`, `Connect`, `Tls`
//! and `Http`, all retriable; `AddressNotAllowed`, permanent.
//!
//! Cost per delivery on a warm connection: one request written and one response read by hyper,
//! no allocation besides the request's and the response's.

use super::address::{self, Special};
use super::allow::AllowList;
use super::reset::{Busy, ResetOnAbandon};
use super::settings::Target;
use crate::resolve::{Caller, ResolveError, Resolver};
use crate::runtime::hyperio::Io;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Idle connections older than this are closed rather than reused (servers commonly close
/// keep-alive connections after 5 to 60 s; reusing one the peer is closing fails the request).
pub const IDLE_MAX: Duration = Duration::from_secs(4);

/// The least time one address of several gets to take the TCP connection.
const MIN_CONNECT: Duration = Duration::from_millis(250);

/// The most of a response body read (to keep the connection); a longer body closes it.
const MAX_RESPONSE_BODY: usize = 64 * 1024;

type Sender = SendRequest<Full<Bytes>>;

struct Idle {
    sender: Sender,
    busy: Busy,
    since: Instant,
}

/// Why a request got no answer, by class. Each is retriable; only `Busy` is not the
/// receiver's side of the network (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Our own resolver had no room for the lookup (its queue, or the tenant's share of it,
    /// was full): nothing was sent.
    #[error("{0}")]
    Busy(ResolveError),
    /// The host name gave no address: failed, none, or no answer within the deadline.
    #[error("{0}")]
    Resolve(ResolveError),
    /// No address took the TCP connection (the last one's error).
    #[error("{0}")]
    Connect(String),
    /// The TLS name was invalid or the handshake failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// HTTP/1.1 on the connection failed: the handshake, or the request and its answer.
    #[error("{0}")]
    Http(String),
    /// Every address the host resolved to is in a range the tenant may not reach
    /// (`address.rs`): permanent.
    #[error("{host}: no address may be reached ({refused})")]
    AddressNotAllowed { host: String, refused: String },
}

impl SendError {
    /// The class a tenant sees as `last_error`: no address, port or OS message.
    pub fn class(&self) -> &'static str {
        match self {
            SendError::Busy(_) => "resolver_busy",
            SendError::Resolve(_) => "dns",
            SendError::Connect(_) => "connect",
            SendError::Tls(_) => "tls",
            SendError::Http(_) => "http",
            SendError::AddressNotAllowed { .. } => "address_not_allowed",
        }
    }
}

impl From<ResolveError> for SendError {
    fn from(e: ResolveError) -> SendError {
        match e {
            ResolveError::Busy { .. } => SendError::Busy(e),
            _ => SendError::Resolve(e),
        }
    }
}

/// What the endpoint answered.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub retry_after: Option<hyper::header::HeaderValue>,
}

/// Where idle connections wait: the target, and the allowed networks they were checked under.
type PoolKey = (Target, u64);

pub struct Pool {
    tls: futures_rustls::TlsConnector,
    idle: RefCell<HashMap<PoolKey, Vec<Idle>>>,
    /// Where host names are looked up (the process's resolver, but for tests).
    resolver: &'static Resolver,
}

impl Pool {
    pub fn new(tls: Arc<rustls::ClientConfig>, resolver: &'static Resolver) -> Pool {
        Pool {
            tls: futures_rustls::TlsConnector::from(tls),
            idle: RefCell::new(HashMap::new()),
            resolver,
        }
    }

    /// Idle connections kept, all targets together.
    pub fn idle_connections(&self) -> usize {
        self.idle.borrow().values().map(Vec::len).sum()
    }

    /// Sends `req` to `target` on a pooled connection (or a new one) and reads the answer.
    /// `allow` holds the networks the connection may reach; `stall` bounds a write that makes
    /// no progress and the connect. The caller bounds the whole exchange.
    pub async fn send(
        &self,
        target: &Target,
        tenant: &str,
        allow: &AllowList,
        req: Request<Full<Bytes>>,
        stall: Duration,
    ) -> Result<Answer, SendError> {
        let key = (target.clone(), allow.networks_id());
        let (mut sender, mut busy, again) = match self.take_idle(&key) {
            // Kept for one more try should the pooled connection turn out closed.
            Some((sender, busy)) => (sender, busy, Some(req.clone())),
            None => {
                let (sender, busy) = self.connect(target, tenant, allow, stall).await?;
                (sender, busy, None)
            }
        };
        // Until the answer was read whole, dropping this connection resets it (`reset.rs`).
        busy.start();
        let resp = match (sender.send_request(req).await, again) {
            (Ok(resp), _) => resp,
            // A pooled connection the peer closed while idle: once more on a fresh one.
            (Err(e), Some(req))
                if e.is_canceled() || e.is_closed() || e.is_incomplete_message() =>
            {
                tracing::debug!(host = %target.host, "a pooled connection was closed: {e}; reconnecting");
                (sender, busy) = self.connect(target, tenant, allow, stall).await?;
                busy.start();
                sender
                    .send_request(req)
                    .await
                    .map_err(|e| SendError::Http(format!("request failed: {e}")))?
            }
            (Err(e), _) => return Err(SendError::Http(format!("request failed: {e}"))),
        };
        let status = resp.status();
        let retry_after = resp.headers().get(hyper::header::RETRY_AFTER).cloned();
        // Read the body whole so the connection can serve the next delivery.
        let body = Limited::new(resp.into_body(), MAX_RESPONSE_BODY)
            .collect()
            .await;
        if body.is_ok() && !sender.is_closed() {
            busy.done();
            self.idle.borrow_mut().entry(key).or_default().push(Idle {
                sender,
                busy,
                since: Instant::now(),
            });
        }
        Ok(Answer {
            status,
            retry_after,
        })
    }

    /// The most recently used idle connection to `target` that is still open and fresh.
    fn take_idle(&self, key: &PoolKey) -> Option<(Sender, Busy)> {
        let mut idle = self.idle.borrow_mut();
        let stack = idle.get_mut(key)?;
        let now = Instant::now();
        // The oldest are at the front: drop the stale ones there first.
        stack
            .retain(|c| now.saturating_duration_since(c.since) < IDLE_MAX && !c.sender.is_closed());
        while let Some(c) = stack.pop() {
            if c.sender.is_ready() {
                return Some((c.sender, c.busy));
            }
        }
        None
    }

    /// A new connection to `target`: TCP (and TLS for https), then hyper's handshake; the
    /// connection's task runs on this shard until the peer or the pool closes it.
    async fn connect(
        &self,
        target: &Target,
        tenant: &str,
        allow: &AllowList,
        stall: Duration,
    ) -> Result<(Sender, Busy), SendError> {
        let addrs = self
            .resolver
            .resolve(&target.host, target.port, Caller::Tenant(tenant))
            .await?;
        let (allowed, refused): (Vec<_>, Vec<_>) = addrs
            .iter()
            .map(|a| (*a, address::check(a.ip(), allow.networks())))
            .partition(|(_, verdict)| verdict.is_ok());
        if allowed.is_empty() {
            let refused = describe_refused(&refused);
            tracing::warn!(
                tenant,
                host = %target.host,
                %refused,
                "webhook refused: the callback's host resolves only to addresses outside the public internet; list them in callback_allow_networks to allow them"
            );
            return Err(SendError::AddressNotAllowed {
                host: target.host.clone(),
                refused,
            });
        }
        // Each address gets its share of the time, so a black-holed one leaves time for the rest.
        let share = (stall / allowed.len().max(1) as u32).max(MIN_CONNECT);
        let mut last = String::from("no address");
        let mut stream = None;
        for (addr, _) in &allowed {
            let connect = async {
                glommio::net::TcpStream::connect(*addr)
                    .await
                    .map_err(|e| e.to_string())
            };
            let expire = async {
                glommio::timer::sleep(share).await;
                Err(format!("no answer within {} ms", share.as_millis()))
            };
            match futures_lite::future::or(connect, expire).await {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = format!("connect {addr}: {e}"),
            }
        }
        let stream = stream.ok_or(SendError::Connect(last))?;
        let _ = stream.set_nodelay(true);
        let busy = Busy::default();
        // Busy from the start: a handshake cut short resets too.
        busy.start();
        let stream = ResetOnAbandon::new(stream, busy.clone());
        let sender = if target.https {
            let name = rustls_pki_types::ServerName::try_from(target.host.clone())
                .map_err(|e| SendError::Tls(format!("name {:?}: {e}", target.host)))?;
            let tls = self
                .tls
                .connect(name, stream)
                .await
                .map_err(|e| SendError::Tls(format!("handshake: {e}")))?;
            handshake(tls, stall).await?
        } else {
            handshake(stream, stall).await?
        };
        Ok((sender, busy))
    }
}

/// hyper's HTTP/1.1 handshake over `stream` (TCP, or TLS over it); the connection's task runs
/// on this shard until the peer or the pool closes it.
async fn handshake<S>(stream: S, stall: Duration) -> Result<Sender, SendError>
where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake(Io::new(stream, stall))
        .await
        .map_err(|e| SendError::Http(format!("HTTP handshake: {e}")))?;
    glommio::spawn_local(async move {
        let _ = conn.await;
    })
    .detach();
    Ok(sender)
}

/// "addr (class), …" for the operator's log.
fn describe_refused(refused: &[(std::net::SocketAddr, Result<(), Special>)]) -> String {
    refused
        .iter()
        .map(|(a, v)| match v {
            Err(class) => format!("{} ({})", a.ip(), class.name()),
            Ok(()) => a.ip().to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
