//! punctual: a thread-per-core timer engine for Linux x86-64.
//!
//! See `README.md` for the architecture drawing and `shared/DESIGN.md` for the contract.

pub mod clock;
pub mod doctor;
pub mod error;
pub mod units;
pub mod wheel;

pub use error::{Error, Result};
pub use units::{Deadline, TscTicks, UtcMicros, UtcNanos};
