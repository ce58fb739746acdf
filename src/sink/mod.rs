//! Sinks: where a fired timer goes.
//!
//! A [`Sink`] takes each fired timer on the shard's thread, right after the wheel fired it, in
//! deadline order. It must not block: delivery that takes time (a webhook) is started here and
//! runs as a task on the shard's executor. The shard holds its sinks; a sink never imports the
//! shard, the engine or the API.
//!
//! | sink | where a fired timer goes | file |
//! |---|---|---|
//! | handler | an in-process closure (`EngineBuilder::on_fire`) | this file |
//! | Redis Stream | one entry in `punctual:fired:{<tenant>}`, written by the Redis store in the same transaction that removes the timer's record | `stream.rs` |
//!
//! Cost: one virtual call per sink per fire.

pub mod stream;

use crate::units::{UtcMicros, UtcNanos};
use std::sync::Arc;

/// A fired timer, as sinks and the handler see it.
#[derive(Debug, Clone, Copy)]
pub struct FiredTimer<'a> {
    pub shard: usize,
    pub tenant: &'a str,
    pub key: &'a str,
    pub version: u64,
    pub deadline: UtcMicros,
    pub fired_at: UtcNanos,
    pub payload: &'a [u8],
}

/// Takes fired timers on the shard's thread (see the module doc).
pub trait Sink {
    fn fired(&mut self, timer: &FiredTimer<'_>);
}

/// An in-process handler: runs on the shard's thread for every fired timer; keep it short.
pub type FireHandler = Arc<dyn Fn(&FiredTimer<'_>) + Send + Sync>;

/// The handler as a sink.
pub struct HandlerSink(pub FireHandler);

impl Sink for HandlerSink {
    #[inline]
    fn fired(&mut self, timer: &FiredTimer<'_>) {
        (self.0)(timer)
    }
}

/// A payload as JSON text: the bytes as given, or `null` for an empty payload.
pub fn payload_json(payload: &[u8]) -> &[u8] {
    if payload.is_empty() {
        b"null"
    } else {
        payload
    }
}
