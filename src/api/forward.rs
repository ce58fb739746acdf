//! Forwarding: a keyed request (or a batch's sub-batch) for a partition another live node owns
//! is sent to that node's advertised address and its answer relayed as if local.
//!
//! # What this part owns
//!
//! Each shard's [`Peers`]: per peer, a small pool of kept-alive HTTP/1.1 connections (hyper's
//! client over glommio sockets, on the shard's own executor) and the count of forwards in
//! flight to it; the [`FORWARDED`] header; the deadline; and the [`ForwardStats`] that
//! `/metrics` shows. Who owns a partition is the node loop's routing view
//! (`nodes::routing`), read once per request ([`view`]).
//!
//! # Invariants
//!
//! - **No loops.** Every forward carries [`FORWARDED`] with this node's id, and a request that
//!   carries it is never forwarded again ([`view`] answers none): the node answers it itself,
//!   which for a partition it does not hold is the shard's `503 store_unavailable` naming it.
//! - **The owner decides.** The forward carries the caller's `Authorization` as it came; the
//!   owner checks the tenant's admission again as for any request, so the header grants
//!   nothing but stopping a further hop. Under the cluster's secret every forward is signed
//!   and the owner refuses a [`FORWARDED`] request that does not prove it
//!   (`forward_sign.rs`): only a node of the cluster can mark one. The node that forwards has
//!   checked the admission first, so a request it refuses costs the owner nothing; a
//!   forwarded request counts against the tenant's rate on both nodes.
//! - **Relayed, never invented.** What the caller gets is the owner's status, body and the
//!   headers that matter (`content-type`, `retry-after`, `www-authenticate`, `allow`; and a
//!   listing's `punctual-covered`, `list.rs`, read by the node that merges it), or a
//!   `503 peer_unavailable` when the owner gave no answer: an answer of success only ever
//!   comes from the owner. Under the cluster's secret only an answer that proves it for this
//!   very forward is relayed (`forward_answer.rs`); any other is an error too, logged and
//!   counted (`unverified`), and its connection is closed. A forward that timed out may still have been applied there (as
//!   any request whose answer was lost): asking again is safe, a PUT replaces.
//!
//! # Bounds, and what waits when a peer stops answering
//!
//! Per shard and peer at most [`MAX_IN_FLIGHT`] forwards are in flight (one connection each,
//! HTTP/1.1), and at most as many idle connections are kept; one more forward is answered
//! `503 peer_unavailable` at once, never queued. Every forward gives up after
//! [`FORWARD_TIMEOUT`], connect and answer together; its connection is then closed (its
//! task dropped), so a peer that stops answering holds no socket past the deadline. What
//! grows when a peer stops answering is nothing of ours: the callers' own connections wait,
//! each at most [`FORWARD_TIMEOUT`], and those are bounded by `max_connections`; the
//! forwards to that peer stay at [`MAX_IN_FLIGHT`] per shard and the rest are refused.
//! Memory: a forward's body is a copy of (part of) the caller's body, held as long as the
//! caller's request, so what `max_connections` × the body limits bound today at most doubles.
//! The map of peers forgets a peer once nothing is in flight to it and no connection to it is
//! kept, and sweeps those whose kept connections all closed or went stale once it knows more
//! than [`SWEEP_ABOVE`]: nodes replaced under new addresses do not grow it.
//!
//! Addresses are `host:port`. An IP literal is connected to directly; a host name is
//! resolved by the process's resolver threads (`crate::resolve`), never on the shard's
//! thread, in the store's lane (the nodes are infrastructure, as Redis is, and a tenant's
//! share of the webhook lane must not decide whether its requests reach their owner); an
//! answer is kept and served stale while refreshed, so a name costs one lookup, not one a
//! request.
//!
//! # Cost model
//!
//! A request for a local partition: one mutex lock and an `Arc` clone for the view, and the
//! key's partition (FNV-1a). A forward on a warm connection: the request written and the
//! answer read whole (up to [`MAX_ANSWER`]) by hyper, plus one network round trip.

use super::error::ApiError;
use super::forward_answer::{verify, AnswerHead, ANSWER_SIGNATURE, RELAYED};
use super::respond::Resp;
use crate::nodes::node::Holdings;
use crate::nodes::routing::{Owner, Routing};
use crate::partition::partition_of;
use crate::resolve::Caller;
use crate::runtime::hyperio::Io;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use super::forward_sign::FORWARDED;

/// The longest a forward takes, connect and answer together.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

/// Forwards in flight per shard and peer (and idle connections kept to it).
pub const MAX_IN_FLIGHT: usize = 64;

/// Peers known to a shard past which a forward first forgets those with nothing in flight
/// and no connection left open and fresh: the map stays about as large as the live set.
const SWEEP_ABOVE: usize = 16;

/// An idle connection older than this is closed rather than reused: well under the peer's
/// idle timeout (30 s by default), so the peer never closes one as it is reused.
const IDLE_MAX: Duration = Duration::from_secs(10);

/// The largest answer read (a batch of 10,000 results is about a megabyte).
const MAX_ANSWER: usize = 32 * 1024 * 1024;

pub use super::forward_answer::COVERED;

/// Why a forward got no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("the node {peer} that owns this partition has {limit} requests in flight from this one; retry shortly")]
    Busy { peer: String, limit: usize },
    #[error("the node {peer} that owns this partition did not answer within {ms} ms")]
    Timeout { peer: String, ms: u64 },
    #[error("the node {peer} that owns this partition cannot be reached: {reason}")]
    Unreachable { peer: String, reason: String },
    #[error("the answer of {peer}, given as the node that owns this partition, was not relayed: {reason}; the request may or may not have been applied there")]
    Unverified { peer: String, reason: &'static str },
}

impl From<ForwardError> for ApiError {
    fn from(e: ForwardError) -> Self {
        ApiError::PeerUnavailable(e.to_string())
    }
}

/// Where a keyed request is answered (`App::route_keyed`).
pub enum Here {
    /// On this node.
    Local(Request<super::unread::RequestBody>),
    /// By the node that owns its partition: its answer.
    Forwarded(Resp),
}

/// Forwards by outcome, all shards together (`/metrics`).
#[derive(Debug)]
pub struct ForwardStats {
    /// The owner answered (whatever its status).
    pub answered: AtomicU64,
    /// Refused at once: [`MAX_IN_FLIGHT`] to that peer.
    pub busy: AtomicU64,
    pub timeout: AtomicU64,
    /// No connection, or the exchange failed.
    pub unreachable: AtomicU64,
    /// Answered without proving the cluster's secret: not relayed (`forward_answer.rs`).
    pub unverified: AtomicU64,
    /// How long the answered forwards took.
    pub latency: Histogram,
    /// Forwarded requests this node refused, their signature missing, stale or wrong
    /// (`forward_sign.rs`).
    pub refused: super::forward_sign::Refused,
}

impl Default for ForwardStats {
    fn default() -> Self {
        ForwardStats {
            answered: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            timeout: AtomicU64::new(0),
            unreachable: AtomicU64::new(0),
            unverified: AtomicU64::new(0),
            // 100 µs to about 6.5 s, in powers of 2: past the deadline (5 s) nothing is answered.
            latency: Histogram::new(exponential_buckets(1e-4, 2.0, 17)),
            refused: Default::default(),
        }
    }
}

impl ForwardStats {
    fn count(&self, outcome: &Result<Answer, ForwardError>, took: Duration) {
        let c = match outcome {
            Ok(_) => {
                self.latency.observe(took.as_secs_f64());
                &self.answered
            }
            Err(ForwardError::Busy { .. }) => &self.busy,
            Err(ForwardError::Timeout { .. }) => &self.timeout,
            Err(ForwardError::Unreachable { .. }) => &self.unreachable,
            Err(ForwardError::Unverified { .. }) => &self.unverified,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The view to route a request by: none on a node alone, and none for a request that came
/// forwarded (it is answered here, never sent on).
pub fn view(node: Option<&Arc<Holdings>>, headers: &HeaderMap) -> Option<Arc<Routing>> {
    if headers.contains_key(FORWARDED) {
        return None;
    }
    Some(node?.routing.current())
}

/// The peer to forward (tenant, key) to: the owner by `view` when it is another node.
pub fn peer_of(view: Option<&Routing>, tenant: &str, key: &str) -> Option<Arc<str>> {
    match view?.owner(partition_of(tenant, key)) {
        Owner::Other(addr) => Some(addr.clone()),
        Owner::Me | Owner::Unknown => None,
    }
}

/// What a peer answered, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// One of the headers kept from the peer's answer.
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.headers.get(name)
    }

    /// The answer as this node's response.
    pub fn into_resp(self) -> Resp {
        let mut r = Response::new(Full::new(self.body));
        *r.status_mut() = self.status;
        *r.headers_mut() = self.headers;
        r
    }
}

/// What one forward sends.
pub struct Outgoing<'a> {
    pub method: Method,
    /// Path and query.
    pub path: &'a str,
    pub auth: Option<&'a HeaderValue>,
    pub body: Bytes,
}

type Sender = SendRequest<Full<Bytes>>;

/// A kept-alive connection: dropping it ends its task, which closes the socket.
struct Conn {
    sender: Sender,
    _task: glommio::Task<()>,
    since: Instant,
}

impl Conn {
    /// Still open, and idle for less than [`IDLE_MAX`]: worth keeping for reuse.
    fn fresh(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) < IDLE_MAX && !self.sender.is_closed()
    }
}

#[derive(Default)]
struct Peer {
    idle: Vec<Conn>,
    in_flight: usize,
}

/// One shard's connections to its peers (used only on the shard's thread).
pub struct Peers {
    me: HeaderValue,
    /// The cluster's secret, that every forward is signed with (`forward_sign.rs`).
    secret: Option<Arc<[u8]>>,
    peers: RefCell<HashMap<Arc<str>, Peer>>,
    stats: Arc<ForwardStats>,
}

/// A forward in flight, counted until dropped.
struct InFlight<'a> {
    peers: &'a Peers,
    peer: &'a Arc<str>,
}

impl Drop for InFlight<'_> {
    /// Gives the place back, and forgets the peer once nothing is in flight to it and no
    /// connection to it is kept (a peer that failed, or an address no longer routed to).
    fn drop(&mut self) {
        let mut peers = self.peers.peers.borrow_mut();
        if let Some(p) = peers.get_mut(self.peer) {
            p.in_flight = p.in_flight.saturating_sub(1);
            if p.in_flight == 0 && p.idle.is_empty() {
                peers.remove(self.peer);
            }
        }
    }
}

impl Peers {
    /// `me`: this node's id, sent in [`FORWARDED`]; `secret`: the cluster's, that signs
    /// every forward.
    pub fn new(me: &str, secret: Option<&[u8]>, stats: Arc<ForwardStats>) -> Peers {
        Peers {
            me: HeaderValue::from_str(me).unwrap_or(HeaderValue::from_static("node")),
            secret: secret.map(Arc::from),
            peers: RefCell::new(HashMap::new()),
            stats,
        }
    }

    /// Sends `out` to `peer` and reads its answer whole, within [`FORWARD_TIMEOUT`].
    pub async fn forward(
        &self,
        peer: &Arc<str>,
        out: Outgoing<'_>,
    ) -> Result<Answer, ForwardError> {
        let started = Instant::now();
        let result = match self.enter(peer) {
            None => Err(ForwardError::Busy {
                peer: peer.to_string(),
                limit: MAX_IN_FLIGHT,
            }),
            Some(_slot) => {
                let exchange = self.exchange(peer, &out);
                let expire = async {
                    glommio::timer::sleep(FORWARD_TIMEOUT).await;
                    Err(ForwardError::Timeout {
                        peer: peer.to_string(),
                        ms: FORWARD_TIMEOUT.as_millis() as u64,
                    })
                };
                futures_lite::future::or(exchange, expire).await
            }
        };
        self.stats.count(&result, started.elapsed());
        match &result {
            Err(e @ ForwardError::Unverified { .. }) => tracing::warn!(
                %peer,
                error = %e,
                "forward: an answer that does not prove the cluster's secret was not relayed (the caller is answered 503 peer_unavailable): a node with another secret or of an earlier version, a node refusing connections over its cap, or a listener at this address that is not a node"
            ),
            Err(e) => tracing::debug!(%peer, error = %e, "forward failed"),
            Ok(_) => {}
        }
        result
    }

    fn enter<'a>(&'a self, peer: &'a Arc<str>) -> Option<InFlight<'a>> {
        let mut peers = self.peers.borrow_mut();
        if peers.len() > SWEEP_ABOVE {
            // Addresses that changed (nodes replaced) leave entries that only kept idle
            // connections: drop the stale and closed ones, and the peers left with none.
            let now = Instant::now();
            peers.retain(|_, p| {
                p.idle.retain(|c| c.fresh(now));
                p.in_flight > 0 || !p.idle.is_empty()
            });
        }
        let p = peers.entry(peer.clone()).or_default();
        if p.in_flight >= MAX_IN_FLIGHT {
            return None;
        }
        p.in_flight += 1;
        Some(InFlight { peers: self, peer })
    }

    /// The signature of `out` under the cluster's secret (none without one).
    async fn sign(&self, out: &Outgoing<'_>) -> Option<HeaderValue> {
        let secret = self.secret.as_deref()?;
        let auth = out.auth.map_or(&[][..], HeaderValue::as_bytes);
        let (method, me) = (out.method.as_str(), self.me.as_bytes());
        super::forward_sign::sign(secret, method, out.path, me, auth, &out.body).await
    }

    async fn exchange(&self, peer: &Arc<str>, out: &Outgoing<'_>) -> Result<Answer, ForwardError> {
        let fail = |reason: String| ForwardError::Unreachable {
            peer: peer.to_string(),
            reason,
        };
        let (mut conn, pooled) = match self.take_idle(peer) {
            Some(c) => (c, true),
            None => (connect(peer).await.map_err(fail)?, false),
        };
        let mut signature = self.sign(out).await;
        let resp = match conn
            .sender
            .send_request(self.request(peer, out, signature.as_ref()))
            .await
        {
            Ok(r) => r,
            // A pooled connection the peer closed while idle: once more on a fresh one, signed
            // anew (the owner serves a nonce once, and may have read the first).
            Err(e) if pooled && (e.is_canceled() || e.is_closed() || e.is_incomplete_message()) => {
                conn = connect(peer).await.map_err(fail)?;
                signature = self.sign(out).await;
                conn.sender
                    .send_request(self.request(peer, out, signature.as_ref()))
                    .await
                    .map_err(|e| fail(format!("request failed: {e}")))?
            }
            Err(e) => return Err(fail(format!("request failed: {e}"))),
        };
        let status = resp.status();
        let mut headers = HeaderMap::new();
        for name in RELAYED {
            if let Some(v) = resp.headers().get(&name) {
                headers.insert(name, v.clone());
            }
        }
        // What a node listed whole, for a bulk cancel (`list.rs`): never relayed to a caller,
        // as a forwarded listing's answer is merged, not relayed; signed with the answer.
        if let Some(v) = resp.headers().get(COVERED) {
            headers.insert(COVERED, v.clone());
        }
        let given = resp.headers().get(ANSWER_SIGNATURE).cloned();
        let body = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| fail(format!("the answer could not be read: {e}")))?
            .to_bytes();
        if let Some(secret) = self.secret.as_deref() {
            let request = signature.as_ref().map_or(&[][..], HeaderValue::as_bytes);
            let h = AnswerHead {
                request,
                status,
                headers: &headers,
            };
            // Refused: the connection is dropped with it.
            verify(secret, &h, given.as_ref(), &body)
                .await
                .map_err(|why| ForwardError::Unverified {
                    peer: peer.to_string(),
                    reason: why.reason(),
                })?;
        }
        self.put_idle(peer, conn);
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    fn request(
        &self,
        peer: &str,
        out: &Outgoing<'_>,
        signature: Option<&HeaderValue>,
    ) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(out.body.clone()));
        *req.method_mut() = out.method.clone();
        if let Ok(uri) = out.path.parse() {
            *req.uri_mut() = uri;
        }
        let h = req.headers_mut();
        if let Ok(host) = HeaderValue::from_str(peer) {
            h.insert(HOST, host);
        }
        h.insert(FORWARDED, self.me.clone());
        if let Some(s) = signature {
            h.insert(super::forward_sign::SIGNATURE, s.clone());
        }
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(auth) = out.auth {
            h.insert(AUTHORIZATION, auth.clone());
        }
        req
    }

    /// The most recently used idle connection to `peer` still open, fresh and ready.
    fn take_idle(&self, peer: &Arc<str>) -> Option<Conn> {
        let mut peers = self.peers.borrow_mut();
        let idle = &mut peers.get_mut(peer)?.idle;
        let now = Instant::now();
        idle.retain(|c| c.fresh(now));
        while let Some(c) = idle.pop() {
            if c.sender.is_ready() {
                return Some(c);
            }
        }
        None
    }

    fn put_idle(&self, peer: &Arc<str>, mut conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        let mut peers = self.peers.borrow_mut();
        let p = peers.entry(peer.clone()).or_default();
        if p.idle.len() < MAX_IN_FLIGHT {
            conn.since = Instant::now();
            p.idle.push(conn);
        }
    }
}

/// `host:port` (a host name, an IPv4 literal or a bracketed IPv6 one) as host and port.
fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?)).filter(|(h, _)| !h.is_empty())
}

/// A new connection to `peer` (resolved off the shard's thread if a host name), with hyper's
/// handshake; its task runs on this shard until the connection is dropped.
async fn connect(peer: &str) -> Result<Conn, String> {
    let (host, port) = split_addr(peer).ok_or_else(|| format!("{peer:?} is not host:port"))?;
    let addrs = crate::resolve::resolve(host, port, Caller::Store)
        .await
        .map_err(|e| e.to_string())?;
    let mut last = String::from("no address");
    let mut stream = None;
    for addr in addrs {
        match glommio::net::TcpStream::connect(addr).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("connect {addr}: {e}"),
        }
    }
    let stream = stream.ok_or(last)?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake(Io::new(stream, FORWARD_TIMEOUT))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    let task = glommio::spawn_local(async move {
        let _ = conn.await;
    });
    Ok(Conn {
        sender,
        _task: task,
        since: Instant::now(),
    })
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
