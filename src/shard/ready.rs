//! The shard's ready index of the pull queues (`queue.rs` has the messages' transitions):
//! per tenant, the (key, version) of each message that became ready, oldest first, and the
//! keys of its messages out of the queue, leased and delayed, for counts. An entry is only a
//! hint: a receive checks the table (same version, still `Ready`) and skips one whose message
//! moved on (replaced, cancelled). A message is ready at most once between two receives, so an
//! entry is never doubled. Start-up and a partition's load fill it from the recovered records.
//!
//! The queue's own transitions keep the sets exact (a receive adds its key to `leased`; an
//! ack, a nack, a lease's end moves or removes it), so their sizes and the ready index's
//! length are the scrape's gauges at no walk ([`ShardQueues::lengths`]). What the queue does
//! not see, a message deleted or replaced through the timer routes, or a ready one that ends
//! its retention, stays counted until a receive passes it or a count walks the tenant
//! (`GET /v1/queues/{tenant}`, which prunes it).
//!
//! Cost: a push, a pop or a set insert or removal per change; a count walks the tenant's
//! entries.

use crate::queue::{Message, MessageState, PullQueues};
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// The shard's ready index and the keys of its messages out of the queue (leased, delayed).
pub(crate) struct ShardQueues {
    pub shared: Arc<PullQueues>,
    pub(super) ready: HashMap<Box<str>, VecDeque<(Box<str>, u64)>>,
    /// Keys of messages leased, per tenant: what a count looks at beside the ready index.
    pub(super) leased: HashMap<Box<str>, HashSet<Box<str>>>,
    /// Keys of messages nacked with a delay, per tenant.
    pub(super) delayed: HashMap<Box<str>, HashSet<Box<str>>>,
    pub(super) next_lease: u64,
}

impl ShardQueues {
    pub fn new(shared: Arc<PullQueues>) -> ShardQueues {
        ShardQueues {
            shared,
            ready: HashMap::new(),
            leased: HashMap::new(),
            delayed: HashMap::new(),
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

    /// A message of `tenant` under `key` left the queue: leased, or (`delayed`) nacked with
    /// a delay.
    pub(super) fn made_out(&mut self, tenant: &str, key: &str, delayed: bool) {
        self.settled(tenant, key);
        let set = match delayed {
            true => &mut self.delayed,
            false => &mut self.leased,
        };
        set.entry(tenant.into()).or_default().insert(key.into());
    }

    /// The message under `key` is neither leased nor delayed any more: acked, nacked, its
    /// lease or delay ended, or a dead letter.
    pub(super) fn settled(&mut self, tenant: &str, key: &str) {
        for set in [&mut self.leased, &mut self.delayed] {
            if let Some(keys) = set.get_mut(tenant) {
                keys.remove(key);
                if keys.is_empty() {
                    set.remove(tenant);
                }
            }
        }
    }

    /// The tenant's ready entries, leased keys and delayed keys on this shard, as the index
    /// holds them: no walk (the module doc says what they may still count).
    pub(super) fn lengths(&self, tenant: &str) -> (u64, u64, u64) {
        let ready = self.ready.get(tenant).map_or(0, VecDeque::len);
        let len =
            |set: &HashMap<Box<str>, HashSet<Box<str>>>| set.get(tenant).map_or(0, HashSet::len);
        (
            ready as u64,
            len(&self.leased) as u64,
            len(&self.delayed) as u64,
        )
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
            Some(MessageState::Leased) => self.made_out(timer.tenant(), timer.key(), false),
            Some(MessageState::Delayed) => self.made_out(timer.tenant(), timer.key(), true),
            None => {}
        }
    }
}
