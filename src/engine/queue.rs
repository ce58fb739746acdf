//! The pull queues through the handle (`crate::queue`): a receive asks the tenant's shards
//! one after the other, each for what the receive still lacks, so that no more messages are
//! leased than it asked for; a settle goes to the shard of the receipt's key; a count adds
//! every shard's. The wait of a long poll is the caller's (`api/queues.rs`): these calls
//! never hold a shard.

use super::handle::{answer, Handle};
use crate::error::{validate_name, Error, NameKind, Result};
use crate::op::{reply_channel, Op};
use crate::queue::{PullQueues, QueueCounts, ReceiptOf, Received, Settled, Settlement};
use crate::runtime::doorbell::relay;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Where the next receive starts among the shards: each starts one further, so that one
/// shard's backlog does not keep the others' messages waiting.
static NEXT_START: AtomicUsize = AtomicUsize::new(0);

impl Handle {
    /// The tenants' queue settings, receipts and ready count.
    pub fn pull_queues(&self) -> &Arc<PullQueues> {
        &self.inner.queues
    }

    /// Up to `max` of `tenant`'s ready messages from its shards, each leased for
    /// `visibility_ms`; answered once the leases are durable. Empty when none is ready.
    pub fn queue_receive_async(
        &self,
        tenant: &str,
        max: usize,
        visibility_ms: u64,
    ) -> impl Future<Output = Result<Vec<Received>>> + Send + 'static {
        let checked = validate_name(NameKind::Tenant, tenant);
        let inner = self.inner.clone();
        let tenant = tenant.to_string();
        let start = NEXT_START.fetch_add(1, Ordering::Relaxed);
        async move {
            checked?;
            let n = inner.rings.len();
            let mut got: Vec<Received> = Vec::new();
            for i in 0..n {
                if got.len() >= max {
                    break;
                }
                if inner.stopping.load(Ordering::Acquire) {
                    return Err(Error::ShuttingDown);
                }
                let Some(ring) = inner.rings.get((start + i) % n) else {
                    continue;
                };
                let (tx, rx) = reply_channel();
                let op = Op::QueueReceive {
                    tenant: tenant.clone(),
                    max: max - got.len(),
                    visibility_ms,
                    reply: tx,
                };
                ring.push(&tenant, op)?;
                got.extend(relay(rx).await.map_err(|_| Error::ShuttingDown)??);
            }
            Ok(got)
        }
    }

    /// Acks, nacks or extends the message `receipt` names, on its key's shard.
    pub fn queue_settle_async(
        &self,
        tenant: &str,
        receipt: &ReceiptOf,
        how: Settlement,
    ) -> impl Future<Output = Result<Settled>> + Send + 'static {
        let (version, lease) = (receipt.version, receipt.lease);
        self.call(tenant, &receipt.key, move |timer, reply| Op::QueueSettle {
            timer,
            version,
            lease,
            how,
            reply,
        })
    }

    /// `tenant`'s messages on every shard, counted: each shard answers from its index's
    /// lengths, exact with no walk (`shard::ready`).
    pub fn queue_count_async(
        &self,
        tenant: &str,
    ) -> impl Future<Output = Result<QueueCounts>> + Send + 'static {
        let checked = validate_name(NameKind::Tenant, tenant);
        let waits: Vec<_> = (0..self.inner.rings.len())
            .map(|shard| {
                let (tx, rx) = reply_channel();
                let op = Op::QueueCount {
                    tenant: tenant.to_string(),
                    reply: tx,
                };
                answer(self.push_to(shard, tenant, op), rx)
            })
            .collect();
        async move {
            checked?;
            let mut all = QueueCounts::default();
            for w in waits {
                all.add(&w.await?);
            }
            Ok(all)
        }
    }
}
