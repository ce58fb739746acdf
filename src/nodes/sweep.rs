//! The sweep of the relays: every few seconds, the stream entries left in the relay streams of
//! the partitions this node holds (`store::redis::relay`: a batch whose relay failed, a node
//! that died between its script and its relay, a partition gained with entries in its relay)
//! are relayed to their tenants' streams. Relaying is idempotent, so a sweep that meets a
//! batch's own relay adds nothing twice.
//!
//! # Cost
//!
//! Per sweep (every [`EVERY`]): one `XRANGE` per held partition, pipelined by master (a few
//! hundred small commands, empty answers when nothing is left); per entry left, the relay's
//! three commands.

use super::holdings::Holdings;
use crate::store::redis::cluster::{ClusterClient, ClusterConfig};
use crate::store::redis::relay;
use std::time::{Duration, Instant};

/// Time between two sweeps.
const EVERY: Duration = Duration::from_secs(2);

/// Entries younger than this are left to the batch that wrote them (its relay follows its
/// script within milliseconds); older ones are swept.
const AGE: Duration = Duration::from_secs(2);

/// Entries relayed per partition and sweep.
const COUNT: usize = 256;

/// Sweeps the relays of what `holdings` holds, every [`EVERY`], until the future is dropped
/// (with the node's loop). Run it on the loop's executor, with a client of its own.
pub async fn serve(cluster: ClusterConfig, holdings: &Holdings) {
    let mut client = loop {
        match ClusterClient::connect(cluster.clone()).await {
            Ok(c) => break c,
            Err(_) => glommio::timer::sleep(EVERY).await,
        }
    };
    loop {
        glommio::timer::sleep(EVERY).await;
        let held = holdings.owned(Instant::now());
        if held.is_empty() {
            continue;
        }
        let before_ms = std::time::SystemTime::now()
            .checked_sub(AGE)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        let left = match relay::leftovers(&mut client, &held, before_ms, COUNT).await {
            Ok(left) => left,
            Err(e) => {
                tracing::debug!(error = %e, "node: a sweep of the relays failed; the next one tries again");
                continue;
            }
        };
        if left.is_empty() {
            continue;
        }
        let n = left.len();
        match relay::forward(&mut client, &left).await {
            Ok(()) => tracing::info!(entries = n, "node: stream entries left in relays relayed"),
            Err(e) => {
                tracing::warn!(error = %e, "node: stream entries left in relays not relayed yet")
            }
        }
    }
}
