//! The shards as the node's loop sees them (`nodes::reader::Shards`): a partition read after
//! its lease was gained is handed to the shard that owns it to load, and a partition lost is
//! handed over to drop, each pushed beside that shard's ring (`Ring::control`).
//!
//! Both calls run on the node's thread and return at once: the records are packed into timers
//! here (one allocation each, off the shard's thread), and the push is one map insert, which
//! replaces a control still waiting for the same partition, so what waits for a busy or stuck
//! shard is at most one control per partition. A record too large for a timer (it could not
//! have been scheduled) is logged and left in Redis.

use crate::nodes::load::Read;
use crate::nodes::reader::Shards;
use crate::op::{Control, LoadedTimer};
use crate::partition::PARTITIONS;
use crate::ring::Ring;
use crate::timer::PackedTimer;
use std::sync::Arc;

/// The rings of an engine's shards, as the node's loop's [`Shards`].
pub(super) struct Rings(pub(super) Vec<Arc<Ring>>);

impl Rings {
    /// The ring of the shard that owns `partition` (`partition::owns`), if in range.
    fn ring(&self, partition: u32) -> Option<&Ring> {
        if partition >= PARTITIONS || self.0.is_empty() {
            return None;
        }
        self.0.get(partition as usize % self.0.len()).map(|r| &**r)
    }
}

impl Shards for Rings {
    fn load(&self, partition: u32, read: Read) {
        let Some(ring) = self.ring(partition) else {
            return;
        };
        let mut left = 0usize;
        let records = read
            .records
            .into_iter()
            .filter_map(|s| {
                let timer = PackedTimer::with_meta(&s.tenant, &s.key, &s.meta, &s.payload);
                left += usize::from(timer.is_none());
                Some(LoadedTimer {
                    timer: timer?,
                    version: s.version,
                    deadline: s.deadline,
                })
            })
            .collect();
        if left > 0 || read.skipped > 0 {
            tracing::error!(
                partition,
                too_large = left,
                malformed = read.skipped,
                "records of a gained partition left in Redis, not loaded"
            );
        }
        ring.control(partition, Control::Load(records, read.floor));
    }

    fn drop_partition(&self, partition: u32) {
        if let Some(ring) = self.ring(partition) {
            ring.control(partition, Control::Drop);
        }
    }
}
