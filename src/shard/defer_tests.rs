//! Writes held behind a due timer: a store that refuses writes is asked about a held write's
//! room without counting a refusal, so that a refused write is counted once.

use super::super::tests::shard;
use crate::clock::FakeSource;
use crate::error::Error;
use crate::op::{reply_channel, Op};
use crate::store::{Ack, LocalFuture, Recovered, Store};
use crate::timer::{FiredTimer, PackedTimer};
use crate::units::{UtcMicros, UtcNanos};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A store that cannot take a write (a failed journal, a full outbox), counting each refusal
/// as the durable stores count theirs in `refused_total`.
struct Refusing(Rc<Cell<u32>>);

impl Store for Refusing {
    fn kind(&self) -> &'static str {
        "refusing"
    }
    fn recover<'a>(
        &'a mut self,
        _: &'a mut dyn FnMut(Recovered<'_>) -> bool,
        _: &'a AtomicBool,
    ) -> LocalFuture<'a, bool> {
        Box::pin(async { true })
    }
    fn admit(&self, _: &str) -> Result<(), Error> {
        self.0.set(self.0.get() + 1);
        Err(self.refusal())
    }
    fn has_room(&self, _: &str) -> bool {
        false
    }
    fn refusal(&self) -> Error {
        Error::StoreUnavailable { retry_after_s: 1 }
    }
    fn ack_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn schedule(&mut self, _: &PackedTimer, _: &crate::op::Scheduled, ack: Ack) {
        ack.answer(Err(self.refusal()));
    }
    fn cancel(&mut self, _: &str, _: &str, ack: Ack) {
        ack.answer(Err(self.refusal()));
    }
    fn fired(&mut self, _: &FiredTimer<'_>) {}
    fn fired_kept(&mut self, _: &FiredTimer<'_>, _: &PackedTimer, _: &crate::op::Scheduled) {}
    fn close(&mut self) -> LocalFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// A PUT of a key whose timer is due and unfired would wait behind it; the store refuses it
/// at once instead, and that refusal is counted once, not once by the look that decides
/// whether it waits and again by the write.
#[test]
fn a_refused_write_of_a_due_key_is_counted_once() {
    let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let refusals = Rc::new(Cell::new(0));
    s.store = Box::new(Refusing(refusals.clone()));
    let now = s.clock.now().as_micros();
    let due = PackedTimer::new("t", "k", b"1").expect("small");
    s.table
        .insert_with_version(due, UtcMicros(now.0 - 10), 1)
        .expect("in range");
    let (tx, mut rx) = reply_channel();
    let again = Op::Schedule {
        timer: PackedTimer::new("t", "k", b"2").expect("small"),
        deadline: UtcMicros(now.0 + 1_000),
        reply: Some(tx),
        slot: None,
        home: true,
    };
    s.ring.push("t", again).expect("room in the ring");
    s.drain(None);
    match rx.try_recv() {
        Ok(Some(Err(Error::StoreUnavailable { .. }))) => {}
        other => panic!("the write was not refused at once: {other:?}"),
    }
    assert_eq!(refusals.get(), 1, "refusals counted for one refused write");
}
