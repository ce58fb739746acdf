//! A shard's start: its store loads the shard's timers before the loop applies any op. Ops
//! that arrive meanwhile wait in order; any that wait longer than the store's ack timeout are
//! answered with the store's refusal (`StoreUnavailable`), and the rest are applied once the
//! table is loaded, so the ring's order is kept. Dead letters come back the same way; their
//! metadata says what they are, and they go to the dead-letter table, not the wheel.

use super::dead::Letter;
use super::Shard;
use crate::clock::TimeSource;
use crate::metrics::DeliveryMetrics;
use crate::op::Op;
use crate::sink::webhook;
use crate::store::Recovered;
use crate::timer::PackedTimer;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl<S: TimeSource> Shard<S> {
    /// Recovers the shard's timers; `false` when the shard was stopped first.
    pub(super) async fn recover(&mut self) -> bool {
        let limit = self.store.ack_timeout();
        let refusal = self.store.refusal();
        let mut held: Vec<(Instant, Op)> = Vec::new();
        let (table, ring, stop, quotas, store) = (
            &mut self.table,
            &self.ring,
            &self.stop,
            &self.quotas,
            &mut self.store,
        );
        let (dead, metrics) = (&mut self.deliveries.dead, &self.metrics);
        // A recovered timer was acknowledged: it counts against its tenant's quota even if
        // that leaves the tenant over it (new keys are refused until it drains).
        let mut insert = |r: Recovered<'_>| -> bool {
            let Some(timer) = PackedTimer::with_meta(r.tenant, r.key, r.meta, r.payload) else {
                return false;
            };
            if webhook::is_dead(r.meta) {
                table.observe_version(r.version);
                if dead
                    .insert(Letter::new(timer, r.version, r.deadline))
                    .is_none()
                {
                    if let Some(q) = quotas.get(r.tenant) {
                        q.force();
                    }
                    DeliveryMetrics::add(&metrics.webhooks.tenant(r.tenant).dead, 1);
                }
                return true;
            }
            match table.insert_with_version(timer, r.deadline, r.version) {
                Ok(u) => {
                    if !u.replaced {
                        if let Some(q) = quotas.get(r.tenant) {
                            q.force();
                        }
                    }
                    true
                }
                Err(_) => false,
            }
        };
        let hold = async {
            loop {
                while let Some(op) = ring.pop() {
                    held.push((Instant::now(), op));
                }
                let expired = held.partition_point(|(t, _)| t.elapsed() >= limit);
                for (_, op) in held.drain(..expired) {
                    op.refuse(refusal.clone());
                }
                if stop.load(Ordering::Acquire) {
                    return false;
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
        };
        let recovered = futures_lite::future::or(store.recover(&mut insert, stop), hold).await;
        if !recovered {
            return false;
        }
        // Versions only grow, even past a restart with the clock behind.
        self.table.observe_version(self.store.version_floor());
        self.metrics
            .pending
            .store(self.table.len() as u64, Ordering::Relaxed);
        self.store.begin_pass();
        for (_, op) in held {
            self.apply(op);
        }
        true
    }
}
