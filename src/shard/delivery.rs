//! What the shard does for its sinks' deliveries besides deciding a timer's end: the
//! follow-ups they hand over, taken a slice at a time (each applied in `fate.rs`, which owns
//! every state from a fire to the timer's end), the deliveries finished at a stop, the sinks
//! told to forget a timer an op took, and the dead letters' room and listing (the letters
//! themselves are kept in `dead.rs`). See `sink::webhook` for the whole flow.

use super::Shard;
use crate::clock::TimeSource;
use crate::error::Error;
use crate::op::DeadInfo;
use crate::runtime::cooperate::Slice;
use crate::timer::PackedTimer;

/// Follow-ups applied between two looks at the pass's slice. One is a table lookup and, for
/// a retry, a copy of the timer's payload (up to 64 KiB) and a store write: tens of
/// microseconds at most, so 32 overrun a 200 µs slice by about its length at worst.
pub(super) const FOLLOW_UP_CHECK: usize = 32;

impl<S: TimeSource> Shard<S> {
    /// Tells the sinks that an op took the timer out of the table, or replaced it: what they
    /// keep for it (a place in a cap's queue) goes.
    pub(super) fn forget_in_sinks(&mut self, timer: &PackedTimer) {
        for sink in self.sinks.iter_mut() {
            sink.forget(timer);
        }
    }

    /// [`Shard::forget_in_sinks`] for the timer in the table's `slot`.
    pub(super) fn forget_replaced(&mut self, slot: u32) {
        if let Some(t) = self.table.timer_at(slot) {
            for sink in self.sinks.iter_mut() {
                sink.forget(t);
            }
        }
    }

    /// At a stop: lets the deliveries under way finish, within the sinks' grace, applying
    /// their follow-ups (so each outcome is written to the store before it closes). Nothing
    /// fires meanwhile. A delivery still under way after the grace stays in flight in the
    /// store; after a restart it is made again, without using up an attempt.
    pub(super) async fn finish_deliveries(&mut self) {
        let grace = self
            .sinks
            .iter()
            .map(|s| s.grace())
            .max()
            .unwrap_or_default();
        let until = std::time::Instant::now() + grace;
        loop {
            self.follow_up(None);
            self.store.after_pass();
            self.deliveries.inbox.flush_history();
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || self.sinks.iter().all(|s| s.in_flight() == 0) {
                break;
            }
            let nap = left.min(std::time::Duration::from_millis(5));
            self.pulse.expect_by(nap);
            glommio::timer::sleep(nap).await;
            self.pulse.running();
        }
        self.follow_up(None);
        self.store.after_pass();
        self.deliveries.inbox.flush_history();
    }

    /// Applies the follow-ups the sinks handed over, in the order they were sent; how many.
    /// One that applying them hands over (a wake passed on) waits for the next pass. A shard
    /// that shares its thread stops once `slice` is over, and the rest wait for the next pass
    /// (which comes at once: a pass that applied some did work). Deliveries that end together
    /// (a burst of attempts timing out at one instant, across tenants) hand over thousands,
    /// each a retry copying its timer's payload: all of them in one go held the thread for
    /// milliseconds.
    pub(super) fn follow_up(&mut self, slice: Option<Slice>) -> usize {
        self.deliveries.inbox.take(&mut self.deliveries.followups);
        let mut n = 0;
        while let Some(f) = self.deliveries.followups.pop_front() {
            self.apply_followup(f);
            n += 1;
            if n % FOLLOW_UP_CHECK == 0 && slice.as_ref().is_some_and(Slice::is_over) {
                break;
            }
        }
        n
    }

    /// The tenant's dead letters in the key range (after, through], at most `limit`.
    pub(super) fn dead_list(
        &self,
        tenant: &str,
        range: (Option<&str>, Option<&str>),
        limit: usize,
        bodies: bool,
    ) -> Vec<DeadInfo> {
        self.deliveries.dead.list(tenant, range, limit, bodies)
    }

    /// Dead letters take room in the shard like pending timers: a new key is refused
    /// (`CapacityExceeded`) while the table's timers and the dead letters together fill the
    /// shard's capacity. A timer that dies moves from one to the other, so a dead letter never
    /// has to be dropped for room.
    pub(super) fn admit_room(&self, timer: &PackedTimer) -> Result<(), Error> {
        let dead = self.deliveries.dead.len();
        let capacity = self.table.capacity();
        if dead > 0
            && self.pending().saturating_add(dead) >= capacity
            && !self.holds(timer.identity())
        {
            return Err(Error::CapacityExceeded {
                shard: self.id,
                capacity,
            });
        }
        Ok(())
    }
}
