//! `/v1/queues/{tenant}`: the pull queues' routes (`crate::queue`; the contract is docs/API.md,
//! "Pull queues"). A receive waits for messages (its `wait_ms`, a long poll) on this shard's
//! executor without holding any shard: it asks the tenant's shards once, and while it has
//! nothing, looks every millisecond at the count a shard raises when one of the tenant's
//! messages becomes ready (`PullQueues::ready_count`), asking the shards again only when it
//! moved: another tenant's traffic never wakes it. A stopping server answers a waiting receive
//! at once, with what it has (nothing). At most `queue_max_waiting` receives of a tenant wait at
//! once (`PullQueues::start_waiting`); one more that would wait is `429 too_many_receives`,
//! so that one tenant's consumers cannot fill a shard with waiting tasks. A receive that finds
//! messages, or asks with `wait_ms` 0, is never refused by it.

use super::error::{ApiError, ErrorBody};
use super::respond::{self, Resp};
use super::state::App;
use super::unread::RequestBody;
use crate::queue::{
    Received, Settled, Settlement, DEFAULT_VISIBILITY_MS, MAX_BATCH, MAX_RECEIPTS,
    MAX_VISIBILITY_MS, MAX_WAIT_MS,
};
use hyper::{Request, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::time::{Duration, Instant};

/// How often a waiting receive looks whether a message became ready.
const WAIT_LOOK: Duration = Duration::from_millis(1);
/// Messages a receive asks for when its body names no `max`.
const DEFAULT_MAX: u64 = 10;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReceiveBody {
    max: Option<u64>,
    wait_ms: Option<u64>,
    visibility_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettleBody {
    receipts: Vec<String>,
    delay_ms: Option<u64>,
    visibility_ms: Option<u64>,
}

#[derive(Serialize)]
struct MessageOut<'a> {
    receipt: String,
    key: &'a str,
    version: u64,
    fire_at_us: u64,
    fired_at_us: u64,
    receive_count: u32,
    payload: &'a RawValue,
}

#[derive(Serialize)]
struct Messages<'a> {
    messages: Vec<MessageOut<'a>>,
}

#[derive(Serialize)]
struct SettleResult<'a> {
    receipt: &'a str,
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorBody>,
}

#[derive(Serialize)]
struct Results<'a> {
    results: Vec<SettleResult<'a>>,
}

#[derive(Serialize)]
struct Depth<'a> {
    tenant: &'a str,
    /// Ready and delayed: every message not leased.
    depth: u64,
    ready: u64,
    delayed: u64,
    in_flight: u64,
    oldest_age_ms: Option<u64>,
    max_receives: u32,
}

/// A number field within `lo..=hi`, or 400 naming it.
fn within(name: &str, v: u64, lo: u64, hi: u64) -> Result<u64, ApiError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(ApiError::InvalidField(format!(
            "{name} must be from {lo} to {hi}, not {v}"
        )))
    }
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::InvalidField(e.to_string()),
        _ => ApiError::MalformedJson(e.to_string()),
    })
}

impl App {
    /// `GET /v1/queues/{tenant}` and `POST /v1/queues/{tenant}/{receive|ack|nack|extend}`.
    pub(super) async fn queue(
        &self,
        tenant: &str,
        action: Option<&str>,
        req: Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        if !matches!(action, None | Some("receive" | "ack" | "nack" | "extend")) {
            return Err(ApiError::NotFound(format!(
                "no route for {:?}",
                req.uri().path()
            )));
        }
        let allow = if action.is_none() { "GET" } else { "POST" };
        if req.method().as_str() != allow {
            return Err(ApiError::MethodNotAllowed {
                method: req.method().to_string(),
                allow,
            });
        }
        self.check_read(tenant, &req)?;
        if self.handle.store_kind() == "redis" {
            return Err(ApiError::NotImplemented(
                "the Redis store keeps no pull queue: consume fired timers from the tenant's \
                 stream (docs/STORES.md)"
                    .into(),
            ));
        }
        let Some(max_receives) = self.handle.pull_queues().max_receives(tenant) else {
            return Err(ApiError::NotFound(format!(
                "tenant {tenant:?} has no queue (queue = true in its [tenants] table)"
            )));
        };
        let Some(action) = action else {
            let c = self.handle.queue_count_async(tenant).await?;
            let now = self.handle.now().0;
            let depth = Depth {
                tenant,
                depth: c.ready + c.delayed,
                ready: c.ready,
                delayed: c.delayed,
                in_flight: c.in_flight,
                oldest_age_ms: c
                    .oldest_queued_at_us
                    .map(|at| now.saturating_sub(at) / 1000),
                max_receives,
            };
            return Ok(respond::json_of(StatusCode::OK, &depth));
        };
        let limit = self.shared.config.max_body_bytes;
        let body = self.read_body(req, limit).await?;
        if action == "receive" {
            return self.receive(tenant, &body).await;
        }
        let b: SettleBody = parse(&body)?;
        let how = match action {
            "ack" => {
                if b.delay_ms.is_some() || b.visibility_ms.is_some() {
                    return Err(ApiError::InvalidField("an ack takes receipts only".into()));
                }
                Settlement::Ack
            }
            "nack" => {
                if b.visibility_ms.is_some() {
                    return Err(ApiError::InvalidField(
                        "a nack takes receipts and delay_ms".into(),
                    ));
                }
                let delay_ms = within("delay_ms", b.delay_ms.unwrap_or(0), 0, MAX_VISIBILITY_MS)?;
                Settlement::Nack { delay_ms }
            }
            _ => {
                if b.delay_ms.is_some() {
                    return Err(ApiError::InvalidField(
                        "an extend takes receipts and visibility_ms".into(),
                    ));
                }
                let Some(v) = b.visibility_ms else {
                    return Err(ApiError::InvalidField(
                        "an extend needs visibility_ms".into(),
                    ));
                };
                let visibility_ms = within("visibility_ms", v, 1, MAX_VISIBILITY_MS)?;
                Settlement::Extend { visibility_ms }
            }
        };
        within("receipts", b.receipts.len() as u64, 1, MAX_RECEIPTS as u64)?;
        self.settle(tenant, &b.receipts, how).await
    }

    /// Receives up to `max` messages, waiting up to `wait_ms` for the first.
    async fn receive(&self, tenant: &str, body: &[u8]) -> Result<Resp, ApiError> {
        let b: ReceiveBody = if body.is_empty() {
            ReceiveBody::default()
        } else {
            parse(body)?
        };
        let max = within("max", b.max.unwrap_or(DEFAULT_MAX), 1, MAX_BATCH)? as usize;
        let wait_ms = within("wait_ms", b.wait_ms.unwrap_or(0), 0, MAX_WAIT_MS)?;
        let visibility_ms = within(
            "visibility_ms",
            b.visibility_ms.unwrap_or(DEFAULT_VISIBILITY_MS),
            1,
            MAX_VISIBILITY_MS,
        )?;
        let queues = self.handle.pull_queues().clone();
        let until = Instant::now() + Duration::from_millis(wait_ms);
        // Counted against the tenant's `max_waiting` from its first wait to its answer.
        let mut waiting = None;
        let got = loop {
            let seen = queues.ready_count(tenant);
            let got = self
                .handle
                .queue_receive_async(tenant, max, visibility_ms)
                .await?;
            if !got.is_empty() || Instant::now() >= until || self.shared.is_draining() {
                break got;
            }
            if waiting.is_none() {
                let w =
                    queues
                        .start_waiting(tenant)
                        .map_err(|limit| ApiError::TooManyReceives {
                            tenant: tenant.to_string(),
                            limit,
                        })?;
                waiting = Some(w);
            }
            while queues.ready_count(tenant) == seen
                && Instant::now() < until
                && !self.shared.is_draining()
            {
                glommio::timer::sleep(WAIT_LOOK).await;
            }
        };
        Ok(respond::json_of(
            StatusCode::OK,
            &self.messages(tenant, &got),
        ))
    }

    fn messages<'a>(&self, tenant: &str, got: &'a [Received]) -> Messages<'a> {
        let queues = self.handle.pull_queues();
        let messages = got
            .iter()
            .map(|m| MessageOut {
                receipt: queues.receipt(tenant, &m.key, m.version, m.lease),
                key: &m.key,
                version: m.version,
                fire_at_us: m.fire_at_us,
                fired_at_us: m.fired_at_us,
                receive_count: m.receive_count,
                payload: respond::payload(&m.payload),
            })
            .collect();
        Messages { messages }
    }

    /// Acks, nacks or extends each receipt's message: one result per receipt, in order.
    async fn settle(
        &self,
        tenant: &str,
        receipts: &[String],
        how: Settlement,
    ) -> Result<Resp, ApiError> {
        let queues = self.handle.pull_queues();
        // Every settle is pushed to its shard first, then the answers are awaited in order.
        let waits: Vec<_> = receipts
            .iter()
            .map(|r| {
                queues
                    .open(tenant, r)
                    .map(|of| self.handle.queue_settle_async(tenant, &of, how))
            })
            .collect();
        let mut results = Vec::with_capacity(receipts.len());
        for (receipt, wait) in receipts.iter().zip(waits) {
            let (status, error) = match wait {
                None => (StatusCode::NOT_FOUND, Some(unknown_receipt())),
                Some(w) => match w.await {
                    Ok(Settled::Done) => (StatusCode::NO_CONTENT, None),
                    Ok(Settled::LeaseExpired) => (StatusCode::CONFLICT, Some(lease_expired())),
                    Err(e) => {
                        let e = ApiError::from(e);
                        (e.status(), Some(ErrorBody::of(&e)))
                    }
                },
            };
            results.push(SettleResult {
                receipt,
                status: status.as_u16(),
                error,
            });
        }
        Ok(respond::json_of(StatusCode::OK, &Results { results }))
    }
}

/// The error of a receipt whose lease has passed.
fn lease_expired() -> ErrorBody {
    ErrorBody {
        code: "lease_expired",
        message: "the receipt's lease has passed: the message was acknowledged, nacked, \
                  received again, or its visibility timeout ended"
            .into(),
        version: None,
        fire_at_us: None,
    }
}

/// The error of a receipt this server did not hand out for this tenant.
fn unknown_receipt() -> ErrorBody {
    ErrorBody {
        code: "unknown_receipt",
        message: "not a receipt this server handed out for this tenant (or one handed out \
                  before a restart)"
            .into(),
        version: None,
        fire_at_us: None,
    }
}
