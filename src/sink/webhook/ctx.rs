//! What the sink and its delivery tasks share on the shard's thread ([`Ctx`]): the settings,
//! the client's pool, the caps' counts and queues, the shard's end of the follow-ups and the
//! tenants' figures; and the one way a delivery becomes a dead letter ([`dead`]). Apart from
//! `mod.rs`, which starts deliveries, and `deliver.rs`, which runs one, so that both read it
//! without importing each other.
//!
//! Cost: a tenant's figures are one map lookup (the shared list's lock only on a tenant's
//! first use); an unhold is one queue lookup, skipped while nothing is held.

use super::client;
use super::meta::{Delivery, State};
use super::policy;
use super::queue::Queues;
use super::settings::{Map, Target, WebhookSettings};
use crate::metrics::{DeliveryMetrics, ShardMetrics};
use crate::sink::{Followups, Next};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

/// What the sink and its delivery tasks share, on the shard's thread.
pub(crate) struct Ctx {
    pub shard: usize,
    pub settings: Arc<WebhookSettings>,
    pub pool: client::Pool,
    /// Where outcomes and wakes go to the shard, one call each.
    pub followups: Followups,
    pub per_host: RefCell<Map<Target, u32>>,
    pub per_tenant: RefCell<Map<Box<str>, u32>>,
    pub queues: RefCell<Queues>,
    pub metrics: Arc<ShardMetrics>,
    pub(super) tenant_metrics: RefCell<Map<Box<str>, Arc<DeliveryMetrics>>>,
    /// When the idle tenants' series are next swept.
    pub(super) sweep_at: std::cell::Cell<std::time::Instant>,
    pub jitter: RefCell<policy::Jitter>,
}

/// How often the sink looks for idle tenants' series to retire.
pub(super) const SWEEP_EVERY: Duration = Duration::from_secs(60);

impl Ctx {
    /// The tenant's figures, from the sink's own map (the shared list's lock only on first use).
    pub fn tenant(&self, tenant: &str) -> Arc<DeliveryMetrics> {
        if let Some(m) = self.tenant_metrics.borrow().get(tenant) {
            return m.clone();
        }
        let m = self.metrics.webhooks.tenant(tenant);
        self.tenant_metrics
            .borrow_mut()
            .insert(tenant.into(), m.clone());
        m
    }

    /// Retires the series of tenants idle for [`crate::metrics::SERIES_IDLE`] (not those
    /// with a table of their own), at most once per [`SWEEP_EVERY`].
    pub(super) fn sweep_series(&self, now: std::time::Instant) {
        if now < self.sweep_at.get() {
            return;
        }
        self.sweep_at.set(now + SWEEP_EVERY);
        let gone = self
            .metrics
            .webhooks
            .retire_idle(now, crate::metrics::SERIES_IDLE, |t| {
                self.settings.tenant(t).is_some()
            });
        let mut mine = self.tenant_metrics.borrow_mut();
        for t in gone {
            mine.remove(t.as_str());
        }
    }

    pub fn draw(&self) -> u64 {
        self.jitter.borrow_mut().draw()
    }

    /// Takes the timer out of the cap's queue it waits in, if any (its delivery starts, it
    /// is dead, cancelled or replaced).
    pub fn unhold(&self, tenant: &str, key: &str) {
        if !self.queues.borrow().is_empty() {
            self.unhold_id(&identity(tenant, key), tenant);
        }
    }

    pub(super) fn unhold_id(&self, identity: &[u8], tenant: &str) {
        let forgot = self.queues.borrow_mut().forget(identity);
        if forgot {
            DeliveryMetrics::add(&self.tenant(tenant).held_back, -1);
        }
    }
}

/// A timer's identity (what [`PackedTimer::identity`] gives) from its
/// names.
fn identity(tenant: &str, key: &str) -> Vec<u8> {
    let mut id = Vec::with_capacity(2 + tenant.len() + key.len());
    id.extend_from_slice(&[tenant.len() as u8, key.len() as u8]);
    id.extend_from_slice(tenant.as_bytes());
    id.extend_from_slice(key.as_bytes());
    id
}

/// `d` as a dead letter.
pub(super) fn dead(mut d: Delivery, ctx: &Ctx, tenant: &str) -> Next {
    d.state = State::Dead;
    crate::metrics::single_writer_add(&ctx.tenant(tenant).dead_total, 1);
    Next::Dead {
        fire_at: crate::units::UtcMicros(d.fire_at_us),
        meta: d.encode(),
    }
}
