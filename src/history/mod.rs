//! The history of recent fires and their deliveries, per tenant: what an operator reads to
//! learn what became of a timer after it fired (`GET /v1/history/{tenant}`, `docs/API.md`).
//!
//! # The flow
//!
//! A shard records an [`Event`] for each timer's own firing (`shard::fire`) and the webhook
//! sink one for each delivery attempt's end (`sink::webhook::deliver`), both on the shard's
//! thread, into the shard's [`Recorder`]: a push onto a vector, nothing else. After each pass
//! (and whenever it holds [`BUFFER_MAX`] events) the shard hands what it holds, as one batch,
//! to the history's thread (a bounded channel; a batch that finds it full is dropped and
//! counted). That thread appends the batch to the log on
//! disk (the journal store), then applies it to the [`Index`] the API reads under a mutex.
//! So the fire path never takes a lock, never writes a file and never waits.
//!
//! # Bounds
//!
//! An entry is kept for `history_retention_s` after its last event (24 h by default), and a
//! tenant keeps at most `history_max_per_tenant` entries (10,000 by default): past it its
//! oldest entry goes, so one tenant's burst cannot fill the memory or the disk, nor push
//! another tenant's entries out. An entry keeps its last [`ATTEMPTS_KEPT`] attempts.
//!
//! # Durability
//!
//! With the journal store the log is `<data_dir>/history/history.log` (`log.rs`): written
//! (not fsynced) before the index shows an event, so a process kill loses nothing the API
//! showed; a power cut may lose the last seconds. With the memory store the history is kept
//! in memory only and is lost at a restart. The Redis store keeps none (the route answers
//! `501`).

mod event;
mod index;
mod log;

pub use event::{Attempt, Event, Outcome, Recorder, ATTEMPTS_KEPT, BUFFER_MAX};
pub use index::{Entry, Index, Page};
pub use log::History;
