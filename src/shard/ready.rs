//! The shard's ready index of the pull queues (`queue.rs` has the messages' transitions):
//! per tenant, the (key, version) of each message that became ready, oldest first, and the
//! keys of its messages out of the queue, leased and delayed, for counts. An entry is only a
//! hint: a receive checks the table (same version, still `Ready`) and skips one whose message
//! moved on (replaced, cancelled). A message is ready at most once between two receives, so an
//! entry is never doubled. Start-up and a partition's load fill it from the recovered records.
//!
//! The counts are exact with no walk ([`ShardQueues::lengths`]), for the scrape's gauges and
//! `GET /v1/queues/{tenant}` alike. The queue's own transitions keep the sets exact (a receive
//! adds its key to `leased`; an ack, a nack, a lease's end moves or removes it). A message
//! that leaves otherwise, deleted or replaced through the timer routes
//! ([`ShardQueues::left`]) or a ready one that ends its retention, leaves the sets at once;
//! its ready entry, if it had one, stays in the index until a receive or the scrape passes it,
//! and is counted stale meanwhile: the ready count is the index's length less the stale
//! entries. A walk would hold the shard for the tenant's whole queue (about 0.25 s a
//! shard with 1,000,000 messages), which any caller of the route could repeat.
//!
//! Cost: a push, a pop or a set insert or removal per change, and for a timer deleted or
//! replaced on a shard that holds messages of its tenant, a decode of its meta.

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
    /// Per tenant, the ready index's entries whose message is no longer ready under their
    /// version (it left the queue otherwise than by a receive): the ready count leaves them
    /// out until a pop drops them.
    stale: HashMap<Box<str>, u64>,
    pub(super) next_lease: u64,
}

impl ShardQueues {
    pub fn new(shared: Arc<PullQueues>) -> ShardQueues {
        ShardQueues {
            shared,
            ready: HashMap::new(),
            leased: HashMap::new(),
            delayed: HashMap::new(),
            stale: HashMap::new(),
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

    /// A ready entry of `tenant` no longer names a ready message (it left the queue
    /// otherwise than by a receive); a pop drops it later ([`ShardQueues::popped_stale`]).
    pub(super) fn went_stale(&mut self, tenant: &str) {
        *self.stale.entry(tenant.into()).or_default() += 1;
    }

    /// A pop dropped one of `tenant`'s stale entries.
    pub(super) fn popped_stale(&mut self, tenant: &str) {
        if let Some(n) = self.stale.get_mut(tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.stale.remove(tenant);
            }
        }
    }

    /// `tenant`'s ready index is empty: no entry of it is stale either.
    pub(super) fn index_emptied(&mut self, tenant: &str) {
        self.ready.remove(tenant);
        self.stale.remove(tenant);
    }

    /// Whether the shard holds no message at all (the usual case where no tenant has a
    /// queue): three emptiness checks.
    pub(super) fn holds_none(&self) -> bool {
        self.ready.is_empty() && self.leased.is_empty() && self.delayed.is_empty()
    }

    /// The timer `timer` (its meta as it was) left the table or was replaced, through the
    /// timer routes: if it was a message, it leaves the queue's counts now. A cheap no-op on a
    /// shard that holds no message of its tenant.
    pub(super) fn left(&mut self, timer: &PackedTimer) {
        if let Some(state) = self.state_of(timer) {
            self.left_as(timer.tenant(), timer.key(), state);
        }
    }

    /// The queue state of `timer` if it is a message of a tenant this shard holds messages of.
    pub(super) fn state_of(&self, timer: &PackedTimer) -> Option<MessageState> {
        let tenant = timer.tenant();
        if !self.ready.contains_key(tenant)
            && !self.leased.contains_key(tenant)
            && !self.delayed.contains_key(tenant)
        {
            return None;
        }
        Message::decode(timer.meta()).map(|m| m.state)
    }

    /// [`ShardQueues::left`] for a message whose state was read before it went.
    pub(super) fn left_as(&mut self, tenant: &str, key: &str, state: MessageState) {
        match state {
            MessageState::Ready => self.went_stale(tenant),
            MessageState::Leased | MessageState::Delayed => self.settled(tenant, key),
        }
    }

    /// The tenant's ready messages, leased keys and delayed keys on this shard: no walk (the
    /// module doc says why the figures are exact).
    pub(super) fn lengths(&self, tenant: &str) -> (u64, u64, u64) {
        let entries = self.ready.get(tenant).map_or(0, VecDeque::len) as u64;
        let ready = entries.saturating_sub(self.stale.get(tenant).copied().unwrap_or(0));
        let len =
            |set: &HashMap<Box<str>, HashSet<Box<str>>>| set.get(tenant).map_or(0, HashSet::len);
        (ready, len(&self.leased) as u64, len(&self.delayed) as u64)
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
