//! The library API: [`EngineBuilder`] starts the shards; [`Handle`] (cloneable, `Send`) is how
//! any thread schedules, cancels and reads timers.
//!
//! Every call validates its arguments on the caller's thread, packs tenant, key and payload
//! into one allocation, and pushes it onto the ring of the shard that owns the key (a hash of
//! tenant and key). `schedule`, `cancel` and `get` block the calling thread until the shard
//! answers (microseconds); the `_async` forms return a future instead, for callers on an
//! executor; `schedule_detached` does not wait for an answer at all (bulk loads).
//!
//! | file | owns |
//! |---|---|
//! | `builder.rs` | the settings and `build`: rings, shard threads, the watchdog, the clock-set watch |
//! | `placement.rs` | which core each shard runs on |
//! | `handle.rs` | the `Handle`: validation, packing, routing to a ring, waiting for the answer |
//! | `stats.rs` | per-shard figures for exporters |
//! | `running.rs` | the running `Engine` and its shutdown |

mod builder;
mod handle;
mod handover;
mod list;
mod placement;
mod queue;
mod running;
mod schedules;
mod shard_start;
mod stats;

pub use crate::op::{
    Cancelled, Condition, DeadInfo, ListQuery, Listed, Scheduled, Terms, TimerInfo,
};
pub use crate::store::journal::{Fsync, JournalConfig, OnFailure};
pub use crate::store::redis::RedisConfig;
pub use builder::{ClockChoice, EngineBuilder, ShardStartHook, StoreKind};
pub use handle::{Handle, BODIES_PER_ASK, MAX_PAYLOAD};
pub use list::TimerPage;
pub use placement::{available_cores, Pinning};
pub use running::Engine;
pub use stats::ShardStats;

/// Turns transparent huge pages off for this process and the processes it starts (the flag is
/// inherited): where the kernel allows them, the first touch of each 2 MiB page clears the
/// whole page on the thread that touches it, a stall of milliseconds for a shard.
/// `punctual serve` calls it unless `--transparent-huge-pages` is given.
pub fn transparent_huge_pages_off() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes one integer argument (the rest must be zero) and only
    // sets a flag on this process's memory map.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
