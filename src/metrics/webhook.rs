//! Webhook deliveries, and the conditional writes refused, per tenant on one shard:
//! [`DeliveryMetrics`] for each tenant, and [`WebhookMetrics`], which bounds how many tenants
//! have series of their own.

use super::counter::single_writer_add;
use super::histogram::{one_two_five, Histogram};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// `punctual_webhook_delivery_latency_seconds` upper bounds, in ns: 100 µs to 10 s in 1-2-5
/// steps, then 30 s, 1, 2 and 10 minutes.
pub const DELIVERY_BOUNDS_NS: [u64; 20] = one_two_five(
    100_000,
    &[
        30_000_000_000,
        60_000_000_000,
        120_000_000_000,
        600_000_000_000,
    ],
);

/// Why a delivery attempt failed: the `class` label of `punctual_webhook_failures_total`.
pub const FAILURE_CLASSES: [&str; 5] = ["connect", "timeout", "5xx", "throttled", "permanent"];

/// Why a conditional write or cancel was refused: the `code` label of
/// `punctual_tenant_conflicts_total` (the error's code; `not_pending` is the `404` of an
/// `if_version` with nothing pending).
pub const CONFLICT_CODES: [&str; 3] = ["exists", "version_mismatch", "not_pending"];

/// One tenant's deliveries on one shard, and its conditional writes refused there.
pub struct DeliveryMetrics {
    pub attempts: AtomicU64,
    pub successes: AtomicU64,
    /// By class, in the order of [`FAILURE_CLASSES`].
    pub failures: [AtomicU64; 5],
    /// Deliveries a cap (per host or per tenant) held back; each is retried shortly.
    pub refused: AtomicU64,
    /// Attempts our own name resolver had no room for (`Busy`): made again without using an
    /// attempt, up to `MAX_BUSY` in a row (`sink::webhook::meta`).
    pub resolver_busy: AtomicU64,
    /// Timers that became dead letters.
    pub dead_total: AtomicU64,
    /// Dead letters held now (made, recovered, less discarded and re-driven).
    pub dead: AtomicI64,
    pub in_flight: AtomicI64,
    /// Timers waiting in a cap's queue for a slot (one entry per timer).
    pub held_back: AtomicI64,
    /// The answer's arrival minus the timer's deadline, ns, for successful deliveries.
    pub latency: Histogram,
    /// Conditional writes and cancels refused (`shard::terms`), by code, in the order of
    /// [`CONFLICT_CODES`].
    pub conflicts: [AtomicU64; 3],
}

impl Default for DeliveryMetrics {
    fn default() -> Self {
        DeliveryMetrics {
            attempts: AtomicU64::new(0),
            successes: AtomicU64::new(0),
            failures: Default::default(),
            refused: AtomicU64::new(0),
            resolver_busy: AtomicU64::new(0),
            dead_total: AtomicU64::new(0),
            dead: AtomicI64::new(0),
            in_flight: AtomicI64::new(0),
            held_back: AtomicI64::new(0),
            latency: Histogram::new(&DELIVERY_BOUNDS_NS, 1e9),
            conflicts: Default::default(),
        }
    }
}

impl DeliveryMetrics {
    /// The sum of the counters: it moves whenever the tenant does anything.
    fn counted(&self) -> u64 {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            &self.attempts,
            &self.successes,
            &self.refused,
            &self.resolver_busy,
            &self.dead_total,
        ]
        .into_iter()
        .chain(&self.failures)
        .chain(&self.conflicts)
        .map(get)
        .fold(0u64, u64::wrapping_add)
    }

    /// Whether the tenant holds anything now: dead letters, attempts in flight, timers held back.
    fn holds(&self) -> bool {
        [&self.dead, &self.in_flight, &self.held_back]
            .into_iter()
            .any(|g| g.load(Ordering::Relaxed) != 0)
    }

    /// Counts a refusal of `code` (one of [`CONFLICT_CODES`]).
    pub fn conflict(&self, code: &str) {
        if let Some(i) = CONFLICT_CODES.iter().position(|c| *c == code) {
            single_writer_add(&self.conflicts[i], 1);
        }
    }

    /// Counts a failure of `class` (one of [`FAILURE_CLASSES`]).
    pub fn failed(&self, class: &str) {
        if let Some(i) = FAILURE_CLASSES.iter().position(|c| *c == class) {
            single_writer_add(&self.failures[i], 1);
        }
    }

    /// `gauge += d`; one writer (the shard's thread).
    pub fn add(gauge: &AtomicI64, d: i64) {
        gauge.store(
            gauge.load(Ordering::Relaxed).wrapping_add(d),
            Ordering::Relaxed,
        );
    }
}

/// The per-tenant figures of one shard: one [`DeliveryMetrics`] per tenant seen, for at most
/// [`TENANT_SERIES`] tenants at once; a tenant that finds them all taken is counted under one
/// shared entry exported as `tenant="other"`, so that tenants a server does not know (an open
/// server) cannot grow the exposition without bound.
///
/// A tenant's series goes when the tenant does: once it has held nothing (no dead letter,
/// nothing in flight or held back) and counted nothing for [`SERIES_IDLE`], the shard's sink
/// retires it ([`WebhookMetrics::retire_idle`]), unless the tenant has a table of its own in
/// the configuration. Its place is free for another tenant; should it come back, its series
/// starts again from zero (a counter reset, which `rate()` reads correctly). While an entry
/// lives it never changes, so its counters stay monotonic.
///
/// One writer: the shard's thread (its sink, its deliveries, its dead letters). The sink keeps
/// its own map of these (no lock per delivery); this list, under a mutex, is taken when a
/// tenant is first seen, by the sink's sweep once a minute, and by a scrape.
#[derive(Default)]
pub struct WebhookMetrics {
    tenants: std::sync::Mutex<Vec<Series>>,
    /// The tenants past the first [`TENANT_SERIES`], together.
    other: std::sync::Arc<DeliveryMetrics>,
    /// Whether any tenant was counted under `other`.
    folded: std::sync::atomic::AtomicBool,
}

/// Tenants with webhook series of their own, per shard.
pub const TENANT_SERIES: usize = 64;

/// How long a tenant's webhook series stays once it holds and counts nothing.
pub const SERIES_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

/// One tenant's series, and since when it has been idle.
struct Series {
    tenant: String,
    m: std::sync::Arc<DeliveryMetrics>,
    /// The sum of its counters at the last sweep, and the sweep that last saw it move (or
    /// hold something).
    counted: u64,
    since: std::time::Instant,
}

/// The label the tenants past [`TENANT_SERIES`] share (a tenant named `other` shares it too).
pub const OTHER_TENANTS: &str = "other";

impl WebhookMetrics {
    /// The figures of `tenant`, made on first use.
    pub fn tenant(&self, tenant: &str) -> std::sync::Arc<DeliveryMetrics> {
        let Ok(mut list) = self.tenants.lock() else {
            return Default::default();
        };
        if let Some(s) = list.iter().find(|s| s.tenant == tenant) {
            return s.m.clone();
        }
        if list.len() >= TENANT_SERIES {
            self.folded.store(true, Ordering::Relaxed);
            return self.other.clone();
        }
        let m = std::sync::Arc::new(DeliveryMetrics::default());
        list.push(Series {
            tenant: tenant.to_string(),
            m: m.clone(),
            counted: 0,
            since: std::time::Instant::now(),
        });
        m
    }

    /// Retires the series of every tenant that has held and counted nothing since `idle`
    /// before `now` and that `keep` does not name; their names. Called on the shard's thread
    /// (the only writer), so no count can land in a series as it goes.
    pub fn retire_idle(
        &self,
        now: std::time::Instant,
        idle: std::time::Duration,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let Ok(mut list) = self.tenants.lock() else {
            return Vec::new();
        };
        let mut gone = Vec::new();
        list.retain_mut(|s| {
            let counted = s.m.counted();
            if counted != s.counted || s.m.holds() || keep(&s.tenant) {
                s.counted = counted;
                s.since = now;
                return true;
            }
            if now.saturating_duration_since(s.since) < idle {
                return true;
            }
            gone.push(std::mem::take(&mut s.tenant));
            false
        });
        gone
    }

    /// (tenant, figures) of every tenant with its own series, then `other` once it counts
    /// anyone, for exporters.
    pub fn snapshot(&self) -> Vec<(String, std::sync::Arc<DeliveryMetrics>)> {
        let mut out: Vec<_> = self
            .tenants
            .lock()
            .map(|l| l.iter().map(|s| (s.tenant.clone(), s.m.clone())).collect())
            .unwrap_or_default();
        if self.folded.load(Ordering::Relaxed) {
            out.push((OTHER_TENANTS.to_string(), self.other.clone()));
        }
        out
    }
}

#[cfg(test)]
#[path = "webhook_tests.rs"]
mod tests;
