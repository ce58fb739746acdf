//! The webhook sink: a fired timer with a callback is `POST`ed to its URL, retried with
//! backoff as a timer of its own, and made a dead letter when it keeps failing.
//!
//! # A retry is a timer
//!
//! Delivery state lives in the timer's metadata (`meta.rs`), which every store persists
//! verbatim with the record; every step is a change of the pending timer (same version, so
//! the same `Idempotency-Key`), made by the shard and written through the store like any
//! (re)schedule. Walk-through, `max_attempts = 3`, a receiver that fails twice:
//!
//! ```text
//!  t=D       the timer fires (state New): its own firing → stream entry, handler;
//!            attempt 1 starts as a task; the timer is kept, InFlight, at D + timeout + 1 s
//!  t=D+3ms   answer 503 → follow-up: Waiting, last_status 503, at now + jitter(1 s)
//!  t=D+0.6s  fires (Waiting): attempt 2 starts; InFlight at now + timeout + 1 s
//!            ✗ the process is killed here: the store holds "InFlight, attempt 2"
//!  restart   recovery loads it; at its deadline it fires (InFlight: no outcome came):
//!            attempt 2 is made again, under the same number (a cut attempt uses up
//!            nothing, up to 3 in a row, the 4th counts: last_error `interrupted`); InFlight
//!  …         answer 200 → follow-up: Remove (the record goes, like a cancel)
//! ```
//!
//! A stop (SIGTERM) does not cut an attempt: the shard fires nothing more and lets its
//! deliveries under way finish within `shutdown_grace_ms`, applying their follow-ups before its
//! store closes. Had attempt 3 failed, the follow-up would have been `Dead`: the timer leaves the wheel
//! for the shard's dead-letter table (and the store's), until it is re-driven or discarded.
//! A cancel (`DELETE`) removes the pending timer whatever its state; a follow-up that finds
//! the timer gone, replaced (another version) or moved on (other metadata) does nothing.
//! After a crash a delivery may repeat (at least once), with the same `Idempotency-Key`.
//!
//! # Never delaying the wheel, one tenant never slowing another
//!
//! `fired` only decides, builds the request (serde for the body, HMAC for the signature) and
//! spawns the delivery as a task on the shard's executor; the wheel's pass goes on. Each shard
//! caps its deliveries in flight per host and per tenant (`WebhookSettings`); a delivery a cap
//! holds back is not lost and uses no attempt: the timer stays pending (its deadline pushed to
//! a safety net, [`held_back_for`], as long as the queue ahead of it takes, up to a minute) and waits in a FIFO queue of its host or tenant; each
//! delivery that ends wakes the next one waiting on its host and on its tenant (a `Wake`
//! follow-up: the timer is due at once). So a backlog costs one queue entry per timer, not a
//! re-fire every few milliseconds, and the caps' throughput goes to the timers in order. A
//! timer whose safety net fires while the cap is still full keeps its one entry and its place
//! (`queue/`); one that is cancelled, replaced, started or buried leaves its queue.
//! Refusals are counted per tenant, and the timers waiting are a gauge
//! (`punctual_webhook_held_back`).
//!
//! | file | owns |
//! |---|---|
//! | `meta.rs` | the delivery state and its encoding |
//! | `policy.rs` | classification of answers and errors (a resolver refusal is not an attempt), backoff with full jitter, `Retry-After` |
//! | `sign.rs` | `Punctual-Signature`: signing, and verification for receivers |
//! | `settings.rs` | tenants' callbacks, allow-lists, secrets, retry defaults; TLS roots; the sink's maps (`Map`) |
//! | `queue/` | the timers a cap holds back: one FIFO per host and per tenant, one entry per timer |
//! | `ctx.rs` | what the sink and its delivery tasks share on the shard's thread (`Ctx`), and a delivery made a dead letter |
//! | `client.rs` | the HTTP/1.1 client, its keep-alive pool per host, and why a request got no answer (`SendError`: our resolver busy, name, TCP, TLS, HTTP) |
//! | `reset.rs` | a connection abandoned mid-request is reset, so nothing of it arrives late |
//! | `deliver.rs` | one attempt: the request, the answer, the follow-up |
//!
//! # What the other parts see of it
//!
//! The delivery state is this sink's own: the shard, the API and the configuration reach it
//! through the few names exported here, never through `meta.rs` (`tests/architecture/`
//! checks it): [`firing_of`] (which firing a fire is, read once per fire by the shard),
//! [`is_dead`] (recovery), [`redriven`] (a re-drive), [`new_meta`] (a registration's
//! metadata), [`describe`] (a timer's delivery, as `GET` shows it and a dead letter keeps
//! it) and [`RetryPolicy`].
//!
//! Cost per fire of a webhook timer: a metadata decode and encode, the JSON body, an HMAC
//! when the tenant has a secret, and a task spawn.

pub mod address;
pub mod allow;
pub mod client;
mod ctx;
mod deliver;
pub mod meta;
pub mod policy;
mod queue;
mod reset;
pub mod settings;
pub mod sign;

use super::{Followups, Next, Sink};
use crate::metrics::{DeliveryMetrics, ShardMetrics};
use crate::timer::{FiredTimer, Firing, PackedTimer};
use ctx::{dead, Ctx, SWEEP_EVERY};
use meta::{Delivery, Last, State};
use queue::{Cap, HeldBack, Queues};
use settings::{Target, WebhookSettings};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

pub use meta::{firing_of, for_occurrence, is_dead, redriven, RetryPolicy};

/// The delivery metadata of a timer registered with a callback to `url`: its first attempt
/// waits for its own deadline, `fire_at_us`.
pub fn new_meta(url: String, retry: RetryPolicy, fire_at_us: u64) -> Vec<u8> {
    Delivery::new(url, retry, fire_at_us).encode()
}

/// A timer's delivery, as its metadata says: what `GET` shows of a pending timer, and what a
/// dead letter keeps of how its delivery ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    /// `pending` (waiting for its deadline), `in_flight` (an attempt under way) or `retrying`.
    pub state: &'static str,
    /// Attempts started so far.
    pub attempts: u32,
    /// The last attempt's answer, when it got one.
    pub last_status: Option<u16>,
    /// Why the last attempt got no answer, when it got none.
    pub last_error: Option<String>,
    pub callback: String,
    pub retry: RetryPolicy,
    /// The timer's own deadline, not the next attempt's.
    pub fire_at_us: u64,
}

/// `None` for a timer without a callback, or with metadata that cannot be read.
pub fn describe(meta: &[u8]) -> Option<Description> {
    let d = Delivery::decode(meta)?;
    let (last_status, last_error) = match d.last {
        Last::Status(s) => (Some(s), None),
        Last::Error(e) => (None, Some(e)),
        Last::None => (None, None),
    };
    Some(Description {
        state: match d.state {
            State::New => "pending",
            State::InFlight => "in_flight",
            State::Waiting | State::Dead => "retrying",
        },
        attempts: d.attempts,
        last_status,
        last_error,
        callback: d.url,
        retry: d.retry,
        fire_at_us: d.fire_at_us,
    })
}

/// What is added to the webhook timeout for the deadline of a delivery in flight: the timer
/// fires again (and the next attempt starts) only if the outcome never came back.
pub const IN_FLIGHT_MARGIN: Duration = Duration::from_secs(1);

/// A delivery held back by a cap is woken by the queue; should the wake be lost (a crash), the
/// timer fires again after this: the time the `ahead` timers already waiting take to pass
/// through `cap` slots (each slot held at most the webhook timeout plus the in-flight margin),
/// at least one such turn and at most [`HELD_BACK_MAX`], plus up to one more second of
/// jitter. So a long queue does not re-fire every timer in it every few seconds (each re-fire
/// is a store write), and after a crash a held timer fires again within a minute.
pub fn held_back_for(s: &WebhookSettings, draw: u64, ahead: usize, cap: u32) -> Duration {
    let turn = s.timeout + IN_FLIGHT_MARGIN;
    let turns = (ahead / cap.max(1) as usize).saturating_add(1);
    let wait = turn
        .saturating_mul(u32::try_from(turns).unwrap_or(u32::MAX))
        .min(HELD_BACK_MAX.max(turn));
    wait + Duration::from_micros(draw % 1_000_001)
}

/// The longest a held-back timer waits for its safety net (see [`held_back_for`]).
pub const HELD_BACK_MAX: Duration = Duration::from_secs(60);

/// The webhook sink of one shard.
pub struct WebhookSink {
    ctx: Rc<Ctx>,
}

impl WebhookSink {
    /// The sink hands its deliveries' outcomes to the shard through `followups`.
    pub fn new(
        shard: usize,
        settings: Arc<WebhookSettings>,
        metrics: Arc<ShardMetrics>,
        followups: Followups,
    ) -> WebhookSink {
        Self::with_resolver(
            shard,
            settings,
            metrics,
            followups,
            crate::resolve::global(),
        )
    }

    /// [`WebhookSink::new`] with host names looked up by `resolver`.
    pub(crate) fn with_resolver(
        shard: usize,
        settings: Arc<WebhookSettings>,
        metrics: Arc<ShardMetrics>,
        followups: Followups,
        resolver: &'static crate::resolve::Resolver,
    ) -> WebhookSink {
        let seed = crate::clock::clock_ns(libc::CLOCK_REALTIME) ^ ((shard as u64) << 48);
        WebhookSink {
            ctx: Rc::new(Ctx {
                shard,
                pool: client::Pool::new(settings.tls.clone(), resolver),
                settings,
                followups,
                per_host: RefCell::default(),
                per_tenant: RefCell::default(),
                queues: RefCell::new(Queues::default()),
                metrics,
                tenant_metrics: RefCell::default(),
                sweep_at: std::cell::Cell::new(std::time::Instant::now() + SWEEP_EVERY),
                jitter: RefCell::new(policy::Jitter::new(seed)),
            }),
        }
    }

    /// Starts the next attempt of `d` (or says why not): the timer's next state.
    fn start(&mut self, t: &FiredTimer<'_>, d: Delivery) -> Next {
        let (next, held) = self.start_or_hold(t, d);
        if !held {
            self.ctx.unhold(t.tenant, t.key);
        }
        next
    }

    /// Starts the next attempt of `d` (or says why not): the timer's next state, and whether
    /// it now waits in a cap's queue.
    fn start_or_hold(&mut self, t: &FiredTimer<'_>, mut d: Delivery) -> (Next, bool) {
        let ctx = &self.ctx;
        if !d.has_budget() {
            return (dead(d, ctx, t.tenant), false);
        }
        // The allow-list is checked again at every attempt: the configuration may have changed
        // since the timer was registered (or re-driven).
        let allowed =
            allow::parse(&d.url).is_ok_and(|u| ctx.settings.allow_list(t.tenant).permits(&u));
        let (target, path) = match Target::parse(&d.url) {
            Ok(tp) if allowed => tp,
            Ok(_) => {
                tracing::warn!(tenant = t.tenant, key = t.key, url = %d.url, "a callback no longer allowed by its tenant's callback_allow: a dead letter");
                d.last = Last::Error(policy::NOT_ALLOWED.into());
                return (dead(d, ctx, t.tenant), false);
            }
            Err(e) => {
                tracing::warn!(
                    tenant = t.tenant,
                    key = t.key,
                    "callback {:?}: {e}: a dead letter",
                    d.url
                );
                d.last = Last::Error(policy::NOT_ALLOWED.into());
                return (dead(d, ctx, t.tenant), false);
            }
        };
        let s = &ctx.settings;
        let host_full = ctx
            .per_host
            .borrow()
            .get(&target)
            .is_some_and(|&n| n >= s.max_in_flight_per_host);
        let tenant_full = ctx
            .per_tenant
            .borrow()
            .get(t.tenant)
            .is_some_and(|&n| n >= s.max_in_flight_per_tenant);
        if host_full || tenant_full {
            crate::metrics::single_writer_add(&ctx.tenant(t.tenant).refused, 1);
            if d.state == State::New {
                d.state = State::Waiting;
            }
            let meta = d.encode();
            let mut ahead = 0;
            if let Some(timer) = PackedTimer::with_meta(t.tenant, t.key, &meta, b"") {
                let held = HeldBack {
                    timer,
                    version: t.version,
                };
                let cap = if host_full {
                    Cap::Host(target.clone())
                } else {
                    Cap::Tenant(t.tenant.into())
                };
                let mut q = ctx.queues.borrow_mut();
                ahead = q.waiting(&cap);
                let added = q.hold(cap, held);
                drop(q);
                if added {
                    DeliveryMetrics::add(&ctx.tenant(t.tenant).held_back, 1);
                }
            }
            if host_full != tenant_full {
                // Held by one cap while the other has room: that room may be a slot this
                // timer was woken for (a host slot, and now its tenant is full, or the
                // reverse). Left unused, the timers waiting on the cap with room would wait
                // for their safety nets; pass it on (`wake_next` wakes only a cap with room).
                deliver::wake_next(ctx, &target, t.tenant);
            }
            let slots = if host_full {
                s.max_in_flight_per_host
            } else {
                s.max_in_flight_per_tenant
            };
            let next = Next::Reschedule {
                after: held_back_for(s, ctx.draw(), ahead, slots),
                meta,
            };
            return (next, true);
        }
        d.attempts += 1;
        d.state = State::InFlight;
        let meta = d.encode();
        let after = s.timeout + IN_FLIGHT_MARGIN;
        deliver::spawn(ctx.clone(), t, d, meta.clone(), target, path);
        (Next::Reschedule { after, meta }, false)
    }
}

impl Sink for WebhookSink {
    fn fired(&mut self, t: &FiredTimer<'_>) -> Next {
        if crate::timer::sink_meta(t.meta).is_empty() {
            return Next::Done;
        }
        if t.firing == Firing::Dead {
            // Nothing to deliver; whatever the sink keeps for it goes.
            self.ctx.unhold(t.tenant, t.key);
            return Next::Done;
        }
        let Some(mut d) = Delivery::decode(t.meta) else {
            tracing::warn!(
                shard = self.ctx.shard,
                tenant = t.tenant,
                key = t.key,
                "webhook: unreadable delivery state; the timer fires without its callback"
            );
            return Next::Done;
        };
        if !self.ctx.settings.enabled(t.tenant) {
            self.ctx.unhold(t.tenant, t.key);
            return Next::Done;
        }
        if d.state == State::InFlight {
            // The outcome of the attempt in flight never came back: the process stopped or
            // crashed during it (an attempt that runs its course always reports, within its
            // timeout). An attempt cut short is not one the receiver failed: it is made again
            // under the same number, so a delivered timer never turns into a dead letter for
            // want of the attempt a crash took; but only `MAX_CUTS` times in a row, so one
            // whose attempt crashes the process still ends (`meta.rs`).
            d.cut_short();
            crate::metrics::DeliveryMetrics::failed(&self.ctx.tenant(t.tenant), "timeout");
        }
        self.start(t, d)
    }

    fn in_flight(&self) -> usize {
        self.ctx
            .per_host
            .borrow()
            .values()
            .map(|&n| n as usize)
            .sum()
    }

    fn grace(&self) -> Duration {
        self.ctx.settings.shutdown_grace
    }

    fn forget(&mut self, timer: &PackedTimer) {
        if !self.ctx.queues.borrow().is_empty() {
            self.ctx.unhold_id(timer.identity(), timer.tenant());
        }
    }

    fn wake_unused(&mut self, timer: &PackedTimer) {
        let target = Delivery::decode(timer.meta()).and_then(|d| Target::parse(&d.url).ok());
        if let Some((target, _)) = target {
            deliver::wake_next(&self.ctx, &target, timer.tenant());
        }
    }

    fn tick(&mut self, now: std::time::Instant) {
        self.ctx.sweep_series(now);
    }
}

#[cfg(test)]
mod tests;
