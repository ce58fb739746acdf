//! The shard's ready index of the pull queues (`queue.rs` has the messages' transitions):
//! per tenant, the (key, version) of each message that became ready, oldest first, and the
//! keys of its messages out of the queue (leased, delayed), for counts. An entry is only a
//! hint: a receive checks the table (same version, still `Ready`) and skips one whose message
//! moved on (replaced, cancelled). A message is ready at most once between two receives, so an
//! entry is never doubled. Start-up and a partition's load fill it from the recovered records.
//!
//! Cost: a push or a pop per change; a count walks the tenant's entries.

use crate::queue::{Message, MessageState, PullQueues};
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// The shard's ready index and the keys of its messages out of the queue (leased, delayed).
pub(crate) struct ShardQueues {
    pub shared: Arc<PullQueues>,
    pub(super) ready: HashMap<Box<str>, VecDeque<(Box<str>, u64)>>,
    /// Keys of messages leased or delayed, per tenant: what a count looks at beside the ready
    /// index. Pruned by the count.
    pub(super) out: HashMap<Box<str>, HashSet<Box<str>>>,
    pub(super) next_lease: u64,
}

impl ShardQueues {
    pub fn new(shared: Arc<PullQueues>) -> ShardQueues {
        ShardQueues {
            shared,
            ready: HashMap::new(),
            out: HashMap::new(),
            next_lease: 0,
        }
    }

    /// A message of `tenant` under `key` became ready as `version`.
    pub fn made_ready(&mut self, tenant: &str, key: &str, version: u64) {
        self.ready
            .entry(tenant.into())
            .or_default()
            .push_back((key.into(), version));
        self.shared.bump(tenant);
    }

    pub(super) fn made_out(&mut self, tenant: &str, key: &str) {
        self.out
            .entry(tenant.into())
            .or_default()
            .insert(key.into());
    }

    /// The deadline a stored message comes back with: a ready one's no later than the end of
    /// its tenant's retention as configured now (it may have shrunk since it was written).
    pub fn recovered_deadline(&self, timer: &PackedTimer, deadline: UtcMicros) -> UtcMicros {
        match Message::decode(timer.meta()) {
            Some(m) if m.state == MessageState::Ready => {
                let end = m.expires_at_us(self.shared.retention_us(timer.tenant()));
                UtcMicros(deadline.0.min(end))
            }
            _ => deadline,
        }
    }

    /// A stored message came back (start-up, a partition's load): indexed by its state.
    pub fn recovered(&mut self, timer: &PackedTimer, version: u64) {
        match Message::decode(timer.meta()).map(|m| m.state) {
            Some(MessageState::Ready) => self.made_ready(timer.tenant(), timer.key(), version),
            Some(_) => self.made_out(timer.tenant(), timer.key()),
            None => {}
        }
    }
}
