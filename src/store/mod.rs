//! The store seam: where a shard's timers are made durable. One store per shard, owned by the
//! shard and used only on its thread.
//!
//! A store answers one question for the shard: *is this write durable yet?* The shard changes
//! its table at once (so fires and later ops follow the ring's order) and hands the store the
//! write together with the caller's [`Ack`]; the store answers the ack when the write is
//! durable, or `StoreUnavailable` when that cannot happen in time. A 2xx therefore means
//! durable, by whichever store is configured:
//!
//! | store | durable means | file |
//! |---|---|---|
//! | journal (the service's default) | the group commit that carried the write was written to the shard's own log on local disk and `fdatasync`'d (`fsync = everysec` or `never`: written, which survives a process crash; a power cut loses at most the last second, or what the kernel had not written back) | `journal/` |
//! | memory | nothing (explicit, not durable: the log says so at start) | `memory.rs` |
//! | Redis | Redis acknowledged the pipeline that carried the write | `redis/` |
//!
//! The two durable stores share their core (`durable.rs`): each keeps its writes in an outbox
//! of its own format until they are durable, with the callers' acks next to them (`acks.rs`),
//! and answers admission, refusal, the ack timeout and the room for fires the same way.
//!
//! What a store is told, in the order the shard makes things happen:
//!
//! - at start, [`Store::recover`] loads the shard's timers (the shard holds its ops until it
//!   completes);
//! - per op: [`Store::admit`] (is there room for one more write?), then [`Store::schedule`] or
//!   [`Store::cancel`] with the caller's ack;
//! - per fire: [`Store::fired`] (the timer's record goes; Redis also appends the stream entry
//!   in the same transaction, see `redis`), after [`Store::fire_room`] said how many fires it
//!   can take this pass; or, for a timer whose sink keeps it pending (a webhook under way),
//!   [`Store::fired_kept`] (the record is rewritten with its new deadline and delivery
//!   metadata; the stream entry as for a fire);
//! - per step of a webhook delivery: [`Store::schedule`] (a retry: the record rewritten, same
//!   version, no caller), [`Store::cancel`] (delivered: the record goes), [`Store::dead`] (the
//!   record goes, a dead letter is kept; [`Store::fired_dead`] when the timer's own firing
//!   killed it), [`Store::dead_removed`] (a dead letter discarded), [`Store::redrive`] (a
//!   dead letter pending again);
//! - after each pass, [`Store::after_pass`]; at shutdown, [`Store::close`].
//!
//! Dead letters come back at start through [`Store::recover`] like timers, marked as such by
//! a store that keeps them apart (the journal), else told by their metadata
//! (`sink::webhook::is_dead`), and the shard files them in its dead-letter table.
//! The methods added for webhooks have defaults that keep a store correct without dead-letter
//! persistence (a dead letter is then only in memory): `fired_kept` writes the record like a
//! schedule, `dead` removes it like a cancel.
//!
//! A store never imports the shard, the engine or the API: it sees ops only as these calls.

pub mod acks;
pub mod deque;
pub(crate) mod durable;
pub mod journal;
pub mod memory;
pub mod redis;

use crate::error::Error;
use crate::op::{Cancelled, Reply, Scheduled};
use crate::timer::FiredTimer;
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub use crate::metrics::{StoreMetrics, StoreState};

/// A future a store returns from its `async` steps (recovery, close): run on the shard's
/// executor, so it need not be `Send`.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Who waits for a write's acknowledgement, and with what answer.
pub enum Ack {
    None,
    Schedule(Reply<Result<Scheduled, Error>>, Scheduled),
    Cancel(Reply<Result<Cancelled, Error>>, Cancelled),
    /// A conditional write refused by the state of its key: the refusal, once the writes
    /// that made that state are durable (else the store's error).
    Refused(Reply<Result<Scheduled, Error>>, Error),
    /// A conditional cancel refused by the state of its key, likewise.
    CancelRefused(Reply<Result<Cancelled, Error>>, Error),
    /// Any other answer (a queue's receive, ack, nack or extend): called with the outcome.
    Then(Box<dyn FnOnce(Result<(), Error>) + Send>),
}

impl Ack {
    /// Answers the caller: the prepared answer when the write is durable, else the error.
    pub fn answer(self, outcome: Result<(), Error>) {
        match self {
            Ack::None => {
                if let Err(e) = outcome {
                    tracing::warn!(error = %e, "a detached schedule was not made durable");
                }
            }
            Ack::Schedule(tx, s) => {
                let _ = tx.send(outcome.map(|()| s));
            }
            Ack::Cancel(tx, c) => {
                let _ = tx.send(outcome.map(|()| c));
            }
            Ack::Refused(tx, e) => {
                let _ = tx.send(Err(outcome.err().unwrap_or(e)));
            }
            Ack::CancelRefused(tx, e) => {
                let _ = tx.send(Err(outcome.err().unwrap_or(e)));
            }
            Ack::Then(f) => f(outcome),
        }
    }

    /// Whether someone waits for the answer.
    pub fn is_waiting(&self) -> bool {
        !matches!(self, Ack::None)
    }
}

/// A timer as a store loads it at recovery.
#[derive(Debug, Clone, Copy)]
pub struct Recovered<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub version: u64,
    pub deadline: UtcMicros,
    /// Delivery metadata, as the timer carried it (see `PackedTimer`).
    pub meta: &'a [u8],
    pub payload: &'a [u8],
    /// Whether it was stored as a dead letter, when the store keeps dead letters apart (the
    /// journal: its own record kind); `None` when the metadata must say
    /// (`sink::webhook::is_dead`). Known, it decides: a dead letter whose metadata does not
    /// decode never comes back a pending timer.
    pub dead: Option<bool>,
}

/// A timer that became a dead letter, as a store records it.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetter<'a> {
    /// Tenant, key, final delivery metadata and payload.
    pub timer: &'a PackedTimer,
    pub version: u64,
    /// The timer's own deadline.
    pub fire_at: UtcMicros,
    pub attempts: u32,
    pub last_status: Option<u16>,
    pub last_error: Option<&'a str>,
    pub callback: &'a str,
}

/// What a shard needs of its store (see the module doc).
pub trait Store {
    /// "journal", "memory", "redis": for logs and `/healthz`.
    fn kind(&self) -> &'static str;

    /// Loads the shard's timers, handing each to `insert` (false: it did not fit, and stays
    /// stored), then starts whatever the store runs in the background. Resolves to false if
    /// `stop` was set first.
    fn recover<'a>(
        &'a mut self,
        insert: &'a mut dyn FnMut(Recovered<'_>) -> bool,
        stop: &'a AtomicBool,
    ) -> LocalFuture<'a, bool>;

    /// At most how many records the next [`Store::recover`] hands over, when the store knows
    /// before it begins (0 when it does not): the shard makes room for them in one step
    /// rather than growing its index as they come.
    fn to_recover(&self) -> usize {
        0
    }

    /// After [`Store::recover`]: a version at least as high as every version the store ever
    /// held, including those of timers since cancelled, fired or compacted away; the shard's
    /// next versions stay above it even when the clock has stepped back. 0 when the store
    /// knows none.
    fn version_floor(&self) -> u64 {
        0
    }

    /// `Ok` when one more durable schedule or cancel of `tenant` fits now; else the refusal,
    /// counted: `StoreUnavailable` when the store cannot take it, `StoreShare` when the tenant
    /// already holds its share of the writes waiting (`acks.rs`).
    fn admit(&self, tenant: &str) -> Result<(), Error>;

    /// Whether [`Store::admit`] would admit one more write of `tenant` now, with nothing
    /// counted: a look before the write (whether a write may wait behind a due timer,
    /// `shard/defer.rs`), which the write's own `admit` then refuses, counted, or admits.
    fn has_room(&self, tenant: &str) -> bool;

    /// What an op gets when it waited longer than [`Store::ack_timeout`] (during recovery).
    fn refusal(&self) -> Error;

    /// Longest a caller waits for an acknowledgement before `StoreUnavailable`.
    fn ack_timeout(&self) -> Duration;

    /// Ops the shard applies per pass: fewer for a store whose replies must be read between
    /// passes.
    fn ops_per_pass(&self) -> usize {
        4096
    }

    /// The shard is about to apply a batch of ops.
    fn begin_pass(&mut self) {}

    /// A (re)scheduled timer, already in the shard's table.
    fn schedule(&mut self, timer: &PackedTimer, scheduled: &Scheduled, ack: Ack);

    /// A cancelled timer, already out of the shard's table.
    fn cancel(&mut self, tenant: &str, key: &str, ack: Ack);

    /// An answer read from the shard's tables, not written (a DELETE of a key that is not
    /// pending, a discard of a dead letter that is not kept): `ack`, answered `Ok` once every
    /// write queued before it is durable, or with the store's refusal. The tables change
    /// before their writes are durable, so an answer read from them can tell a state the disk
    /// does not hold yet: a retried DELETE's 404 while the first DELETE's cancel still waits
    /// on a full disk, after which a restart brings the timer back. A store whose writes are
    /// durable when made answers at once (the default).
    fn answer_after_writes(&mut self, _tenant: &str, ack: Ack) {
        ack.answer(Ok(()));
    }

    /// How many more fires the store takes before the shard must hold due timers back.
    fn fire_room(&self) -> usize {
        usize::MAX
    }

    /// Whether a due timer of `version` may fire now: not before the record that made it is
    /// durable, since a crash would bring back what that record replaced. The shard holds a
    /// timer it may not fire yet and fires it after the store's next commit. Always, for a
    /// store whose writes are durable when made (the default).
    fn may_fire(&self, _version: u64) -> bool {
        true
    }

    /// Whether the shard holds due timers back for want of [`Store::fire_room`].
    fn fires_held(&mut self, _held: bool) {}

    /// A timer fired: its record goes.
    fn fired(&mut self, timer: &FiredTimer<'_>);

    /// A timer fired (its own firing) and stays pending as `kept` (new deadline, new delivery
    /// metadata, same version), already in the shard's table. No caller waits.
    fn fired_kept(&mut self, _timer: &FiredTimer<'_>, kept: &PackedTimer, scheduled: &Scheduled) {
        self.schedule(kept, scheduled, Ack::None);
    }

    /// A pending timer became a dead letter: its record goes, the dead letter is kept (and
    /// handed back by `recover`). No caller waits.
    fn dead(&mut self, letter: &DeadLetter<'_>) {
        self.cancel(letter.timer.tenant(), letter.timer.key(), Ack::None);
    }

    /// A timer's own firing made it a dead letter: its fire and its dead letter. A store that
    /// writes them separately may lose the dead letter in a crash between the two; the journal
    /// writes one record.
    fn fired_dead(&mut self, timer: &FiredTimer<'_>, letter: &DeadLetter<'_>) {
        self.fired(timer);
        self.dead(letter);
    }

    /// A dead letter was discarded or re-driven: it goes.
    fn dead_removed(&mut self, _tenant: &str, _key: &str, ack: Ack) {
        ack.answer(Ok(()));
    }

    /// A dead letter was re-driven: it goes, and `timer` (its identity) is pending again under
    /// its version, already in the shard's table. The removal comes first, so that a store
    /// that applies them in order never lets the removal erase the re-driven timer; the
    /// journal writes one record for both.
    fn redrive(&mut self, timer: &PackedTimer, scheduled: &Scheduled, ack: Ack) {
        self.dead_removed(timer.tenant(), timer.key(), Ack::None);
        self.schedule(timer, scheduled, ack);
    }

    /// After each pass of the shard's loop.
    fn after_pass(&mut self) {}

    /// At shutdown: makes durable what it can within the ack timeout.
    fn close(&mut self) -> LocalFuture<'_, ()>;
}
