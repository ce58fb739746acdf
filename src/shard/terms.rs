//! Schedules and cancels with terms: the conditions of a conditional write (`"if": "absent"`,
//! `"if_version": V`) checked against the shard's own table in the same step as the write, so
//! that no other write of the key comes between the check and the change (docs/API.md,
//! "Conditional writes").
//!
//! What each condition meets, by the state of the key (`fate.rs` has the states):
//!
//! | state of the key | `if: absent` | `if_version: V` (and `DELETE ?if_version=V`) |
//! |---|---|---|
//! | absent (never scheduled, fired and done, cancelled) | applied: a new timer | `NotPending` (404) |
//! | pending (in the wheel or paged) | `Exists` (409) | applied if V is its version, else `VersionMismatch` (409) |
//! | kept for delivery (in flight to a webhook) | `Exists` | as pending: the version is the timer's own, unchanged while it is kept |
//! | retried (waiting for its backoff) | `Exists` | as pending |
//! | dead letter only | applied: a new timer beside the letter | `NotPending` |
//!
//! A dead letter is not a pending timer: it fires no more, `GET` answers 404 for its key, and
//! a plain PUT beside it makes a new timer without touching it; the conditions read it the
//! same way. A refusal changes nothing, gives back the quota slot the caller may have taken,
//! and is answered once the writes before it are durable (`Store::answer_after_writes`), so it
//! never reports a state a restart could undo.
//!
//! A debounce (`"debounce": {"max_wait_ms"}`) is a term too: the burst (`timer::Debounce`,
//! its first arming and its wait) is read from the pending timer's `meta`, or starts now when
//! none leads it (no timer pending, a plain one, or one that fired: kept or retried for its
//! delivery), and the new timer is due at its deadline or the burst's cap, whichever is the
//! earlier, with the burst leading its `meta`, which every store persists with it.
//!
//! Cost: nothing on the plain schedule's path (`Op::Schedule` carries no terms); a schedule
//! with terms is one boxed op and one more look-up of the key.

use super::Shard;
use crate::clock::TimeSource;
use crate::error::Error;
use crate::op::{Cancelled, Condition, Guarded, Reply};
use crate::store::Ack;
use crate::timer::{Debounce, PackedTimer};
use crate::units::UtcMicros;
use crate::wheel::TimerView;
use std::sync::atomic::Ordering;

/// The pending timer under a key, as a condition reads it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Current {
    pub version: u64,
    /// The timer's own deadline: what `GET` shows as `fire_at_us` (for a timer kept for its
    /// delivery, not the safety net it waits at).
    pub fire_at_us: u64,
}

impl Current {
    /// A timer of the table, as a condition (and a listing) reads it.
    pub(super) fn of(v: &TimerView<'_>) -> Current {
        let own = crate::sink::webhook::describe(v.timer.meta()).map(|d| d.fire_at_us);
        Current {
            version: v.version,
            fire_at_us: own.unwrap_or(v.deadline.0),
        }
    }
}

impl<S: TimeSource> Shard<S> {
    /// The pending timer `identity`, in the wheel or paged.
    pub(super) fn current(&self, identity: &[u8]) -> Option<Current> {
        if let Some(v) = self.table.get(identity) {
            return Some(Current::of(&v));
        }
        self.pager
            .as_ref()
            .and_then(|p| p.find(identity))
            .map(|p| Current {
                version: p.version,
                fire_at_us: p.deadline.0,
            })
    }

    /// A schedule with terms: refused when its condition does not hold, else scheduled.
    pub(super) fn guarded(&mut self, g: Guarded) {
        let current = self.current(g.timer.identity());
        if let Some(e) = refusal(g.terms.cond, current, &g.timer) {
            self.count_conflict(&e, g.timer.tenant());
            // Dropping the slot gives it back.
            drop(g.slot);
            let tenant = g.timer.tenant().to_string();
            self.store
                .answer_after_writes(&tenant, Ack::Refused(g.reply, e));
            return;
        }
        let (timer, deadline, home) = match g.terms.max_wait_us {
            None => (g.timer, g.deadline, g.home),
            Some(max_wait_us) => match self.debounced(&g.timer, g.deadline, max_wait_us) {
                Some((timer, deadline)) => (timer, deadline, true),
                None => {
                    let e = Error::PayloadTooLarge {
                        len: g.timer.meta().len(),
                        limit: u16::MAX as usize,
                    };
                    let _ = g.reply.send(Err(e));
                    return;
                }
            },
        };
        self.schedule(timer, deadline, Some(g.reply), g.slot, home);
    }

    /// A debounced schedule: the timer led by its burst (the pending timer's, if it has one,
    /// else one that starts now), due at its deadline or the burst's cap, whichever is
    /// earlier. Packed here, on the shard's thread. `None` when the metadata would pass
    /// 65,535 bytes.
    fn debounced(
        &self,
        timer: &PackedTimer,
        deadline: UtcMicros,
        max_wait_us: u64,
    ) -> Option<(PackedTimer, UtcMicros)> {
        let first_at = self
            .table
            .get(timer.identity())
            .and_then(|v| Debounce::of(v.timer.meta()))
            .map_or_else(|| self.clock.now().as_micros(), |d| d.first_at);
        let burst = Debounce {
            first_at,
            max_wait_us,
        };
        let capped = deadline.min(burst.cap());
        // A callback's section names the timer's own deadline (what `GET` and the delivery
        // show): the cap, when the cap is the earlier. A registration's section is fresh.
        let sink = match crate::sink::webhook::describe(timer.meta()) {
            Some(d) if capped != deadline => {
                crate::sink::webhook::new_meta(d.callback, d.retry, capped.0)
            }
            _ => timer.meta().to_vec(),
        };
        let timer = timer.with_new_meta(&burst.lead(&sink))?;
        Some((timer, capped))
    }

    /// Cancels the pending timer only if its version is `version`.
    pub(super) fn cancel_if(
        &mut self,
        timer: PackedTimer,
        version: u64,
        reply: Reply<Result<Cancelled, Error>>,
    ) {
        let current = self.current(timer.identity());
        match refusal(Some(Condition::Version(version)), current, &timer) {
            // Absent: the plain cancel answers `NotFound`, as a DELETE without a condition.
            None | Some(Error::NotPending { .. }) => self.cancel(timer, reply),
            Some(e) => {
                self.count_conflict(&e, timer.tenant());
                self.store
                    .answer_after_writes(timer.tenant(), Ack::CancelRefused(reply, e));
            }
        }
    }

    /// Counts a refusal in the shard's totals and in the tenant's series (the tenants past
    /// the series' bound together under `other`; `metrics::WebhookMetrics`). A refusal is
    /// rare, so the look-up of the tenant's series (a short lock) is paid only then.
    fn count_conflict(&self, e: &Error, tenant: &str) {
        let (counter, code) = match e {
            Error::Exists { .. } => (&self.metrics.conflicts_exists_total, "exists"),
            Error::VersionMismatch { .. } => {
                (&self.metrics.conflicts_version_total, "version_mismatch")
            }
            _ => (&self.metrics.conflicts_absent_total, "not_pending"),
        };
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.metrics.webhooks.tenant(tenant).conflict(code);
    }
}

/// Why a write under `cond` is refused with the key in state `current`; `None`: it applies.
pub(super) fn refusal(
    cond: Option<Condition>,
    current: Option<Current>,
    timer: &PackedTimer,
) -> Option<Error> {
    match (cond?, current) {
        (Condition::Absent, None) => None,
        (Condition::Absent, Some(c)) => Some(Error::Exists {
            version: c.version,
            fire_at_us: c.fire_at_us,
        }),
        (Condition::Version(_), None) => Some(Error::NotPending {
            tenant: timer.tenant().to_string(),
            key: timer.key().to_string(),
        }),
        (Condition::Version(v), Some(c)) if c.version == v => None,
        (Condition::Version(v), Some(c)) => Some(Error::VersionMismatch {
            expected: v,
            current: c.version,
        }),
    }
}
