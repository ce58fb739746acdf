//! The outbox: writes waiting for Redis, in the order the shard made them.
//!
//! The shard appends (registrations, cancels, fires); the store task encodes a prefix into one
//! pipeline, and pops that prefix only once Redis has answered it. On a failure nothing is
//! popped, so the same prefix is written again after the reconnect: every write is an
//! assignment (HSET of the whole record, HDEL, XADD of a whole entry), so replaying a suffix
//! that Redis had already applied leaves the same state, apart from duplicate stream entries,
//! which carry the same (tenant, key, version).
//!
//! Invariants: entries leave only from the front, only after acknowledgement; the pipelines
//! in flight cover a prefix, oldest first. Registrations and cancels are admitted only while
//! `len() < limit`; fires are never refused (each stands for a timer that was already
//! admitted), but the shard stops firing while `fires == fire_limit` (`fire_room`), so the
//! outbox holds at most `limit + fire_limit` entries.
//!
//! A write may also name the version of the timer it writes, when that timer must not fire
//! before Redis holds it (a recurring schedule's occurrence, see `Outbox::push_unfired`):
//! [`Outbox::written`] says whether it does yet.
//!
//! Cost: one push per write; the caller's reply channel rides in the entry. The entries are
//! kept in fixed chunks (`store::deque`): a doubling `VecDeque` of up to `limit + fire_limit`
//! 232-byte entries copied 30 MB in one push, in the fire pass, the first time a burst filled
//! it.

use crate::error::Error;
use crate::store::acks::Acks;
use crate::store::deque::Deque;
use crate::store::Ack;
use redis::Cmd;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

pub struct Entry {
    pub first: Cmd,
    /// Fires carry two commands (XADD, HDEL) that must apply together.
    pub second: Option<Cmd>,
    /// A dead letter carries a third (HSET of the letter, HDEL of the timer, XADD).
    pub third: Option<Cmd>,
    /// On a cluster of nodes, the lease holder of the entry's partition when the entry was
    /// queued (`<node>/<nonce>-<token>:<epoch>`), which its write is fenced by: a write queued under one lease
    /// is never sent under a later one, even by this node (`clustered.rs`). `None` elsewhere,
    /// or when the partition was not held when it was queued (then it is not sent).
    pub holder: Option<Arc<str>>,
}

impl Entry {
    pub fn commands(&self) -> usize {
        1 + usize::from(self.second.is_some()) + usize::from(self.third.is_some())
    }

    /// Whether the entry's commands must apply together (the pipeline is a transaction).
    pub fn is_atomic(&self) -> bool {
        self.second.is_some()
    }

    /// The commands after the first.
    pub fn rest(&self) -> impl Iterator<Item = &Cmd> {
        self.second.iter().chain(self.third.iter())
    }

    /// About what the entry's commands take encoded: their arguments' bytes, and 16 for each
    /// argument's header (`$<len>\r\n…\r\n`). A few loads per argument, no encoding.
    pub fn bytes(&self) -> usize {
        std::iter::once(&self.first)
            .chain(self.rest())
            .flat_map(Cmd::args_iter)
            .map(|a| match a {
                redis::Arg::Simple(b) => b.len() + 16,
                redis::Arg::Cursor => 16,
            })
            .sum()
    }
}

/// The most bytes one pipeline takes, about (`Entry::bytes`), besides its first entry, which
/// is sent whatever its size. The pipeline is encoded in one step on the shard's thread and up
/// to four are held in flight: 4,096 writes of 128 KiB each were one encoding of 512 MiB (a
/// stop of hundreds of milliseconds, and gigabytes held). Writes of a few hundred bytes fill
/// 4,096 commands well before this.
pub const PIPELINE_BYTES: usize = 2 << 20;

pub struct Outbox {
    entries: Deque<Entry>,
    /// The callers' acks, one per entry, in the same order (`store::acks`).
    pub acks: Acks,
    /// Entries ever pushed, and ever popped: an entry's number is `pushed` at its push.
    pushed: u64,
    popped: u64,
    /// (entry number, version) of the writes whose timer may not fire until Redis answered
    /// them, oldest first; the versions increase, as the shard hands them out.
    unfired: VecDeque<(u64, u64)>,
}

impl Outbox {
    pub fn new(limit: usize, fire_limit: usize, ack_timeout: Duration) -> Outbox {
        Outbox {
            entries: Deque::new(),
            acks: Acks::new(limit, fire_limit, ack_timeout),
            pushed: 0,
            popped: 0,
            unfired: VecDeque::new(),
        }
    }

    /// A write of the timer of `version` that may not fire before Redis answered it
    /// ([`Outbox::written`]).
    pub fn push_unfired(
        &mut self,
        first: Cmd,
        ack: Ack,
        tenant: &str,
        holder: Option<Arc<str>>,
        version: u64,
    ) {
        self.unfired.push_back((self.pushed, version));
        self.push(first, None, ack, tenant, holder);
    }

    /// A recurring schedule's record, written after the occurrences its fire armed: those
    /// pushed just before it (by [`Outbox::push_unfired`]) fire only once it too is answered,
    /// so that no occurrence is delivered while Redis still holds the cursor that arms it
    /// again.
    pub fn push_cursor(&mut self, first: Cmd, ack: Ack, tenant: &str, holder: Option<Arc<str>>) {
        let mut before = self.pushed;
        for (n, _) in self.unfired.iter_mut().rev() {
            if *n + 1 != before {
                break;
            }
            before = *n;
            *n = self.pushed;
        }
        self.push(first, None, ack, tenant, holder);
    }

    /// Whether the timer of `version` may fire: no write of it pushed by
    /// [`Outbox::push_unfired`] waits for Redis's answer. Answered (or dropped as refused)
    /// entries leave from the front, so what waits is a suffix of what was pushed, and a
    /// binary search over its increasing versions finds it.
    pub fn written(&self, version: u64) -> bool {
        self.unfired
            .binary_search_by_key(&version, |&(_, v)| v)
            .is_err()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `tenant` is whose write it is (counted against its share when a caller waits);
    /// `holder` is the partition's lease holder now, on a cluster of nodes ([`Entry::holder`]).
    pub fn push(
        &mut self,
        first: Cmd,
        second: Option<Cmd>,
        ack: Ack,
        tenant: &str,
        holder: Option<Arc<str>>,
    ) {
        self.push_entry(first, second, None, ack, tenant, holder);
    }

    /// Three commands that apply together (a dead letter's).
    pub fn push_three(&mut self, cmds: [Cmd; 3], holder: Option<Arc<str>>) {
        let [a, b, c] = cmds;
        self.push_entry(a, Some(b), Some(c), Ack::None, "", holder);
    }

    fn push_entry(
        &mut self,
        first: Cmd,
        second: Option<Cmd>,
        third: Option<Cmd>,
        ack: Ack,
        tenant: &str,
        holder: Option<Arc<str>>,
    ) {
        debug_assert!(
            third.is_none() || second.is_some(),
            "a third command only in an entry sent as a transaction"
        );
        // A fire's entry is the one with a second command (its stream entry and removal).
        self.acks.push(ack, second.is_some(), tenant);
        self.entries.push_back(Entry {
            first,
            second,
            third,
            holder,
        });
        self.pushed += 1;
        debug_assert_eq!(self.entries.len(), self.acks.len(), "one ack per entry");
    }

    /// The next pipeline after the first `skip` entries (those already in flight): at most
    /// `max_commands` commands and about `max_bytes` bytes (`Entry::bytes`), at least one
    /// entry.
    pub fn batch(
        &self,
        skip: usize,
        max_commands: usize,
        max_bytes: usize,
    ) -> impl Iterator<Item = &Entry> {
        let (mut commands, mut bytes) = (0, 0usize);
        self.entries.iter().skip(skip).take_while(move |e| {
            let size = e.bytes();
            let fits = commands == 0
                || (commands + e.commands() <= max_commands
                    && bytes.saturating_add(size) <= max_bytes);
            commands += e.commands();
            bytes = bytes.saturating_add(size);
            fits
        })
    }

    /// Pops the first entries, one per outcome, answering each caller with its outcome.
    pub fn complete(&mut self, outcomes: impl IntoIterator<Item = Result<(), Error>>) {
        for outcome in outcomes {
            if self.entries.pop_front().is_none() {
                break;
            }
            self.acks.pop(outcome);
            self.popped += 1;
        }
        while self.unfired.front().is_some_and(|&(n, _)| n < self.popped) {
            self.unfired.pop_front();
        }
        debug_assert_eq!(self.entries.len(), self.acks.len(), "one ack per entry");
    }
}

crate::store::durable::queue_with_acks_field!(Outbox);

#[cfg(test)]
#[path = "outbox_tests.rs"]
mod tests;
