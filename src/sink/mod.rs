//! Sinks: where a fired timer goes.
//!
//! A [`Sink`] takes each fired timer on the shard's thread, right after the wheel fired it, in
//! deadline order, and says what becomes of it ([`Next`]): done (the usual case: its record
//! goes), kept pending with new delivery metadata and a new deadline (a webhook under way or
//! waiting for a retry), or made a dead letter. It must not block: delivery that takes time (a
//! webhook) is started here and runs as a task on the shard's executor; its outcome is handed
//! to the shard in one call, [`Followups::send`], which queues a [`Followup`] and wakes the
//! shard if it is parked. The shard applies what is queued at its next pass to its table and
//! store, so the table has one writer and the loop stays cooperative. The shard holds its
//! sinks and the other end of their [`Followups`]; a sink never imports the shard, the engine
//! or the API.
//!
//! | sink | where a fired timer goes | file |
//! |---|---|---|
//! | handler | an in-process closure (`EngineBuilder::on_fire`) | this file |
//! | Redis Stream | one entry in `punctual:fired:{<tenant>}`, written by the Redis store in the same transaction that removes (or rewrites) the timer's record | `store/redis/fired.rs` |
//! | webhook | a `POST` to the timer's callback, retried as a timer, dead letters at the end | `webhook/` |
//!
//! A timer with a callback fires more than once: at its deadline (its *own firing*: the stream
//! entry and the handler are for that one only) and then for each step of its delivery; the
//! shard says which on the [`FiredTimer`] ([`Firing`]), read once from the timer's metadata.
//!
//! Cost: one virtual call per sink per fire.

pub mod webhook;

use crate::timer::{FiredTimer, Firing, PackedTimer};
use crate::units::UtcMicros;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What becomes of a fired timer (or of a pending one, in a [`Followup`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Done: its record goes.
    Done,
    /// Stays pending under the same version, `after` from now, with this metadata.
    Reschedule { after: Duration, meta: Vec<u8> },
    /// Leaves the wheel for the dead-letter table, with this (final) metadata; `fire_at` is
    /// the timer's own deadline.
    Dead { meta: Vec<u8>, fire_at: UtcMicros },
    /// Due now, unchanged (a follow-up: a delivery held back by a cap got its turn). The
    /// store is not told: it keeps the later deadline, a safety net should the wake be lost.
    Wake,
}

/// What a sink learned later about a pending timer (a delivery's outcome), for the shard to
/// apply. It applies only if the timer is still pending under `version` with exactly the
/// metadata of `timer` (the state it was left in when the work started): a timer cancelled,
/// replaced or moved on since is left alone.
#[derive(Debug)]
pub struct Followup {
    /// Tenant, key and the expected metadata (no payload).
    pub timer: PackedTimer,
    pub version: u64,
    pub next: Next,
}

/// Where sinks hand their shard follow-ups, on the shard's thread: [`Followups::send`] queues
/// one and wakes the shard if it is parked, in one call; the shard takes what is queued once
/// per pass ([`Followups::take`]). Clones share the one queue: the shard holds one, each sink
/// that makes follow-ups another.
#[derive(Clone)]
pub struct Followups(Rc<Queue>);

struct Queue {
    queued: RefCell<Vec<Followup>>,
    /// Wakes the shard's loop if it is parked (the ring's `nudge`).
    wake: Box<dyn Fn()>,
    /// The shard's end of the history (`crate::history`), when it is kept.
    history: Option<crate::history::Recorder>,
}

impl Followups {
    /// A queue whose [`Followups::send`] calls `wake` (on the shard's thread).
    pub fn new(wake: Box<dyn Fn()>) -> Followups {
        Followups::with_history(wake, None)
    }

    /// As [`Followups::new`], the fires and attempts recorded into `history`.
    pub fn with_history(
        wake: Box<dyn Fn()>,
        history: Option<crate::history::Recorder>,
    ) -> Followups {
        Followups(Rc::new(Queue {
            queued: RefCell::default(),
            wake,
            history,
        }))
    }

    /// Records a history event, made by `event` only when the history is kept: a push onto
    /// the shard's buffer (`crate::history`).
    #[inline]
    pub fn record(&self, event: impl FnOnce() -> crate::history::Event) {
        if let Some(h) = &self.0.history {
            h.record(event());
        }
    }

    /// Hands the history events recorded since the last call to the history's thread (the
    /// shard, after each pass).
    pub fn flush_history(&self) {
        if let Some(h) = &self.0.history {
            h.flush();
        }
    }

    /// Hands the shard a follow-up: queued for its next pass, and the shard woken if it is
    /// parked.
    pub fn send(&self, f: Followup) {
        self.0.queued.borrow_mut().push(f);
        (self.0.wake)();
    }

    /// Moves what is queued to the back of `out`, in the order it was sent (the shard, once
    /// per pass).
    pub fn take(&self, out: &mut std::collections::VecDeque<Followup>) {
        out.extend(self.0.queued.borrow_mut().drain(..));
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.0.queued.borrow().is_empty()
    }
}

impl Default for Followups {
    /// A queue with nothing to wake (a shard that does not park, or a test).
    fn default() -> Followups {
        Followups::new(Box::new(|| {}))
    }
}

/// Takes fired timers on the shard's thread (see the module doc).
pub trait Sink {
    /// Takes a fired timer and says what becomes of it.
    fn fired(&mut self, timer: &FiredTimer<'_>) -> Next;

    /// Called at each anchor of the shard's clock (every 100 ms), with one reading of the
    /// monotonic clock: the sink's periodic chores (the webhook sink retires idle tenants'
    /// series here).
    fn tick(&mut self, _now: Instant) {}

    /// Deliveries under way (a stopping shard waits for them, within [`Sink::grace`]).
    fn in_flight(&self) -> usize {
        0
    }

    /// How long a stopping shard waits for this sink's deliveries under way.
    fn grace(&self) -> Duration {
        Duration::ZERO
    }

    /// The timer left the table, or was replaced, by an op (a cancel, a new version): drop
    /// whatever the sink keeps for it (a place in a queue).
    fn forget(&mut self, _timer: &PackedTimer) {}

    /// A [`Next::Wake`] this sink asked for found its timer gone: cancelled, replaced or moved
    /// on between the wake and its follow-up. The wake stood for a slot that came free; pass
    /// it to the next timer waiting, or that one waits for its safety net.
    fn wake_unused(&mut self, _timer: &PackedTimer) {}
}

/// An in-process handler: runs on the shard's thread for every fired timer; keep it short.
pub type FireHandler = Arc<dyn Fn(&FiredTimer<'_>) + Send + Sync>;

/// The handler as a sink.
pub struct HandlerSink(pub FireHandler);

impl Sink for HandlerSink {
    /// Calls the handler for a timer's own firing only, never for the steps of its delivery.
    #[inline]
    fn fired(&mut self, timer: &FiredTimer<'_>) -> Next {
        if timer.firing == Firing::Own {
            (self.0)(timer)
        }
        Next::Done
    }
}
