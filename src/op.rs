//! What crosses a ring: the ops a shard applies, and the answers it sends back.
//!
//! Every op that expects an answer carries the sending half of a one-shot channel
//! (`Reply`); the caller keeps the receiving half, on whatever thread or executor it runs.

use crate::error::Error;
use crate::partition::PartitionSet;
use crate::queue::{QueueCounts, Received, Settled, Settlement};
use crate::quota::QuotaSlot;
use crate::timer::PackedTimer;
use crate::units::{Deadline, UtcMicros};

/// The sending half of a one-shot reply channel: the shard answers an op through it.
///
/// `futures-channel`'s oneshot: the receiver may sit on another thread (a caller blocked in
/// `Handle::schedule`, or an HTTP task on another shard's executor), and a receiver that was
/// polled may be dropped while the shard sends (hyper drops a request's future when its client
/// goes away). The channel's waker slot is taken under its lock and woken only after it has
/// been moved out, so a send racing a drop wakes a live waker or none (the stress tests at the
/// end of this file race the two millions of times, across plain threads and across glommio
/// executors).
pub(crate) type Reply<T> = futures_channel::oneshot::Sender<T>;

/// A reply channel for an op: the sender travels in the op, the receiver stays with the caller.
pub(crate) fn reply_channel<T>() -> (Reply<T>, futures_channel::oneshot::Receiver<T>) {
    futures_channel::oneshot::channel()
}

/// A request for the owning shard.
pub(crate) enum Op {
    Schedule {
        timer: PackedTimer,
        deadline: Deadline,
        reply: Option<Reply<Result<Scheduled, Error>>>,
        /// A quota slot the caller already took for this timer (see `quota`).
        slot: Option<QuotaSlot>,
        /// Packed on the owning shard's own thread (an HTTP request that landed on the key's
        /// owner): its allocation is the shard's already, and the wheel keeps it as it is.
        home: bool,
    },
    Cancel {
        timer: PackedTimer,
        reply: Reply<Result<Cancelled, Error>>,
    },
    /// A schedule with terms (a condition, a debounce): boxed, so that the plain schedule's
    /// op, the hot path's, keeps its size.
    Guarded(Box<Guarded>),
    /// Cancels the pending timer under (tenant, key) only if its version is `version`.
    CancelIf {
        timer: PackedTimer,
        version: u64,
        reply: Reply<Result<Cancelled, Error>>,
    },
    Get {
        timer: PackedTimer,
        reply: Reply<Result<Option<TimerInfo>, Error>>,
    },
    /// The shard's dead letters of `tenant`, by key, after `after` and up to `through`
    /// (inclusive), at most `limit`; with their metadata and payloads only when `bodies`.
    DeadList {
        tenant: String,
        after: Option<String>,
        through: Option<String>,
        limit: usize,
        bodies: bool,
        reply: Reply<Result<Vec<DeadInfo>, Error>>,
    },
    /// A listing: the shard's first `query.limit` pending timers that `query` picks, by key.
    ListTimers {
        query: std::sync::Arc<ListQuery>,
        reply: Reply<Result<Listing, Error>>,
    },
    /// Re-drives the dead letter under (tenant, key): pending again, due now, a fresh budget.
    DeadRedrive {
        timer: PackedTimer,
        reply: Reply<Result<Scheduled, Error>>,
    },
    /// Discards the dead letter under (tenant, key).
    DeadDiscard {
        timer: PackedTimer,
        reply: Reply<Result<Cancelled, Error>>,
    },
    /// Receives up to `max` of the shard's ready messages of `tenant`, each leased for
    /// `visibility_ms` (`queue`).
    QueueReceive {
        tenant: String,
        max: usize,
        visibility_ms: u64,
        reply: Reply<Result<Vec<Received>, Error>>,
    },
    /// Acks, nacks or extends the message under `timer`'s (tenant, key), if it is still
    /// leased as `version` and `lease`.
    QueueSettle {
        timer: PackedTimer,
        version: u64,
        lease: u64,
        how: Settlement,
        reply: Reply<Result<Settled, Error>>,
    },
    /// The shard's count of `tenant`'s messages, from its index's lengths.
    QueueCount {
        tenant: String,
        reply: Reply<Result<QueueCounts, Error>>,
    },
}

impl Op {
    /// The timer an op names by (tenant, key): every op but a dead-letter listing.
    pub fn keyed(&self) -> Option<&PackedTimer> {
        match self {
            Op::Schedule { timer, .. }
            | Op::Cancel { timer, .. }
            | Op::CancelIf { timer, .. }
            | Op::Get { timer, .. }
            | Op::DeadRedrive { timer, .. }
            | Op::DeadDiscard { timer, .. }
            | Op::QueueSettle { timer, .. } => Some(timer),
            Op::Guarded(g) => Some(&g.timer),
            Op::DeadList { .. }
            | Op::ListTimers { .. }
            | Op::QueueReceive { .. }
            | Op::QueueCount { .. } => None,
        }
    }

    /// Answers the op with `e` without applying it (a shard that is stopping, or a store that
    /// cannot take it). A detached schedule has no one to answer: it is logged.
    pub fn refuse(self, e: Error) {
        match self {
            Op::Schedule {
                reply: Some(tx), ..
            } => {
                let _ = tx.send(Err(e));
            }
            Op::Schedule {
                reply: None, timer, ..
            } => {
                tracing::warn!(timer = ?timer, error = %e, "detached schedule refused");
            }
            Op::Cancel { reply, .. } | Op::CancelIf { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::Guarded(g) => {
                let _ = g.reply.send(Err(e));
            }
            Op::Get { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::DeadList { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::ListTimers { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::DeadRedrive { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::DeadDiscard { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::QueueReceive { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::QueueSettle { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Op::QueueCount { reply, .. } => {
                let _ = reply.send(Err(e));
            }
        }
    }
}

/// A schedule with terms: what a conditional or debounced PUT asks beyond an upsert.
pub(crate) struct Guarded {
    pub timer: PackedTimer,
    pub deadline: Deadline,
    pub terms: Terms,
    pub reply: Reply<Result<Scheduled, Error>>,
    /// A quota slot the caller already took for this timer (see `quota`).
    pub slot: Option<QuotaSlot>,
    /// Packed on the owning shard's own thread (see `Op::Schedule`).
    pub home: bool,
}

/// What a schedule asks beyond an upsert (docs/API.md, "Conditional writes" and "Debounce").
/// The owning shard checks it against its table in the same step as the write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Terms {
    /// Applied only when the key is in this state.
    pub cond: Option<Condition>,
    /// Debounce: the deadline is never later than the burst's first arming plus this many
    /// microseconds.
    pub max_wait_us: Option<u64>,
}

impl Terms {
    /// Nothing beyond an upsert.
    pub fn is_plain(&self) -> bool {
        self.cond.is_none() && self.max_wait_us.is_none()
    }
}

/// The state a conditional write needs the key in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// No timer pending under the key (`"if": "absent"`).
    Absent,
    /// A timer pending under the key with this version (`"if_version": V`).
    Version(u64),
}

/// Which pending timers a listing picks: `tenant`'s, whose key starts with `prefix` and comes
/// after `after`, the first `limit` by key; with their payloads when `payloads`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub tenant: String,
    pub prefix: String,
    pub after: Option<String>,
    pub limit: usize,
    pub payloads: bool,
}

impl ListQuery {
    /// Whether the listing picks `timer`. A recurring schedule's internal timers
    /// (`partition::INTERNAL`) are not timers of the tenant's: a listing (and the bulk cancel
    /// that lists) never picks them, unless its prefix is internal itself, and then it picks
    /// the schedules' own timers only, never their occurrences'.
    pub fn picks(&self, timer: &PackedTimer) -> bool {
        timer.tenant() == self.tenant && self.picks_key(timer.key())
    }

    /// [`ListQuery::picks`] of a key of the listing's tenant.
    pub fn picks_key(&self, key: &str) -> bool {
        let kind_fits = match self.prefix.starts_with(crate::partition::INTERNAL) {
            true => crate::partition::schedule_of(key).is_some(),
            false => !key.starts_with(crate::partition::INTERNAL),
        };
        kind_fits && key.starts_with(&self.prefix) && self.after.as_deref().is_none_or(|a| key > a)
    }
}

/// A shard's answer to a listing: the first timers it picked, by key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    pub timers: Vec<Listed>,
    /// The partitions the shard could act on as it listed (loaded, held, settled:
    /// `shard/gate.rs`), listed whole; and how many times its gate had changed by then.
    pub open: PartitionSet,
    pub changes: u64,
}

/// A pending timer as a listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    /// Its own deadline, as `GET` shows it.
    pub fire_at_us: u64,
    pub version: u64,
    /// Empty unless the listing asked for payloads.
    pub payload: Vec<u8>,
}

impl Listed {
    /// Keeps the first `limit` of `timers` by key, each key once.
    pub fn keep_first(timers: &mut Vec<Listed>, limit: usize) {
        timers.sort_by(|a, b| a.key.cmp(&b.key));
        timers.dedup_by(|a, b| a.key == b.key);
        timers.truncate(limit);
    }
}

/// A change of which partitions a shard may act on, from the node's loop (`cluster`), pushed
/// beside the ring's ops ([`crate::ring::Ring::control`]). Only a shard handed the lease
/// holders receives them.
pub(crate) enum Control {
    /// The partition's records, read after its lease was gained: they replace whatever of the
    /// partition the shard holds, and the shard acts on it from then on. With them, the
    /// partition's version floor: the highest version any owner wrote there, which the
    /// shard's next versions are above (`nodes::load::Read::floor`).
    Load(Vec<LoadedTimer>, u64),
    /// The lease is gone: the shard forgets the partition's timers and dead letters, without
    /// firing or deleting anything in the store.
    Drop,
}

/// A record of a partition being loaded, as recovery inserts it: a pending timer, or a dead
/// letter (its metadata says which).
pub(crate) struct LoadedTimer {
    pub timer: PackedTimer,
    pub version: u64,
    pub deadline: UtcMicros,
}

/// The answer to a schedule (upsert).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduled {
    pub version: u64,
    pub deadline: UtcMicros,
    /// A pending timer under the same key was replaced (HTTP 200 rather than 201).
    pub replaced: bool,
}

/// The answer to a cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// The pending timer was removed; it will not fire.
    Cancelled { version: u64, deadline: UtcMicros },
    /// No timer is pending under that key: unknown, already fired, or already cancelled.
    NotFound,
}

/// A pending timer, as `get` returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerInfo {
    pub deadline: UtcMicros,
    pub version: u64,
    /// Delivery metadata (a callback's state; empty without one).
    pub meta: Vec<u8>,
    pub payload: Vec<u8>,
}

impl TimerInfo {
    /// What a read answers of `timer`, pending at `deadline` under `version`.
    pub fn of(timer: &PackedTimer, deadline: UtcMicros, version: u64) -> TimerInfo {
        TimerInfo {
            deadline,
            version,
            meta: timer.meta().to_vec(),
            payload: timer.payload().to_vec(),
        }
    }
}

/// A dead letter, as the dead-letter list shows it. How its delivery ended (attempts, last
/// status or error, callback) was read from its final delivery metadata once, when the letter
/// was made, under the names the store records it by (`store::DeadLetter`). A listing of keys
/// only leaves everything after `fire_at` empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadInfo {
    pub key: String,
    pub version: u64,
    /// The timer's own deadline.
    pub fire_at: UtcMicros,
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's answer, when it got one.
    pub last_status: Option<u16>,
    /// Why the last attempt got no answer, when it got none.
    pub last_error: Option<String>,
    /// The callback's URL (`None` when the metadata could not be read).
    pub callback: Option<String>,
    /// Its final delivery metadata, verbatim.
    pub meta: Vec<u8>,
    pub payload: Vec<u8>,
    /// The bytes a listing with bodies copies for this letter (metadata, payload, error and
    /// callback), given with or without the body, so that a listing can ask for bodies in
    /// parts of bounded size.
    pub body_bytes: usize,
}

impl DeadInfo {
    /// A letter as a listing of keys shows it: everything after `fire_at` empty.
    pub(crate) fn without_body(
        key: &str,
        version: u64,
        fire_at: UtcMicros,
        body_bytes: usize,
    ) -> DeadInfo {
        DeadInfo {
            key: key.to_string(),
            version,
            fire_at,
            attempts: 0,
            last_status: None,
            last_error: None,
            callback: None,
            meta: Vec::new(),
            payload: Vec::new(),
            body_bytes,
        }
    }

    /// The page cut into consecutive runs of letters whose bodies take at most `budget` bytes
    /// together; a letter larger than `budget` is a run of its own.
    pub(crate) fn parts(page: &[DeadInfo], budget: usize) -> Vec<&[DeadInfo]> {
        let mut parts = Vec::new();
        let (mut start, mut bytes) = (0, 0usize);
        for (i, letter) in page.iter().enumerate() {
            if i > start && bytes.saturating_add(letter.body_bytes) > budget {
                parts.push(&page[start..i]);
                (start, bytes) = (i, 0);
            }
            bytes = bytes.saturating_add(letter.body_bytes);
        }
        if start < page.len() {
            parts.push(&page[start..]);
        }
        parts
    }
}

#[cfg(test)]
#[path = "op_tests.rs"]
mod tests;
