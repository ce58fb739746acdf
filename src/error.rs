//! Errors at the library boundary. Each variant carries what the caller needs to act.

use thiserror::Error;

/// The longest tenant or key, in bytes (docs/API.md).
pub const MAX_NAME_LEN: usize = 128;

/// Which name was wrong: the tenant or the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    Tenant,
    Key,
}

impl std::fmt::Display for NameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameKind::Tenant => "tenant",
            NameKind::Key => "key",
        })
    }
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("{0} must not be empty")]
    EmptyName(NameKind),
    #[error("{kind} is {len} bytes; the limit is {MAX_NAME_LEN}")]
    NameTooLong { kind: NameKind, len: usize },
    #[error(
        "{kind} contains {found:?}; only [A-Za-z0-9._:-] is allowed, and not \".\" or \"..\" alone"
    )]
    InvalidName { kind: NameKind, found: String },
    #[error("payload is {len} bytes; the limit is {limit}")]
    PayloadTooLarge { len: usize, limit: usize },
    #[error("deadline {deadline_us} µs is outside the wheel's range (epoch to now + 10 years)")]
    DeadlineOutOfRange { deadline_us: u64 },
    #[error("shard {shard} holds {capacity} pending timers, its configured capacity")]
    CapacityExceeded { shard: usize, capacity: usize },
    #[error("the ring of shard {shard} is full ({capacity} requests waiting); retry later")]
    RingFull { shard: usize, capacity: usize },
    #[error("the tenant holds {share} requests in the ring of shard {shard}, its share (a quarter of the ring); retry later")]
    RingShare { shard: usize, share: usize },
    #[error("the tenant holds {share} writes waiting for the durable store of shard {shard}, its share (a quarter of them); retry later")]
    StoreShare { shard: usize, share: usize },
    #[error("tenant {tenant:?} has reached its quota of {limit} pending timers")]
    QuotaExceeded { tenant: String, limit: u64 },
    #[error("the engine is shutting down")]
    ShuttingDown,
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("could not start shard {shard}: {reason}")]
    ShardStart { shard: usize, reason: String },
    /// The durable store could not acknowledge the write in time: its outbox is full, the
    /// acknowledgement took longer than the ack timeout, or the store cannot write (the
    /// journal's disk is full or failed; Redis is unreachable or refused the write). Not
    /// acknowledged: the timer may or may not exist; retrying the same call is safe.
    #[error("the durable store cannot acknowledge writes now; retry after {retry_after_s} s")]
    StoreUnavailable { retry_after_s: u64 },
    /// Over a Redis Cluster: this node may not act on the key's partition now (it does not
    /// hold its lease, its lease is past its local deadline, or its timers are still being
    /// loaded). Not applied; retrying is safe.
    #[error("partition {partition} is not held by this node now (another node owns it, or its timers are still loading); retry")]
    PartitionNotHeld { partition: u32 },
    /// `"if": "absent"` while a timer is pending under the key: nothing changed.
    #[error("a timer is pending under this key (version {version}, due at {fire_at_us} µs since the epoch); nothing changed")]
    Exists { version: u64, fire_at_us: u64 },
    /// `if_version` that is not the pending timer's version: nothing changed.
    #[error("the pending timer's version is {current}, not {expected}; nothing changed")]
    VersionMismatch { expected: u64, current: u64 },
    /// `if_version` while no timer is pending under the key: nothing changed.
    #[error("no timer is pending for tenant {tenant:?} and key {key:?} (unknown, fired or cancelled); nothing changed")]
    NotPending { tenant: String, key: String },
    #[error("no dead letter for tenant {tenant:?} and key {key:?}")]
    DeadLetterNotFound { tenant: String, key: String },
    /// A dead letter cannot be re-driven while a timer is pending under its key.
    #[error("a timer is pending for tenant {tenant:?} and key {key:?}; cancel it (or let it fire) before re-driving its dead letter")]
    TimerPending { tenant: String, key: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Checks a tenant or key against the naming rule of docs/API.md: 1 to 128 bytes of `[A-Za-z0-9._:-]`,
/// other than `.` and `..`.
pub fn validate_name(kind: NameKind, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::EmptyName(kind));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::NameTooLong {
            kind,
            len: name.len(),
        });
    }
    if name == "." || name == ".." {
        return Err(Error::InvalidName {
            kind,
            found: name.to_string(),
        });
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(Error::InvalidName {
            kind,
            found: c.to_string(),
        });
    }
    Ok(())
}

/// Checks the key of a dead letter: a timer's key, or the key of a recurring schedule's
/// occurrence (`@key@N`, `partition::occurrence_key`), under which the letter of an
/// occurrence whose delivery failed for good is listed, re-driven and discarded. No client can
/// schedule a timer under such a key.
pub fn validate_letter_key(key: &str) -> Result<()> {
    let named = crate::partition::occurrence_of(key).map_or(key, |(schedule, _)| schedule);
    validate_name(NameKind::Key, named)
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
