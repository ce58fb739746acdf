//! Forwards signed with the cluster's secret: a node proves to the owner of a partition that
//! a request marked [`FORWARDED`] comes from a node of the cluster, and the owner refuses one
//! that does not prove it.
//!
//! # What this part owns
//!
//! The [`SIGNATURE`] header a node puts on every forward ([`sign`]), and the owner's check of
//! it ([`check_time`] then [`verify`], before any handler runs: `admit` in `http.rs`), with the count of refusals that `/metrics` shows
//! (`punctual_cluster_forwards_refused`).
//!
//! # The signature
//!
//! `punctual-forward-signature: t=<unix ms>,n=<nonce>,s=<hex>`, where `s` is HMAC-SHA256
//! under the cluster's secret of a domain tag, the method, the path and query, the
//! forwarding node's id (the [`FORWARDED`] value), the caller's `Authorization`, `t`, the
//! nonce (unique per forward: `nonce`) and the body, each part but the body followed by a newline.
//! The owner recomputes it over what it received and compares in constant time; it refuses
//! (`401 unauthorized`, counted by reason) a forwarded request whose signature is missing or
//! malformed, whose `t` is more than [`WINDOW`] from its own clock either way, or whose MAC
//! does not match (another secret, or any part changed on the way).
//!
//! # Invariants
//!
//! - **Ordinary requests are untouched.** A request without [`FORWARDED`] is handed on as it
//!   came: nothing read, nothing computed.
//! - **Nothing acts before the check.** A forwarded request's body is read whole (within the
//!   larger of the two body limits and `body_timeout_ms`) and verified before any handler
//!   sees the request; a refused one changes nothing.
//! - **A node without a secret checks nothing.** Without `cluster_secret` a node has no
//!   `advertise` either (the configuration requires both together), so it routes nothing and
//!   the header means nothing there.
//!
//! # Replays and answers
//!
//! A forward is served once: after its MAC is verified the owner remembers its nonce until
//! its time leaves the window (`forward_replay.rs`) and refuses it again (`401`, counted
//! `replayed`). The owner's answer to a forward is signed in turn (`forward_answer.rs`),
//! bound to this forward's signature, and the forwarding node relays only an answer that
//! proves it.
//!
//! # Cost model
//!
//! One HMAC-SHA256 over the head (about 150 bytes) and the body, on each side, fed 64 KiB at a
//! time with a look at the slice between (`cooperate`), so a 16 MiB sub-batch does not hold
//! the shard; a count for the nonce. The owner reads a forwarded body before its handler
//! does, and the handler then reads it from memory (one more copy of the body, 64 KiB
//! frames, a slice at a time).

use super::error::ApiError;
use crate::runtime::cooperate::Slice;
use hmac::Mac;
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

/// The header a forwarded request carries (the id of the node that forwarded it).
pub const FORWARDED: &str = "punctual-forwarded";

/// The header a forward's signature travels in.
pub const SIGNATURE: &str = "punctual-forward-signature";

/// How far a forward's time may be from the owner's clock, either way: the forward's own
/// deadline (5 s) plus the clock skew tolerated between nodes.
pub const WINDOW: Duration = Duration::from_secs(30);

/// The part of the MAC fed at a time between looks at the slice.
const CHUNK: usize = 64 * 1024;

/// The length of a nonce: 32 hex digits ([`nonce`]).
pub const NONCE_LEN: usize = 32;

pub(super) type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// What a forward's MAC covers besides its body.
#[derive(Clone, Copy, Debug)]
pub struct Head<'a> {
    pub method: &'a str,
    /// Path and query, as sent.
    pub path: &'a str,
    /// The forwarding node's id (the [`FORWARDED`] value).
    pub node: &'a [u8],
    /// The caller's `Authorization`, empty when it sent none.
    pub auth: &'a [u8],
    /// When it was signed (UTC ms).
    pub t_ms: u64,
    pub nonce: &'a str,
}

/// Forwarded requests refused, by reason (`/metrics`).
#[derive(Debug, Default)]
pub struct Refused {
    /// No signature, or not one of this form.
    pub missing: AtomicU64,
    /// Signed more than [`WINDOW`] away from this node's clock.
    pub stale: AtomicU64,
    /// The MAC does not match: another secret, or a part changed.
    pub wrong: AtomicU64,
    /// A nonce already served within the window (`forward_replay.rs`).
    pub replayed: AtomicU64,
}

/// An HMAC-SHA256 under `secret` (HMAC takes a key of any length; the fallback is never
/// taken).
pub(super) fn keyed(secret: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(secret)
        .unwrap_or_else(|_| <HmacSha256 as Mac>::new(&Default::default()))
}

fn mac_of_head(secret: &[u8], h: &Head<'_>) -> HmacSha256 {
    let mut m = keyed(secret);
    let t = h.t_ms.to_string();
    for part in [
        &b"punctual forward"[..],
        h.method.as_bytes(),
        h.path.as_bytes(),
        h.node,
        h.auth,
        t.as_bytes(),
        h.nonce.as_bytes(),
    ] {
        m.update(part);
        m.update(b"\n");
    }
    m
}

/// The MAC of `h` and `body`, the body fed a chunk at a time with a look at the slice.
async fn mac_of(secret: &[u8], h: &Head<'_>, body: &[u8]) -> [u8; 32] {
    fed(mac_of_head(secret, h), body).await
}

/// `m` fed `body` a chunk at a time with a look at the slice between, and finished.
pub(super) async fn fed(mut m: HmacSha256, body: &[u8]) -> [u8; 32] {
    let mut slice = Slice::begin();
    for chunk in body.chunks(CHUNK) {
        m.update(chunk);
        if slice.is_over() {
            slice.next().await;
        }
    }
    m.finalize().into_bytes().into()
}

/// The [`SIGNATURE`] value of `h` and `body` under `secret`, at once (for a small body, or
/// off the shards).
pub fn signature(secret: &[u8], h: &Head<'_>, body: &[u8]) -> String {
    let mut m = mac_of_head(secret, h);
    m.update(body);
    let s = hex::encode(m.finalize().into_bytes());
    format!("t={},n={},s={s}", h.t_ms, h.nonce)
}

/// A fresh nonce, unique per forward of this process: 8 bytes drawn from the OS once per
/// process, then a count (a draw per forward would be a system call on the hot path).
pub fn nonce() -> String {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        let mut b = [0u8; 8];
        if getrandom::fill(&mut b).is_err() {
            // The OS's source failed: the start time keeps incarnations apart.
            b = now_ms().to_le_bytes();
        }
        u64::from_le_bytes(b)
    });
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix:016x}{n:016x}")
}

/// The wall clock in UTC ms.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The [`SIGNATURE`] value for a forward of `body` signed now (on the shard: the body is fed
/// a slice at a time).
pub async fn sign(
    secret: &[u8],
    method: &str,
    path: &str,
    node: &[u8],
    auth: &[u8],
    body: &[u8],
) -> Option<HeaderValue> {
    let nonce = nonce();
    let h = Head {
        method,
        path,
        node,
        auth,
        t_ms: now_ms(),
        nonce: &nonce,
    };
    let s = hex::encode(mac_of(secret, &h, body).await);
    HeaderValue::from_str(&format!("t={},n={nonce},s={s}", h.t_ms)).ok()
}

/// A signature's parts: `t`, the nonce and the MAC.
fn parse(v: &str) -> Option<(u64, &str, [u8; 32])> {
    let mut t = None;
    let mut n = None;
    let mut s = None;
    for part in v.split(',') {
        match part.trim().split_once('=')? {
            ("t", x) => t = Some(x.parse().ok()?),
            ("n", x) if x.len() == NONCE_LEN && x.bytes().all(|b| b.is_ascii_hexdigit()) => {
                n = Some(x)
            }
            ("s", x) => s = Some(<[u8; 32]>::try_from(hex::decode(x).ok()?).ok()?),
            _ => return None,
        }
    }
    Some((t?, n?, s?))
}

/// Why a forwarded request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Stale {
        off_ms: u64,
    },
    Wrong,
    /// Its nonce was served already, within the window.
    Replayed,
    /// Signed at or before the oldest time this node's memory of nonces still covers (it is
    /// full: `forward_replay.rs`), so a replay could not be told apart.
    Forgotten {
        behind_ms: u64,
    },
}

impl Refusal {
    pub fn error(&self) -> ApiError {
        ApiError::Unauthorized(match self {
            Refusal::Missing => format!(
                "a forwarded request ({FORWARDED}) must carry {SIGNATURE}: requests between nodes are signed with the cluster's secret"
            ),
            Refusal::Stale { off_ms } => format!(
                "the forward was signed {off_ms} ms away from this node's clock, more than the {} s allowed: a replay, or clocks that disagree",
                WINDOW.as_secs()
            ),
            Refusal::Wrong => format!(
                "the forward's {SIGNATURE} does not prove the cluster's secret: a node with another secret, or a request changed on the way"
            ),
            Refusal::Replayed => format!(
                "the forward's nonce was already served by this node within the last {} s: a replay of a forward, refused",
                WINDOW.as_secs()
            ),
            Refusal::Forgotten { behind_ms } => format!(
                "the forward was signed {behind_ms} ms before the oldest forward this node still remembers (its memory of nonces is full under this rate of forwards), so a replay could not be told apart: refused; a forward signed now is served"
            ),
        })
    }

    pub fn count(&self, r: &Refused) {
        let c = match self {
            Refusal::Missing => &r.missing,
            Refusal::Stale { .. } | Refusal::Forgotten { .. } => &r.stale,
            Refusal::Wrong => &r.wrong,
            Refusal::Replayed => &r.replayed,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A signature's time, nonce and MAC, its form and time checked.
pub type Signed = (u64, String, [u8; 32]);

/// The head's check: the signature's form and time (`now_ms`: this node's clock).
pub fn check_time(headers: &HeaderMap, now_ms: u64) -> Result<Signed, Refusal> {
    let v = headers.get(SIGNATURE).and_then(|v| v.to_str().ok());
    let (t, n, s) = v.and_then(parse).ok_or(Refusal::Missing)?;
    let off_ms = t.abs_diff(now_ms);
    if off_ms > WINDOW.as_millis() as u64 {
        return Err(Refusal::Stale { off_ms });
    }
    Ok((t, n.to_owned(), s))
}

/// Whether `body` and the head of `parts` carry the signature `given` under `secret`.
pub async fn verify(
    secret: &[u8],
    parts: &hyper::http::request::Parts,
    (t_ms, nonce, given): Signed,
    body: &[u8],
) -> Result<(), Refusal> {
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |p| p.as_str());
    let h = Head {
        method: parts.method.as_str(),
        path,
        node: parts
            .headers
            .get(FORWARDED)
            .map_or(&[][..], |v| v.as_bytes()),
        auth: parts
            .headers
            .get(AUTHORIZATION)
            .map_or(&[][..], |v| v.as_bytes()),
        t_ms,
        nonce: &nonce,
    };
    let expected = mac_of(secret, &h, body).await;
    if bool::from(expected.ct_eq(&given)) {
        Ok(())
    } else {
        Err(Refusal::Wrong)
    }
}

#[cfg(test)]
#[path = "forward_sign_tests.rs"]
mod tests;
