//! The daylight-saving policy of a cron schedule: what a local time that does not occur (a
//! spring-forward gap) or occurs twice (a fall-back overlap) fires. `zoned.rs` applies it.

use serde::{Deserialize, Serialize};

/// The daylight-saving policy of a cron schedule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DstSpec {
    #[serde(default)]
    pub gap: Gap,
    #[serde(default)]
    pub overlap: Overlap,
}

/// A local time that does not occur (spring forward).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gap {
    /// Fire at that local time moved forward by the gap's length (02:30 becomes 03:30 EDT).
    #[default]
    Shift,
    /// Fire nothing for it.
    Skip,
}

/// A local time that occurs twice (fall back). A cron whose hour field is `*` fires in every
/// real hour, both passes included, whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// Fire at its first pass (the earlier offset).
    #[default]
    First,
    /// Fire at its second pass.
    Last,
    /// Fire at both.
    Both,
}
