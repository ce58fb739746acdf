//! The webhook side of the API: turning a registration's `callback` and `retry` into the
//! timer's delivery metadata (checked against the tenant's allow-list: no open relay), showing
//! a pending timer's delivery, and the dead-letter routes:
//!
//! | route | answer |
//! |---|---|
//! | `GET /v1/dead/{tenant}?limit=N&after=KEY` | 200 `{"dead": [...]}`, by key, at most N (default 100, at most 1,000) |
//! | `POST /v1/dead/{tenant}/{key}/retry` | 202 `{"tenant","key","version","fire_at_us"}`: delivered again now, a fresh attempt budget; 404 without a dead letter; 409 `timer_pending` while a timer is pending under the key |
//! | `DELETE /v1/dead/{tenant}/{key}` | 204, or 404 |

use super::array::read_array;
use super::body::Registration;
use super::error::ApiError;
use super::forward::Here;
use super::respond::{self, CallbackView, DeliveryView, Resp, RetryView, TimerBody};
use super::state::App;
use super::unread::RequestBody;
use crate::engine::{Cancelled, DeadInfo, TimerInfo};
use crate::runtime::cooperate::Slice;
use crate::sink::webhook::settings::CallbackError;
use crate::sink::webhook::{describe, new_meta};
use hyper::{Method, Request, StatusCode};
use serde::Serialize;
use serde_json::value::RawValue;

/// Dead letters listed when the request names no limit, and the most it may name.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

impl From<CallbackError> for ApiError {
    fn from(e: CallbackError) -> Self {
        match e {
            CallbackError::NotAllowed(_) | CallbackError::Off => {
                ApiError::CallbackNotAllowed(e.to_string())
            }
            CallbackError::Invalid { .. } | CallbackError::Retry(_) => {
                ApiError::InvalidField(e.to_string())
            }
        }
    }
}

impl App {
    /// The delivery metadata of a registration: empty without a callback (given or the
    /// tenant's default).
    pub fn meta_for(&self, tenant: &str, reg: &Registration<'_>) -> Result<Vec<u8>, ApiError> {
        let w = &self.shared.webhooks;
        let Some(url) = w.callback_for(tenant, reg.callback.as_deref())? else {
            if reg.retry.is_some() {
                return Err(ApiError::InvalidField(
                    "\"retry\" needs a \"callback\" (or a callback_url for the tenant)".into(),
                ));
            }
            return Ok(Vec::new());
        };
        let r = reg.retry;
        let policy = w.retry_for(
            tenant,
            r.and_then(|r| r.max_attempts),
            r.and_then(|r| r.base_delay_ms),
            r.and_then(|r| r.max_delay_ms),
        )?;
        Ok(new_meta(url, policy, reg.deadline.0))
    }

    /// `/v1/dead/{tenant}[/{key}[/retry]]`.
    pub(super) async fn dead(
        &self,
        tenant: &str,
        key: Option<&str>,
        retry: bool,
        req: Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        let allow = match (key, retry) {
            (None, _) => "GET",
            (Some(_), false) => "DELETE",
            (Some(_), true) => "POST",
        };
        if req.method().as_str() != allow {
            return Err(ApiError::MethodNotAllowed {
                method: req.method().to_string(),
                allow,
            });
        }
        self.check_read(tenant, &req)?;
        let Some(key) = key else {
            return self.list_dead(tenant, req).await;
        };
        crate::error::validate_letter_key(key)?;
        let req = match self.route_keyed(tenant, key, req).await? {
            Here::Local(req) => req,
            Here::Forwarded(resp) => return Ok(resp),
        };
        if *req.method() == Method::POST {
            let s = self.handle.redrive_async(tenant, key).await?;
            return Ok(respond::json_of(
                StatusCode::ACCEPTED,
                &respond::ScheduledBody::new(tenant, key, &s),
            ));
        }
        match self.handle.discard_dead_async(tenant, key).await? {
            Cancelled::Cancelled { .. } => Ok(respond::empty(StatusCode::NO_CONTENT)),
            Cancelled::NotFound => Err(ApiError::NotFound(format!(
                "no dead letter for tenant {tenant:?} and key {key:?}"
            ))),
        }
    }
}

impl App {
    /// `GET /v1/dead/{tenant}`: this node's first `limit` letters after `after`, merged by key
    /// with every other live node's, asked for the same page at once (on a node among others;
    /// a request that came forwarded is answered from this node's partitions alone). A page
    /// of the merged lists is the page of the whole cluster's list: each node's letters come
    /// sorted by key, and a node's first `limit` are all it can give to the first `limit` of
    /// the whole. A node that does not answer fails the list (`503 peer_unavailable`) rather
    /// than leave its letters out; a key listed by two nodes (one loading a partition the
    /// other has not dropped yet) is listed once.
    async fn list_dead(&self, tenant: &str, req: Request<RequestBody>) -> Result<Resp, ApiError> {
        let (limit, after) = list_query(req.uri().query())?;
        let (others, asks) = self.ask_others(&req);
        let mine = self
            .handle
            .dead_letters_async(tenant, after.as_deref(), limit)
            .await?;
        let mut theirs = Vec::with_capacity(asks.len());
        for ask in asks {
            theirs.push(ask.await);
        }
        if others.is_empty() {
            let bytes = mine.iter().map(DeadBody::bytes).sum();
            let dead = mine.iter().map(DeadBody::new);
            return Ok(respond::json_array_of(StatusCode::OK, "dead", dead, bytes).await);
        }
        let mut all: Vec<(String, Box<RawValue>)> = Vec::with_capacity(limit * (1 + others.len()));
        let mut slice = Slice::begin();
        for d in &mine {
            let raw = serde_json::value::to_raw_value(&DeadBody::new(d))
                .map_err(|e| ApiError::Internal(format!("a dead letter: {e}")))?;
            all.push((d.key.clone(), raw));
            if slice.is_over() {
                slice.next().await;
            }
        }
        for (peer, answer) in others.iter().zip(theirs) {
            let answer = answer?;
            all.extend(peer_page(peer, answer.status, &answer.body).await?);
        }
        let merged = merge_pages(all, limit);
        let bytes = respond::raw_bytes(merged.iter().map(AsRef::as_ref));
        Ok(respond::json_array_of(StatusCode::OK, "dead", merged, bytes).await)
    }
}

/// One peer's page of dead letters, each with its key, read a letter at a time (`array.rs`):
/// with their bodies, a page of 1,000 letters is tens of megabytes, and read whole it was one
/// step of the shard answering the list. An answer that is not a page fails the list, saying
/// which node gave it.
async fn peer_page(
    peer: &str,
    status: StatusCode,
    body: &[u8],
) -> Result<Vec<(String, Box<RawValue>)>, ApiError> {
    let unusable = |why: String| {
        ApiError::PeerUnavailable(format!(
            "the node {peer} did not give its dead letters ({why}); the list needs every node's"
        ))
    };
    if status != StatusCode::OK {
        return Err(unusable(format!("it answered {status}")));
    }
    let mut letters = Vec::new();
    read_array(body, "dead", |raw| {
        letters.push((letter_key(&raw)?, raw));
        Ok(())
    })
    .await
    .map_err(unusable)?;
    Ok(letters)
}

/// A peer's letter's key: its first field, as [`DeadBody`] writes a letter, read without
/// going through the rest (the payload can be 64 KB of numbers, the slowest JSON to read);
/// a letter written otherwise is read whole for it.
fn letter_key(raw: &RawValue) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Keyed {
        key: String,
    }
    if let Some(rest) = raw.get().strip_prefix(r#"{"key":"#) {
        if let Some(Ok(key)) = serde_json::Deserializer::from_str(rest)
            .into_iter::<String>()
            .next()
        {
            return Ok(key);
        }
    }
    serde_json::from_str::<Keyed>(raw.get())
        .map(|k| k.key)
        .map_err(|e| e.to_string())
}

/// The first `limit` of the nodes' pages, by key, each key once.
fn merge_pages(mut all: Vec<(String, Box<RawValue>)>, limit: usize) -> Vec<Box<RawValue>> {
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all.dedup_by(|a, b| a.0 == b.0);
    all.truncate(limit);
    all.into_iter().map(|(_, raw)| raw).collect()
}

/// `limit` and `after` of a dead-letter list.
fn list_query(query: Option<&str>) -> Result<(usize, Option<String>), ApiError> {
    let mut limit = DEFAULT_LIMIT;
    let mut after = None;
    for (name, v) in super::query::pairs(query, &["limit", "after"])? {
        if name == "limit" {
            limit = v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| ApiError::InvalidField(format!("limit must be 1 to {MAX_LIMIT}")))?;
        } else {
            let v = super::segment::decoded(v);
            crate::error::validate_letter_key(&v)?;
            after = Some(v.into_owned());
        }
    }
    Ok((limit, after))
}

/// One dead letter.
#[derive(Serialize)]
struct DeadBody<'a> {
    key: &'a str,
    version: u64,
    fire_at_us: u64,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a str>,
    callback: Option<CallbackView>,
    payload: &'a RawValue,
}

impl<'a> DeadBody<'a> {
    /// About what a letter encodes to: its body's bytes (the payload is copied as it is), its
    /// key and error twice over (a string that needs escaping takes up to twice its bytes, a
    /// control character six times), and the field names and numbers around them.
    fn bytes(d: &DeadInfo) -> usize {
        2 * d.key.len() + d.body_bytes + d.last_error.as_ref().map_or(0, String::len) + 192
    }

    fn new(d: &'a DeadInfo) -> Self {
        DeadBody {
            key: &d.key,
            version: d.version,
            fire_at_us: d.fire_at.0,
            attempts: d.attempts,
            last_status: d.last_status,
            last_error: d.last_error.as_deref(),
            callback: d.callback.clone().map(|url| CallbackView { url }),
            payload: respond::payload(&d.payload),
        }
    }
}

/// A pending timer's body: with its callback, retry policy and delivery when it has a
/// callback (its `fire_at_us` stays its own deadline, not the next attempt's).
pub fn timer_body<'a>(tenant: &'a str, key: &'a str, info: &'a TimerInfo) -> TimerBody<'a> {
    let mut body = TimerBody::new(tenant, key, info);
    let Some(d) = describe(&info.meta) else {
        return body;
    };
    body.fire_at_us = d.fire_at_us;
    body.retry = Some(RetryView {
        max_attempts: d.retry.max_attempts,
        base_delay_ms: d.retry.base_delay_ms,
        max_delay_ms: d.retry.max_delay_ms,
    });
    body.delivery = Some(DeliveryView {
        state: d.state,
        attempts: d.attempts,
        next_at_us: info.deadline.0,
        last_status: d.last_status,
        last_error: d.last_error,
    });
    body.callback = Some(CallbackView { url: d.callback });
    body
}

#[cfg(test)]
#[path = "webhooks_tests.rs"]
mod tests;
