//! One delivery attempt, as a task on the shard's executor: the request, the answer within the
//! webhook timeout, and the follow-up for the shard (remove, retry later, or dead letter).
//!
//! The request: `POST <url>` with the JSON body
//! `{"tenant","key","version","fire_at_us","fired_at_us","attempt","payload"}` (serde), and the
//! headers `Content-Type: application/json`, `Idempotency-Key: <tenant>/<key>/<version>`,
//! `Punctual-Attempt: <n>` and, when the tenant has a secret, `Punctual-Signature` (`sign`).

use super::client::SendError;
use super::ctx::{dead, Ctx};
use super::meta::{Delivery, Last, State};
use super::policy::{self, Failure};
use super::queue::Cap;
use super::settings::Target;
use crate::metrics::{single_writer_add, DeliveryMetrics};
use crate::sink::{Followup, Next};
use crate::timer::{payload_json, FiredTimer, PackedTimer};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Method, Request};
use serde::Serialize;
use serde_json::value::RawValue;
use std::rc::Rc;
use std::time::Duration;

/// The body of a delivery.
#[derive(Serialize)]
pub struct Body<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub version: u64,
    pub fire_at_us: u64,
    pub fired_at_us: u64,
    pub attempt: u32,
    pub payload: &'a RawValue,
}

/// The request of attempt `d.attempts` of `t`; `None` only if the body cannot be encoded.
fn request(
    ctx: &Ctx,
    t: &FiredTimer<'_>,
    d: &Delivery,
    target: &Target,
    path: &str,
) -> Option<Request<Full<Bytes>>> {
    let payload: &RawValue =
        serde_json::from_slice(payload_json(t.payload)).unwrap_or_else(|_| null());
    let body = serde_json::to_vec(&Body {
        tenant: t.tenant,
        key: t.key,
        version: t.version,
        fire_at_us: d.fire_at_us,
        fired_at_us: t.fired_at.as_micros().0,
        attempt: d.attempts,
        payload,
    })
    .ok()?;
    let mut b = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(HOST, target.host_header())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(
            USER_AGENT,
            HeaderValue::from_static(concat!("punctual/", env!("CARGO_PKG_VERSION"))),
        )
        .header("punctual-attempt", d.attempts);
    let id = format!("{}/{}/{}", t.tenant, t.key, t.version);
    if let Some(signing) = ctx.settings.signing(t.tenant) {
        let now_s = t.fired_at.0 / 1_000_000_000;
        for (name, value) in signing.headers(&id, now_s, &body) {
            b = b.header(name, value);
        }
    }
    b = b.header("idempotency-key", id);
    b.body(Full::new(Bytes::from(body))).ok()
}

fn null() -> &'static RawValue {
    static NULL: std::sync::OnceLock<Box<RawValue>> = std::sync::OnceLock::new();
    NULL.get_or_init(|| RawValue::from_string("null".to_string()).unwrap_or_default())
}

/// Starts attempt `d.attempts` of `t` as a task; `meta` is the in-flight state the timer was
/// left in (the follow-up applies only to it).
pub(super) fn spawn(
    ctx: Rc<Ctx>,
    t: &FiredTimer<'_>,
    d: Delivery,
    meta: Vec<u8>,
    target: Target,
    path: String,
) {
    let Some(expect) = PackedTimer::with_meta(t.tenant, t.key, &meta, b"") else {
        return;
    };
    let m = ctx.tenant(t.tenant);
    let req = request(&ctx, t, &d, &target, &path);
    single_writer_add(&m.attempts, 1);
    DeliveryMetrics::add(&m.in_flight, 1);
    *ctx.per_host.borrow_mut().entry(target.clone()).or_default() += 1;
    *ctx.per_tenant
        .borrow_mut()
        .entry(t.tenant.into())
        .or_default() += 1;
    let version = t.version;
    glommio::spawn_local(async move {
        let outcome = match req {
            Some(req) => attempt(&ctx, &target, expect.tenant(), req).await,
            None => Err(Failure::Send(SendError::Http(
                "the request could not be built".into(),
            ))),
        };
        release(&ctx, &target, expect.tenant());
        wake_next(&ctx, &target, expect.tenant());
        DeliveryMetrics::add(&m.in_flight, -1);
        let fire_at_us = d.fire_at_us;
        let attempt = attempt_of(&outcome);
        let next = settle(&ctx, &m, d, outcome.map(|_| ()), expect.tenant());
        ctx.followups
            .record(|| history_of(&expect, version, fire_at_us, attempt, &next));
        ctx.followups.send(Followup {
            timer: expect,
            version,
            next,
        });
    })
    .detach();
}

/// Sends the request and reads the answer within the timeout: a `2xx`'s status, or why
/// not.
async fn attempt(
    ctx: &Ctx,
    target: &Target,
    tenant: &str,
    req: Request<Full<Bytes>>,
) -> Result<u16, Failure> {
    let timeout = ctx.settings.timeout;
    let send = async {
        let allow = ctx.settings.allow_list(tenant);
        match ctx.pool.send(target, tenant, allow, req, timeout).await {
            Ok(a) => {
                let now_s = crate::clock::clock_ns(libc::CLOCK_REALTIME) / 1_000_000_000;
                let retry_after = a
                    .retry_after
                    .as_ref()
                    .and_then(|v| policy::parse_retry_after(v.as_bytes(), now_s));
                let status = a.status.as_u16();
                policy::classify(status, retry_after).map(|()| status)
            }
            Err(e) => Err(Failure::Send(e)),
        }
    };
    let expire = async {
        glommio::timer::sleep(crate::units::capped(timeout)).await;
        Err(Failure::Timeout)
    };
    futures_lite::future::or(send, expire).await
}

/// An attempt's end for the history: its status, or the class of its error.
fn attempt_of(outcome: &Result<u16, Failure>) -> crate::history::Attempt {
    let at_us = crate::clock::clock_ns(libc::CLOCK_REALTIME) / 1_000;
    let (status, error) = match outcome {
        Ok(status) => (Some(*status), None),
        Err(Failure::Retriable { status, .. } | Failure::Permanent { status }) => {
            (Some(*status), None)
        }
        Err(f) => (None, Some(f.public().into())),
    };
    crate::history::Attempt {
        at_us,
        status,
        error,
    }
}

/// The history's event for an attempt of `timer`'s delivery that ended as `attempt`, the
/// timer then going to `next`.
fn history_of(
    timer: &PackedTimer,
    version: u64,
    fire_at_us: u64,
    attempt: crate::history::Attempt,
    next: &Next,
) -> crate::history::Event {
    use crate::history::Outcome;
    crate::history::Event {
        tenant: timer.tenant().into(),
        key: timer.key().into(),
        version,
        fire_at_us,
        at_us: attempt.at_us,
        attempt: Some(attempt),
        outcome: match next {
            Next::Done => Outcome::Delivered,
            Next::Dead { .. } => Outcome::DeadLettered,
            Next::Reschedule { .. } | Next::Wake => Outcome::Retrying,
        },
    }
}

fn release(ctx: &Ctx, target: &Target, tenant: &str) {
    let mut hosts = ctx.per_host.borrow_mut();
    if let Some(n) = hosts.get_mut(target) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            hosts.remove(target);
        }
    }
    let mut tenants = ctx.per_tenant.borrow_mut();
    if let Some(n) = tenants.get_mut(tenant) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            tenants.remove(tenant);
        }
    }
}

/// A slot on `target` and one of `tenant` came free: the first timer waiting on each cap that
/// has room is due now (it takes the slot when it fires, or waits again if another took it
/// first). Also called for a wake left unused: the room is checked again, so a slot taken
/// since wakes nobody.
pub(super) fn wake_next(ctx: &Ctx, target: &Target, tenant: &str) {
    let s = &ctx.settings;
    let host_room = ctx
        .per_host
        .borrow()
        .get(target)
        .is_none_or(|&n| n < s.max_in_flight_per_host);
    let tenant_room = ctx
        .per_tenant
        .borrow()
        .get(tenant)
        .is_none_or(|&n| n < s.max_in_flight_per_tenant);
    let mut q = ctx.queues.borrow_mut();
    let woken = [
        host_room
            .then(|| q.pop(&Cap::Host(target.clone())))
            .flatten(),
        tenant_room
            .then(|| q.pop(&Cap::Tenant(tenant.into())))
            .flatten(),
    ];
    drop(q);
    for h in woken.into_iter().flatten() {
        DeliveryMetrics::add(&ctx.tenant(h.timer.tenant()).held_back, -1);
        ctx.followups.send(Followup {
            timer: h.timer,
            version: h.version,
            next: Next::Wake,
        });
    }
}

/// What the outcome makes of the timer, counted.
fn settle(
    ctx: &Ctx,
    m: &DeliveryMetrics,
    mut d: Delivery,
    outcome: Result<(), Failure>,
    tenant: &str,
) -> Next {
    let failure = match outcome {
        Ok(()) => {
            single_writer_add(&m.successes, 1);
            let now = crate::clock::clock_ns(libc::CLOCK_REALTIME);
            m.latency
                .observe(now.saturating_sub(d.fire_at_us.saturating_mul(1_000)));
            return Next::Done;
        }
        Err(f) => f,
    };
    if let Failure::Send(SendError::Busy(e)) = &failure {
        // The attempt never left: free, up to MAX_BUSY in a row, after a backoff that grows
        // with them (`meta.rs`); the next counts as a connection error.
        single_writer_add(&m.resolver_busy, 1);
        if d.resolver_busy(&e.to_string()) {
            let after = policy::next_delay(&d.retry, u32::from(d.busy), None, ctx.draw());
            d.state = State::Waiting;
            return Next::Reschedule {
                after,
                meta: d.encode(),
            };
        }
    } else {
        d.busy = 0;
    }
    m.failed(failure.class());
    d.last = match &failure {
        // Set by `resolver_busy` when it counted.
        Failure::Send(SendError::Busy(_)) => d.last.clone(),
        Failure::Send(e) => {
            tracing::debug!(tenant, "webhook attempt failed: {e}");
            Last::Error(failure.public().into())
        }
        Failure::Timeout => Last::Error(failure.public().into()),
        Failure::Retriable { status, .. } | Failure::Permanent { status } => Last::Status(*status),
    };
    let auth_spent = matches!(
        failure,
        Failure::Retriable {
            status: 401 | 403,
            ..
        }
    ) && d.attempts >= policy::AUTH_ATTEMPTS;
    if failure.is_retriable() && d.has_budget() && !auth_spent {
        let retry_after = match &failure {
            Failure::Retriable { retry_after, .. } => *retry_after,
            _ => None,
        };
        let after: Duration = policy::next_delay(&d.retry, d.attempts, retry_after, ctx.draw());
        d.state = State::Waiting;
        return Next::Reschedule {
            after,
            meta: d.encode(),
        };
    }
    dead(d, ctx, tenant)
}
