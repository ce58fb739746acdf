//! Writes held back behind a due timer whose record is not durable yet, so that a key written
//! without pause still fires at its deadline.
//!
//! # Why
//!
//! A timer fires only once its record is durable (`Store::may_fire`, `fire.rs`): fired
//! before, a crash would bring back the version it replaced, to fire again. A due timer whose
//! record is not written yet is re-armed and fires after the store's next commit. But a PUT
//! of its key applied meanwhile replaces it with a newer version, again not durable: a key
//! written faster than the store commits (a debounced key PUT thousands of times a second)
//! never had a fireable version, and fired only once the writes stopped, long past its cap.
//!
//! # What
//!
//! A schedule (plain or with terms) of a key whose pending timer is due (deadline ≤ now) and
//! has not fired yet (its own firing, not a step of its webhook's delivery) waits here, in
//! arrival order, until that timer has fired (about one group commit: the commit makes it
//! fireable, the next fire pass fires it), and is then applied as it would have been; its
//! caller's answer comes that much later. The wait is for the fire, not for durability alone:
//! the drain runs before the fire in a pass, and a timer made fireable by the last commit but
//! replaced by the drain would start its burst over. Every later op of the same
//! key waits behind it (a GET, a cancel, a bulk cancel's cancels too), so the key's ops keep
//! their order. By debounce's terms a write that arrives after its burst's cap belongs to the
//! next burst anyway, and a plain PUT onto a timer already due meets, on every store, a timer
//! that fires first: the memory store fires it at its deadline.
//!
//! Held back rather than made durable sooner: the commit cannot be hurried, and firing the
//! not-durable version would break the rule above. A write on a key whose timer is not due,
//! or is kept for its delivery, is never held. On the memory store a due timer fires in the
//! pass it is due in, so a write waits at most one pass.
//!
//! # Ends
//!
//! - Each pass's drain looks at the held ops first, in order (`Shard::apply_deferred`,
//!   `apply.rs`): those no longer behind a due, unwritten timer, nor behind an earlier held op
//!   of their key, are applied (the gate refuses one of a partition dropped meanwhile, as any
//!   op; a cancelled or purged timer no longer holds its key back).
//! - At a stop, every held op is applied before the store closes: answered, and durable.
//! - The queue holds at most [`DEFERRED_MAX`] ops a shard; past it an op that would wait is
//!   refused, unapplied, with 503 `store_unavailable` and a Retry-After of 1 s (retrying is
//!   safe).
//!
//! Cost: one table look-up per schedule, and a clock read when its key is pending; with ops
//! held, one hash look-up of each keyed op's identity.
//!
//! A store that refuses writes (`Store::has_room` says no: a failed journal, a full outbox)
//! refuses a write that would wait at once, as it refuses any, and counts that refusal once: a failed journal never fires a timer whose
//! record it did not write, and a write held behind one would wait for nothing.

use crate::op::Op;
use std::collections::{HashMap, VecDeque};

/// Ops a shard holds back at most; past it, an op that would wait is refused (503).
pub(crate) const DEFERRED_MAX: usize = 4096;

/// The held ops, in arrival order, and how many of them each key has.
#[derive(Default)]
pub(crate) struct Deferred {
    ops: VecDeque<Op>,
    keys: HashMap<Box<[u8]>, u32>,
}

impl Deferred {
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.ops.len() >= DEFERRED_MAX
    }

    /// Whether an op of the key `identity` is held.
    pub fn holds(&self, identity: &[u8]) -> bool {
        !self.keys.is_empty() && self.keys.contains_key(identity)
    }

    /// Holds `op`, after those held.
    pub fn push(&mut self, op: Op) {
        if let Some(t) = op.keyed() {
            *self.keys.entry(t.identity().into()).or_default() += 1;
        }
        self.ops.push_back(op);
    }

    /// Every held op, in order; the queue is empty after.
    pub fn take(&mut self) -> VecDeque<Op> {
        self.keys.clear();
        std::mem::take(&mut self.ops)
    }
}

#[cfg(test)]
#[path = "defer_tests.rs"]
mod tests;
