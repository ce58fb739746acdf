//! Units that live in types: a UTC instant in microseconds or nanoseconds, and TSC ticks.
//!
//! Conversions between them happen here and in `clock`, nowhere else. All instants are
//! unsigned: punctual does not represent times before the Unix epoch.

use std::fmt;

/// A UTC instant, microseconds since the Unix epoch. Deadlines use this unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcMicros(pub u64);

/// A UTC instant, nanoseconds since the Unix epoch. The clock works in this unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcNanos(pub u64);

/// A raw reading of the time-stamp counter (or of whatever tick source the clock uses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TscTicks(pub u64);

/// The deadline of a timer: the UTC microsecond at or after which it fires.
pub type Deadline = UtcMicros;

/// Ten years of 365 days, the furthest a deadline may lie in the future (3,650 days).
pub const TEN_YEARS_US: u64 = 3_650 * 86_400 * 1_000_000;

/// The longest wait punctual hands to a timer (glommio's, or an `Instant` sum): a year.
/// glommio computes `Instant::now() + wait`, which panics past `Instant`'s range; a
/// configured timeout of `Duration::MAX` means "forever", and a year is forever enough.
pub const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(365 * 86_400);

/// `wait`, capped at [`MAX_WAIT`]: safe to add to an `Instant` or to pass to a timer.
pub fn capped(wait: std::time::Duration) -> std::time::Duration {
    wait.min(MAX_WAIT)
}

impl UtcMicros {
    pub const EPOCH: UtcMicros = UtcMicros(0);

    pub fn from_millis(ms: u64) -> Option<Self> {
        ms.checked_mul(1_000).map(UtcMicros)
    }

    pub fn as_nanos(self) -> UtcNanos {
        UtcNanos(self.0.saturating_mul(1_000))
    }

    pub fn saturating_add_micros(self, us: u64) -> Self {
        UtcMicros(self.0.saturating_add(us))
    }

    /// `self - earlier` in microseconds, or 0 when `earlier` is later.
    pub fn saturating_since(self, earlier: UtcMicros) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl UtcNanos {
    /// Truncates to the microsecond: a clock reading of 10.0000009 s is 10.000000 s, so
    /// comparing a truncated reading with a deadline never fires early.
    pub fn as_micros(self) -> UtcMicros {
        UtcMicros(self.0 / 1_000)
    }

    pub fn signed_diff(self, other: UtcNanos) -> i64 {
        (self.0 as i128 - other.0 as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

impl fmt::Display for UtcMicros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

#[cfg(test)]
#[path = "units_tests.rs"]
mod tests;
