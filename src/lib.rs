//! punctual: a thread-per-core timer engine for Linux x86-64.
//!
//! See `README.md` for the architecture drawing and `shared/DESIGN.md` for the contract.

pub mod clock;
pub mod doctor;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod ring;
pub mod shard;
pub mod units;
pub mod wheel;

pub use engine::{Cancelled, Engine, EngineBuilder, Handle, Scheduled, TimerInfo};
pub use error::{Error, Result};
pub use shard::FiredTimer;
pub use units::{Deadline, TscTicks, UtcMicros, UtcNanos};
