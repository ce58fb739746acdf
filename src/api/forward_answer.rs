//! Answers to forwards signed with the cluster's secret: the node that forwarded a request
//! relays the owner's answer only when it proves the secret and belongs to that very forward.
//!
//! # What this part owns
//!
//! The [`ANSWER_SIGNATURE`] header the owner puts on its answer to every forward ([`sign`],
//! in `http.rs` after the handler), and the forwarding node's check of it ([`verify`], in
//! `forward.rs` before relaying), with the count of answers refused that `/metrics` shows
//! (`punctual_cluster_forwards_total{outcome="unverified"}`).
//!
//! # The signature
//!
//! `punctual-answer-signature: s=<hex>`, where `s` is HMAC-SHA256 under the cluster's secret
//! of a domain tag, the forward's own [`SIGNATURE`] value as sent (its time, nonce and MAC:
//! unique per forward), the status, the relayed headers ([`RELAYED`], each value or nothing)
//! and the body, each part but the body followed by a newline. So an answer proves that a
//! node holding the secret gave it to this forward: a listener that does not hold it (behind
//! a node record copied or written with the secret, a hijacked address, a node of another
//! cluster) cannot make one, and an answer recorded for one forward does not verify for
//! another.
//!
//! # Invariants
//!
//! - **Never relayed unproven.** On a node given the secret, an answer whose signature is
//!   missing, malformed or wrong is not relayed, whatever its status: the caller gets `503
//!   peer_unavailable` saying so (`forward.rs`), the log says which node and why, and it is
//!   counted. Its connection is not kept.
//! - **Every answer to a forward is signed**, refusals included (a `401` for a forward signed
//!   outside the window is relayed as such): the owner signs whatever its handlers answered.
//!
//! # Cost model
//!
//! One HMAC-SHA256 over about 200 bytes and the answer's body, on each side, fed 64 KiB at a
//! time with a look at the slice between (`forward_sign::fed`); the owner collects its
//! answer's body (already whole: one `Bytes`, no copy).

use super::forward_sign::{fed, keyed, HmacSha256, SIGNATURE};
use super::respond::Resp;
use bytes::Bytes;
use hmac::Mac;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::header::{RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};
use subtle::ConstantTimeEq;

/// The header an answer's signature travels in.
pub const ANSWER_SIGNATURE: &str = "punctual-answer-signature";

/// The headers of an answer that are relayed to the caller, and signed.
pub const RELAYED: [HeaderName; 4] = [CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE, ALLOW];

/// The header a node's answer to a forwarded listing carries (`list.rs`): the partitions it
/// listed whole (`engine/list.rs`), as ranges (`0-511,700`). A bulk cancel lists a page again
/// until the nodes' answers cover every partition (`bulk_run.rs`). Kept by the forwarding
/// node, never relayed to a caller, and signed with the answer.
pub const COVERED: &str = "punctual-covered";

/// What an answer's MAC covers besides its body.
#[derive(Clone, Copy, Debug)]
pub struct AnswerHead<'a> {
    /// The forward's [`SIGNATURE`] value as sent (empty when it carried none).
    pub request: &'a [u8],
    pub status: StatusCode,
    /// The answer's headers (only [`RELAYED`] are covered).
    pub headers: &'a HeaderMap,
}

fn mac_of_head(secret: &[u8], h: &AnswerHead<'_>) -> HmacSha256 {
    let mut m = keyed(secret);
    for part in [
        &b"punctual answer"[..],
        h.request,
        h.status.as_str().as_bytes(),
    ] {
        m.update(part);
        m.update(b"\n");
    }
    for name in &RELAYED {
        m.update(h.headers.get(name).map_or(&[][..], HeaderValue::as_bytes));
        m.update(b"\n");
    }
    m.update(
        h.headers
            .get(COVERED)
            .map_or(&[][..], HeaderValue::as_bytes),
    );
    m.update(b"\n");
    m
}

/// The [`ANSWER_SIGNATURE`] value of `h` and `body` under `secret`, at once (for a small body,
/// or off the shards).
pub fn answer_signature(secret: &[u8], h: &AnswerHead<'_>, body: &[u8]) -> String {
    let mut m = mac_of_head(secret, h);
    m.update(body);
    format!("s={}", hex::encode(m.finalize().into_bytes()))
}

/// The forward's signature an answer to `headers` is bound to: its [`SIGNATURE`] value, or
/// nothing when it carried none.
pub fn bound_to(headers: &HeaderMap) -> Bytes {
    headers
        .get(SIGNATURE)
        .map_or_else(Bytes::new, |v| Bytes::copy_from_slice(v.as_bytes()))
}

/// `resp` with its [`ANSWER_SIGNATURE`] under `secret`, bound to the forward's signature
/// `request` (on the shard: the body is fed a slice at a time).
pub async fn sign(secret: &[u8], request: &[u8], resp: Resp) -> Resp {
    let (mut parts, body) = resp.into_parts();
    // A `Full` body is one chunk, already here; its error type has no values.
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let h = AnswerHead {
        request,
        status: parts.status,
        headers: &parts.headers,
    };
    let s = hex::encode(fed(mac_of_head(secret, &h), &body).await);
    if let Ok(v) = HeaderValue::from_str(&format!("s={s}")) {
        parts.headers.insert(ANSWER_SIGNATURE, v);
    }
    Response::from_parts(parts, Full::new(body))
}

/// Why an answer was not relayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unproven {
    /// No [`ANSWER_SIGNATURE`], or not one of this form.
    Missing,
    /// The MAC does not match: another secret, an answer changed on the way, or one given to
    /// another forward.
    Wrong,
}

impl Unproven {
    pub fn reason(self) -> &'static str {
        match self {
            Unproven::Missing => "it carries no punctual-answer-signature: not a node of this cluster, a node of a version that predates signed answers, or a node refusing connections over its cap",
            Unproven::Wrong => "its punctual-answer-signature does not prove the cluster's secret for this forward: a node with another secret, an answer changed on the way, or one replayed from another forward",
        }
    }
}

/// Whether the answer (`h`, `body`) carries `given`, the signature under `secret` for the
/// forward signed `h.request`.
pub async fn verify(
    secret: &[u8],
    h: &AnswerHead<'_>,
    given: Option<&HeaderValue>,
    body: &[u8],
) -> Result<(), Unproven> {
    let given = given
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("s="))
        .and_then(|s| hex::decode(s).ok())
        .and_then(|s| <[u8; 32]>::try_from(s).ok())
        .ok_or(Unproven::Missing)?;
    let expected = fed(mac_of_head(secret, h), body).await;
    if bool::from(expected.ct_eq(&given)) {
        Ok(())
    } else {
        Err(Unproven::Wrong)
    }
}

#[cfg(test)]
#[path = "forward_answer_tests.rs"]
mod tests;
