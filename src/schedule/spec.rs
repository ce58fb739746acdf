//! A schedule's definition as the API receives and stores it (the JSON shape below, field
//! names kept as clients rely on them), and its validation into a [`Schedule`].
//!
//! ```json
//! {
//!   "cron": "30 2 * * *",              "every_ms": 60000,
//!   "time_zone": "America/New_York",
//!   "start_at": "2027-01-01T00:00:00Z", "end_at": "2028-01-01T00:00:00Z",
//!   "max_occurrences": 100,
//!   "catch_up": {"policy": "latest", "window_ms": 3600000},
//!   "dst": {"gap": "shift", "overlap": "first"}
//! }
//! ```
//!
//! Exactly one of `cron` and `every_ms`. Every field is optional otherwise, and kept as given
//! (an absent one stays absent when the definition is answered back); the defaults are the
//! constants and `Default`s below. Fields this module does not read (`payload`, `callback`,
//! `retry`) belong to the delivery side and are ignored here. `compile.rs` validates it.

use super::dst::DstSpec;
use serde::{Deserialize, Deserializer, Serialize};

/// The default catch-up window: a missed occurrence up to an hour old is still worth firing.
pub const DEFAULT_WINDOW_MS: u64 = 3_600_000;
/// The longest period `every_ms` may have: 100 years.
pub const MAX_EVERY_MS: u64 = 100 * 365_250 * 86_400;

/// A schedule's definition, timing fields only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole"
    )]
    pub every_ms: Option<u64>,
    /// An IANA zone name; `UTC` when absent. With `cron` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// RFC 3339. No occurrence before it; `every_ms` counts from it. Absent: the definition's
    /// creation time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// RFC 3339. No occurrence after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    /// The schedule ends after this many fires.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole"
    )]
    pub max_occurrences: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up: Option<CatchUpSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<DstSpec>,
}

/// What fires for occurrences missed while the service was down, the schedule paused, or the
/// clock jumped forward (see `catch_up.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatchUpSpec {
    #[serde(default)]
    pub policy: CatchUpPolicy,
    /// How old a missed occurrence may be and still fire; [`DEFAULT_WINDOW_MS`] when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole"
    )]
    pub window_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchUpPolicy {
    /// No missed occurrence fires.
    Skip,
    /// The most recent missed occurrence fires once, if within the window.
    #[default]
    Latest,
    /// Every missed occurrence within the window fires, in order.
    All,
}

/// The bounds a deployment puts on definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The least `every_ms` (1 s unless configured).
    pub min_every_ms: u64,
    /// The longest `catch_up.window_ms` (7 days unless configured): it bounds a catch-up's work.
    pub max_window_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_every_ms: 1_000,
            max_window_ms: 7 * 86_400_000,
        }
    }
}

/// A whole number as JSON may write one (`1000`, `1000.0`, `1e3`: JSON Schema's `integer`,
/// which the document gives these fields, counts them all), or `null` for none; a fraction, a
/// negative number or one past `u64` is refused.
pub fn whole<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    if let Some(u) = n.as_u64() {
        return Ok(Some(u));
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && (0.0..u64::MAX as f64).contains(&f) => Ok(Some(f as u64)),
        _ => Err(serde::de::Error::custom(format_args!(
            "invalid value: {n}, expected a whole number from 0"
        ))),
    }
}
