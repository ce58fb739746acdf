//! What an attempt's outcome means, and when the next attempt goes: the classification of
//! answers, the backoff with full jitter, and `Retry-After`.
//!
//! | outcome | class | next |
//! |---|---|---|
//! | 2xx within the timeout | success | the timer is done |
//! | our resolver had no room for the lookup (`Busy`) | not an attempt | made again after a growing backoff, up to `MAX_BUSY` times in a row (`meta.rs`); the next counts as a connection error |
//! | connection error (name, TCP, TLS, HTTP), timeout, 5xx, 408, 429 | retriable | the next attempt after the backoff, or `Retry-After` (capped at `max_delay_ms`); a dead letter once `max_attempts` were made |
//! | any other status (other 4xx, 3xx: redirects are not followed) | permanent | a dead letter at once |
//!
//! Backoff after attempt `n` (1-based): a uniform draw from `[0, min(max_delay, base · 2^(n−1))]`
//! ("full jitter"), every step saturating, so no policy overflows.

use super::client::SendError;
use super::meta::RetryPolicy;
use std::time::Duration;

/// Why an attempt failed, for metrics (`class` label) and for the dead letter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer came from the network: the client's error, by class (`SendError::Busy`,
    /// our own resolver's refusal, is not the receiver's failure: see `deliver::settle`).
    Send(SendError),
    /// No complete answer within the webhook timeout.
    Timeout,
    /// An answer that asks for a retry: 5xx, 408, 429 (with its `Retry-After`, if any).
    Retriable {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// An answer that will not change on retry.
    Permanent { status: u16 },
}

/// `last_error` of a callback the tenant's allow-list no longer permits.
pub const NOT_ALLOWED: &str = "callback_not_allowed";

/// Attempts answered `401` or `403` before the timer becomes a dead letter: a receiver in the
/// middle of a key roll may refuse a signature it cannot verify yet, so such an answer is
/// retried, but only this many times in all (or `max_attempts`, if fewer).
pub const AUTH_ATTEMPTS: u32 = 3;

impl Failure {
    /// The class as a metric label.
    pub fn class(&self) -> &'static str {
        match self {
            Failure::Send(SendError::AddressNotAllowed { .. }) => "permanent",
            Failure::Send(_) => "connect",
            Failure::Timeout => "timeout",
            Failure::Retriable { status, .. } if *status >= 500 => "5xx",
            Failure::Retriable { .. } => "throttled",
            Failure::Permanent { .. } => "permanent",
        }
    }

    pub fn is_retriable(&self) -> bool {
        !matches!(
            self,
            Failure::Permanent { .. } | Failure::Send(SendError::AddressNotAllowed { .. })
        )
    }

    /// What the tenant sees as `last_error` (with no `last_status`): a class, never an
    /// address, a port or an OS message (those go to the operator's log).
    pub fn public(&self) -> &'static str {
        match self {
            Failure::Send(e) => e.class(),
            Failure::Timeout => "timeout",
            Failure::Retriable { .. } | Failure::Permanent { .. } => "http_status",
        }
    }
}

/// Classifies an answer: `Ok` for success.
pub fn classify(status: u16, retry_after: Option<Duration>) -> Result<(), Failure> {
    match status {
        200..=299 => Ok(()),
        408 | 429 | 500..=599 | 401 | 403 => Err(Failure::Retriable {
            status,
            retry_after,
        }),
        _ => Err(Failure::Permanent { status }),
    }
}

/// The ceiling of the backoff after attempt `attempt` (1-based): `min(max, base · 2^(attempt−1))`.
pub fn backoff_ceiling(p: &RetryPolicy, attempt: u32) -> Duration {
    let shift = attempt.saturating_sub(1).min(63);
    let factor = 1u64.checked_shl(shift).unwrap_or(u64::MAX);
    let ms = p.base_delay_ms.saturating_mul(factor).min(p.max_delay_ms);
    Duration::from_millis(ms)
}

/// The wait before the next attempt: a full-jitter draw under the backoff ceiling, or the
/// endpoint's `Retry-After` when that is longer, capped at `max_delay_ms`. A `Retry-After`
/// never shortens the backoff (`Retry-After: 0` does not turn it off): the draw is its floor.
/// `draw` is a uniform random `u64`.
pub fn next_delay(
    p: &RetryPolicy,
    attempt: u32,
    retry_after: Option<Duration>,
    draw: u64,
) -> Duration {
    let max = Duration::from_millis(p.max_delay_ms);
    let ceiling = backoff_ceiling(p, attempt).as_micros() as u64;
    let jitter = Duration::from_micros(draw % ceiling.saturating_add(1));
    retry_after.map_or(jitter, |ra| ra.max(jitter)).min(max)
}

/// `Retry-After`: delta-seconds, or an HTTP date (IMF-fixdate, RFC 2822 form) counted from
/// `now_unix_s`. `None` when absent or unreadable.
pub fn parse_retry_after(value: &[u8], now_unix_s: u64) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if let Ok(s) = text.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc2822)
        .ok()?
        .unix_timestamp();
    Some(Duration::from_secs(
        u64::try_from(at).ok()?.saturating_sub(now_unix_s),
    ))
}

/// A small, fast generator for jitter (xorshift64*); not for secrets.
#[derive(Debug)]
pub struct Jitter(u64);

impl Jitter {
    pub fn new(seed: u64) -> Jitter {
        Jitter(seed | 1)
    }

    pub fn draw(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
