//! How the journal writes: [`JournalConfig`], loaded once (`punctual serve` fills it from its
//! flags), validated once, with its defaults written in [`JournalConfig::new`].

use super::io;
use super::record;
use crate::error::{Error, Result};
use crate::store::durable::Limits;
use std::path::PathBuf;
use std::time::Duration;

/// When a commit is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    /// After its write and an `fdatasync`: survives a crash of the process or the machine.
    Always,
    /// After its write, with an `fdatasync` of the segment at least once a second (while
    /// anything is unsynced): survives a crash of the process; a power cut loses at most
    /// about the last second.
    EverySec,
    /// After its write; a segment is synced only when it is sealed: survives a crash of the
    /// process; a power cut loses what the kernel had not yet written back.
    Never,
}

impl Fsync {
    /// Whether each commit is synced before it is acknowledged.
    pub fn per_commit(self) -> bool {
        self == Fsync::Always
    }
}

/// How the journal writes. Defaults are written in [`JournalConfig::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct JournalConfig {
    /// The data directory (default `./punctual-data`).
    pub dir: PathBuf,
    pub fsync: Fsync,
    /// A segment rolls when the next commit would pass this size (default 64 MiB).
    pub segment_bytes: u64,
    /// Records per commit at most: N of "flushed every N records" (default 4,096).
    pub max_batch_records: usize,
    /// Bytes per commit at most, past its first record (default 1 MiB).
    pub max_batch_bytes: usize,
    /// Writes the outbox holds before durable registrations are refused (default 100,000).
    pub max_buffered: usize,
    /// Records no caller waits for (fires, a webhook's attempts and outcomes, dead letters,
    /// leases) the outbox holds before the shard holds due timers back (default 100,000).
    pub max_buffered_fires: usize,
    /// Longest a durable schedule or cancel waits before `StoreUnavailable` (2 s).
    pub ack_timeout: Duration,
    /// Skip (and count) corrupt records at recovery instead of refusing to start.
    pub skip_corrupt: bool,
    /// Longest pause between retries of a commit on a full disk (default 1 s).
    pub retry_max: Duration,
    /// What a shard does once its journal failed (default: refuse; `punctual serve`: exit).
    pub on_failure: OnFailure,
    /// Timers due further ahead than this are paged: kept on disk, loaded into the wheel this
    /// far ahead of their time (`page`). `None` (the default): every timer in memory.
    pub page_horizon: Option<Duration>,
    /// The file operations the journal calls: the real disk, or (tests) one with faults.
    pub disk: io::Disk,
}

/// What a shard does once its journal failed: a sync or write error, after which the kernel
/// may have dropped data it still shows, so the journal never syncs that file again and
/// acknowledges nothing more (`StoreState::Failed`). Either way every write is refused with 503
/// from then on and nothing queued is acknowledged; `docs/ARCHITECTURE.md` ("When the disk
/// fails") has why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFailure {
    /// The shard goes on firing from memory and refusing writes until the program restarts
    /// it: the library's default, so that an embedding program decides.
    #[default]
    Refuse,
    /// After the log line, the process exits with status 1, so that its supervisor restarts
    /// it and recovery reads what the disk really holds (crash-only, as PostgreSQL's PANIC on
    /// an fsync error): what `punctual serve` does.
    Exit,
}

impl JournalConfig {
    pub fn new(dir: impl Into<PathBuf>) -> JournalConfig {
        JournalConfig {
            dir: dir.into(),
            fsync: Fsync::Always,
            segment_bytes: 64 << 20,
            max_batch_records: 4096,
            max_batch_bytes: 1 << 20,
            max_buffered: 100_000,
            max_buffered_fires: 100_000,
            ack_timeout: Duration::from_secs(2),
            skip_corrupt: false,
            retry_max: Duration::from_secs(1),
            on_failure: OnFailure::Refuse,
            page_horizon: None,
            disk: io::Disk::default(),
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::Config(format!("journal: {what}")));
        if self.segment_bytes < (1 << 20) || self.segment_bytes > (1 << 30) {
            return bad("segment_bytes must be 1 MiB to 1 GiB");
        }
        if self.max_batch_bytes < record::MAX_LEN
            || self.max_batch_bytes as u64 > self.segment_bytes / 4
        {
            return bad("max_batch_bytes must be 256 KiB to a quarter of segment_bytes");
        }
        if self.max_batch_records == 0 || self.max_buffered == 0 || self.max_buffered_fires == 0 {
            return bad("max_batch_records, max_buffered and max_buffered_fires must be positive");
        }
        if self
            .page_horizon
            .is_some_and(|h| h < Duration::from_secs(1))
        {
            return bad("page_horizon must be at least a second");
        }
        Ok(())
    }

    /// The outbox's bounds and what a refused or timed-out caller is told: a refused write
    /// may come back after one retry step.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_buffered: self.max_buffered,
            max_buffered_fires: self.max_buffered_fires,
            ack_timeout: self.ack_timeout,
            retry_after_s: self.retry_max.as_secs().max(1),
        }
    }
}
