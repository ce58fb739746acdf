//! punctual: a thread-per-core timer engine for Linux x86-64.
//!
//! Each shard is a glommio executor pinned to its own core, with its own hierarchical timing
//! wheel ([`wheel`]), its own TSC clock mapped to UTC ([`clock`]), and a bounded MPSC ring
//! ([`ring`]) through which any thread reaches it. Deadlines are absolute UTC microseconds;
//! a timer never fires before its deadline.
//!
//! ```
//! use punctual::{Cancelled, EngineBuilder, UtcMicros};
//! use std::sync::mpsc;
//! use std::time::Duration;
//!
//! let (tx, fired) = mpsc::sync_channel(16);
//! let engine = EngineBuilder::new()
//!     .shards(1)
//!     .pinning(punctual::engine::Pinning::None) // doctests share the machine
//!     .spin(Duration::from_micros(50))
//!     .on_fire(move |t| {
//!         let _ = tx.try_send((t.key.to_string(), t.version, t.fired_at.as_micros() >= t.deadline));
//!     })
//!     .build()?;
//! let timers = engine.handle(); // cloneable and Send: hand it to any thread
//!
//! let soon = UtcMicros(timers.now().0 + 20_000); // 20 ms from now, in UTC µs
//! let s = timers.schedule("shop", "order-8812", soon, br#"{"action":"close"}"#)?;
//! assert!(!s.replaced);
//! assert_eq!(timers.get("shop", "order-8812")?.map(|t| t.version), Some(s.version));
//!
//! let later = UtcMicros(timers.now().0 + 60_000_000);
//! timers.schedule("shop", "order-8813", later, b"")?;
//! assert!(matches!(timers.cancel("shop", "order-8813")?, Cancelled::Cancelled { .. }));
//!
//! let (key, version, on_time) = fired.recv_timeout(Duration::from_secs(5)).expect("fired");
//! assert_eq!((key.as_str(), version, on_time), ("order-8812", s.version, true));
//! engine.shutdown().expect("every shard thread joined");
//! # Ok::<(), punctual::Error>(())
//! ```

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod clock;
pub mod config;
pub mod cpus;
pub mod doctor;
pub mod engine;
pub mod error;
pub mod history;
pub mod metrics;
pub mod nodes;
pub mod op;
pub(crate) mod page;
pub mod partition;
pub mod queue;
pub mod quota;
pub mod resolve;
pub mod ring;
pub(crate) mod runtime;
pub mod schedule;
pub mod shard;
pub mod sink;
pub mod store;
pub mod timer;
pub mod units;
pub mod wheel;

pub use engine::{Cancelled, Engine, EngineBuilder, Handle, Scheduled, TimerInfo};
pub use error::{Error, Result};
pub use timer::FiredTimer;
pub use units::{Deadline, TscTicks, UtcMicros, UtcNanos};

/// The README's Rust examples compile and run as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
