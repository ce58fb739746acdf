//! The webhook side of the API: turning a registration's `callback` and `retry` into the
//! timer's delivery metadata (checked against the tenant's allow-list: no open relay), showing
//! a pending timer's delivery, and the dead-letter routes:
//!
//! | route | answer |
//! |---|---|
//! | `GET /v1/dead/{tenant}?limit=N&after=KEY` | 200 `{"dead": [...]}`, by key, at most N (default 100, at most 1,000) |
//! | `POST /v1/dead/{tenant}/{key}/retry` | 202 `{"tenant","key","version","fire_at_us"}`: delivered again now, a fresh attempt budget; 404 without a dead letter; 409 `timer_pending` while a timer is pending under the key |
//! | `DELETE /v1/dead/{tenant}/{key}` | 204, or 404 |

use super::body::Registration;
use super::error::ApiError;
use super::forward::Here;
use super::respond::{self, CallbackView, DeliveryView, Resp, RetryView, TimerBody};
use super::state::App;
use crate::engine::{Cancelled, DeadInfo, TimerInfo};
use crate::error::{validate_name, NameKind};
use crate::sink::webhook::settings::CallbackError;
use crate::sink::webhook::{describe, new_meta};
use hyper::body::Incoming;
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
        req: Request<Incoming>,
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
        self.check(tenant, &req)?;
        let Some(key) = key else {
            let (limit, after) = list_query(req.uri().query())?;
            let dead = self
                .handle
                .dead_letters_async(tenant, after.as_deref(), limit)
                .await?;
            let body = DeadList {
                dead: dead.iter().map(DeadBody::new).collect(),
            };
            return Ok(respond::json_of(StatusCode::OK, &body));
        };
        validate_name(NameKind::Key, key)?;
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

/// `limit` and `after` of a dead-letter list.
fn list_query(query: Option<&str>) -> Result<(usize, Option<String>), ApiError> {
    let mut limit = DEFAULT_LIMIT;
    let mut after = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("limit", v)) => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::InvalidField(format!("limit must be 1 to {MAX_LIMIT}"))
                    })?;
            }
            Some(("after", v)) => {
                validate_name(NameKind::Key, v)?;
                after = Some(v.to_string());
            }
            _ => {
                return Err(ApiError::InvalidField(format!(
                    "unknown query parameter {pair:?}; expected limit and after"
                )))
            }
        }
    }
    Ok((limit, after))
}

/// `{"dead": [...]}`.
#[derive(Serialize)]
struct DeadList<'a> {
    dead: Vec<DeadBody<'a>>,
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
mod tests {
    use super::*;

    #[test]
    fn list_query_reads_limit_and_after_and_refuses_the_rest() {
        assert_eq!(list_query(None), Ok((DEFAULT_LIMIT, None)));
        assert_eq!(
            list_query(Some("limit=5&after=k1")),
            Ok((5, Some("k1".into())))
        );
        for bad in ["limit=0", "limit=1001", "limit=x", "after=a/b", "sort=key"] {
            assert!(list_query(Some(bad)).is_err(), "{bad}");
        }
    }
}
