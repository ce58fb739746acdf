//! The in-memory store: nothing is durable. Every write is "acknowledged" at once, so a 2xx
//! means only that the shard holds the timer; a restart forgets it. Chosen explicitly, and
//! said so in the log at start.

use super::{Ack, LocalFuture, Recovered, Store};
use crate::error::Error;
use crate::op::Scheduled;
use crate::timer::FiredTimer;
use crate::timer::PackedTimer;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

#[derive(Debug, Default)]
pub struct MemoryStore;

impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn recover<'a>(
        &'a mut self,
        _insert: &'a mut dyn FnMut(Recovered<'_>) -> bool,
        _stop: &'a AtomicBool,
    ) -> LocalFuture<'a, bool> {
        Box::pin(async { true })
    }

    fn admit(&self, _tenant: &str) -> Result<(), Error> {
        Ok(())
    }

    fn has_room(&self, _tenant: &str) -> bool {
        true
    }

    fn refusal(&self) -> Error {
        Error::StoreUnavailable { retry_after_s: 1 }
    }

    fn ack_timeout(&self) -> Duration {
        Duration::from_secs(2)
    }

    fn schedule(&mut self, _timer: &PackedTimer, _s: &Scheduled, ack: Ack) {
        ack.answer(Ok(()));
    }

    fn cancel(&mut self, _tenant: &str, _key: &str, ack: Ack) {
        ack.answer(Ok(()));
    }

    fn fired(&mut self, _timer: &FiredTimer<'_>) {}

    fn close(&mut self) -> LocalFuture<'_, ()> {
        Box::pin(async {})
    }
}
