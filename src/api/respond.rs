//! Building responses: JSON bodies (serde, never hand-built text) with their headers, and the
//! error body with the extra headers some statuses carry (`Retry-After`, `WWW-Authenticate`,
//! `Allow`).

use super::error::ApiError;
use crate::engine::{Scheduled, TimerInfo};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::value::RawValue;

pub type Resp = Response<Full<Bytes>>;

pub fn with_body(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    with_body(status, "application/json", body)
}

/// `body` serialized as the response's JSON.
pub fn json_of(status: StatusCode, body: &impl Serialize) -> Resp {
    match serde_json::to_vec(body) {
        Ok(bytes) => json(status, bytes),
        // The bodies here are plain structs of strings and numbers: this cannot happen, and
        // if it did the client gets a 500 with a reason, not a dropped connection.
        Err(e) => error(&ApiError::Internal(format!(
            "cannot encode the response: {e}"
        ))),
    }
}

/// `{"<field>": [<items>]}` as the response's JSON, encoded an item at a time with a look at
/// the task's slice after each, yielding once it is over: a page of a thousand dead letters
/// of 64 KiB each is 64 MiB of JSON, tens of milliseconds to encode in one step on the shard
/// that answers. `bytes` is about what the items encode to (see [`encode_array_of`]).
pub async fn json_array_of<T: Serialize>(
    status: StatusCode,
    field: &'static str,
    items: impl IntoIterator<Item = T>,
    bytes: usize,
) -> Resp {
    match encode_array_of(field, items, bytes).await {
        Ok(out) => json(status, out),
        Err(e) => error(&ApiError::Internal(format!(
            "cannot encode the response: {e}"
        ))),
    }
}

/// `{"<field>": [<items>]}`, encoded an item at a time with a look at the task's slice after
/// each (as [`json_array_of`] answers, and as a sub-batch goes to its owner). `bytes`, about
/// what the items encode to, is reserved at once: a buffer grown as it fills copies all it
/// holds at each doubling, in one step (32 MB of a 64 MB page: 7 ms where a 16 MB sub-batch
/// doubled, `split::tests::sub_batch_figure`). An estimate short of the mark costs one such
/// copy.
pub async fn encode_array_of<T: Serialize>(
    field: &str,
    items: impl IntoIterator<Item = T>,
    bytes: usize,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(field.len() + 8 + bytes);
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(b"\":[");
    let mut slice = crate::runtime::cooperate::Slice::begin();
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &item)?;
        if slice.is_over() {
            slice.next().await;
        }
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// About what raw JSON values encode to in an array: their text and a comma each.
pub fn raw_bytes<'a>(items: impl IntoIterator<Item = &'a RawValue>) -> usize {
    items.into_iter().map(|r| r.get().len() + 1).sum()
}

/// A scheduled timer: the answer to a PUT.
#[derive(Serialize)]
pub struct ScheduledBody<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub fire_at_us: u64,
    pub version: u64,
}

impl<'a> ScheduledBody<'a> {
    pub fn new(tenant: &'a str, key: &'a str, s: &Scheduled) -> Self {
        ScheduledBody {
            tenant,
            key,
            fire_at_us: s.deadline.0,
            version: s.version,
        }
    }
}

/// A pending timer: the answer to a GET. A timer with a callback also shows it, its retry
/// policy and how far its delivery has got; its `fire_at_us` stays its own deadline.
#[derive(Serialize)]
pub struct TimerBody<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub fire_at_us: u64,
    pub version: u64,
    pub payload: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback: Option<CallbackView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debounce: Option<DebounceView>,
}

/// `"debounce": {"first_at_us", "max_wait_ms", "cap_us"}`: a debounced timer's burst, and
/// the latest its deadline may move to.
#[derive(Serialize)]
pub struct DebounceView {
    pub first_at_us: u64,
    pub max_wait_ms: u64,
    pub cap_us: u64,
}

impl<'a> TimerBody<'a> {
    /// The body of a timer without a callback (`api::webhooks::timer_body` adds one's).
    pub fn new(tenant: &'a str, key: &'a str, info: &'a TimerInfo) -> Self {
        TimerBody {
            tenant,
            key,
            fire_at_us: info.deadline.0,
            version: info.version,
            payload: payload(&info.payload),
            callback: None,
            retry: None,
            delivery: None,
            debounce: crate::timer::Debounce::of(&info.meta).map(|d| DebounceView {
                first_at_us: d.first_at.0,
                max_wait_ms: d.max_wait_us / 1_000,
                cap_us: d.cap().0,
            }),
        }
    }
}

/// `"callback": {"url"}`.
#[derive(Serialize)]
pub struct CallbackView {
    pub url: String,
}

/// `"retry": {"max_attempts", "base_delay_ms", "max_delay_ms"}`.
#[derive(Serialize)]
pub struct RetryView {
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    pub max_delay_ms: u64,
}

/// A pending timer's delivery, as `GET` shows it.
#[derive(Serialize)]
pub struct DeliveryView {
    /// `pending` (its deadline not reached), `in_flight`, or `retrying` (waiting for the next
    /// attempt).
    pub state: &'static str,
    pub attempts: u32,
    /// When the wheel fires it next: the deadline, the next attempt, or the end of the
    /// attempt in flight.
    pub next_at_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One item of a batch's answer: its result, or its error.
#[derive(Serialize)]
#[serde(untagged)]
pub enum BatchItem {
    Scheduled {
        key: String,
        status: u16,
        fire_at_us: u64,
        version: u64,
    },
    Failed {
        key: Option<String>,
        status: u16,
        error: ErrorBody,
    },
    /// The item's result as the node that owns its partition answered it (`split.rs`).
    Relayed(Box<RawValue>),
    /// The whole sub-batch was refused by the node that owns the item's partition: its
    /// status and error body, for each of its items.
    RelayedError {
        key: Option<String>,
        status: u16,
        error: Box<RawValue>,
    },
}

impl BatchItem {
    pub fn scheduled(key: String, s: &Scheduled) -> Self {
        BatchItem::Scheduled {
            key,
            status: if s.replaced { 200 } else { 201 },
            fire_at_us: s.deadline.0,
            version: s.version,
        }
    }

    pub fn failed(key: Option<String>, e: &ApiError) -> Self {
        BatchItem::Failed {
            key,
            status: e.status().as_u16(),
            error: ErrorBody::of(e),
        }
    }
}

/// `{"results": [...]}`, one per item, in order.
#[derive(Serialize)]
pub struct BatchBody {
    pub results: Vec<BatchItem>,
}

pub use super::error::ErrorBody;

/// `GET /healthz`.
#[derive(Serialize)]
pub struct Health<'a> {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<&'a str>,
    /// On a node that shares a Redis Cluster with others: the partitions (of 1,024) its shards
    /// have loaded and act on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u64>,
    /// On such a node: partitions it holds whose records have not been loaded for over 5 s
    /// (`nodes::holdings::LOAD_OVERDUE`), as ranges; the status is then `degraded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions_not_loaded: Option<String>,
}

/// Says on `resp` that the connection closes after it (hyper then closes it once `resp` is
/// written).
pub fn closing(resp: &mut Resp) {
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
}

pub fn empty(status: StatusCode) -> Resp {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    r
}

pub fn error(e: &ApiError) -> Resp {
    let mut r = json(e.status(), e.body());
    let h = r.headers_mut();
    match e {
        ApiError::Unauthorized(_)
        | ApiError::UnknownTenant(_)
        | ApiError::MetricsUnauthorized(_) => {
            h.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        ApiError::MethodNotAllowed { allow, .. } => {
            h.insert(ALLOW, HeaderValue::from_static(allow));
        }
        ApiError::Overloaded(_)
        | ApiError::CapacityExceeded(_)
        | ApiError::ShuttingDown
        | ApiError::PeerUnavailable(_)
        | ApiError::QuotaExceeded { .. }
        | ApiError::TooManyReceives { .. } => {
            h.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        ApiError::StoreUnavailable { retry_after_s, .. }
        | ApiError::RateLimited { retry_after_s, .. } => {
            h.insert(RETRY_AFTER, HeaderValue::from((*retry_after_s).max(1)));
        }
        _ => {}
    }
    r
}

/// A payload as stored, as raw JSON: the client's JSON (validated when it arrived), or
/// `null` when none was given.
pub fn payload(p: &[u8]) -> &RawValue {
    let text = crate::timer::payload_json(p);
    serde_json::from_slice::<&RawValue>(text).unwrap_or_else(|_| null())
}

fn null() -> &'static RawValue {
    static NULL: std::sync::OnceLock<Box<RawValue>> = std::sync::OnceLock::new();
    NULL.get_or_init(|| RawValue::from_string("null".to_string()).unwrap_or_default())
}

#[cfg(test)]
#[path = "respond_tests.rs"]
mod tests;
