//! UTC time from the TSC: read with RDTSCP, mapped to CLOCK_REALTIME, re-anchored every
//! 100 ms, with a measured error.
//!
//! # The mapping
//!
//! ```text
//!   utc_ns(t) = base_ns + (t - base_ticks) × rate          rate in ns per tick, 32.32 fixed point
//! ```
//!
//! | step         | when                      | what                                              |
//! |--------------|---------------------------|---------------------------------------------------|
//! | calibrate    | start                     | two bracketed samples `cal_period` apart → rate  |
//! | anchor       | every `anchor_interval`   | bracketed sample → error = mapped − CLOCK_REALTIME |
//! | slew         | error ≤ `step_threshold`  | keep the mapping continuous, change only the rate |
//! | step         | error > `step_threshold`  | count, log, re-anchor on the system clock         |
//!
//! A *bracketed sample* reads the TSC, CLOCK_REALTIME, the TSC again, keeps the narrowest of a
//! few tries, and pairs the UTC reading with the *second* TSC reading. The system clock was
//! read before that tick, so the mapping errs towards lagging UTC by at most the bracket
//! width (tens of ns), never towards leading it: a timer compared against this clock is
//! not fired early because of the calibration.
//!
//! # Slewing
//!
//! At each anchor the mapping is re-based on its own current value, so it is continuous, and
//! only the rate changes: the calibrated frequency times `1 + correction`, where the correction
//! comes from a PI controller on the error `x` (seconds): `correction = I − x / horizon`,
//! `I −= x·Δt / (4·horizon²)` (critically damped: a phase error decays without overshoot,
//! and the integral learns a steady frequency error, such as the system clock being slewed by
//! NTP). The correction is clamped to ±`max_slew_ppm`, so the rate stays positive: the clock
//! never runs backwards and never jumps for an error under the threshold.
//!
//! # Clock steps: the policy
//!
//! An error beyond `step_threshold` (50 ms by default) means the system clock was stepped
//! (settimeofday, `chronyc makestep`, a VM resumed). Deadlines are absolute UTC instants, so
//! the mapping follows the system clock in both directions, counts the step, and logs it:
//!
//! - **forward**: the clock jumps ahead; the shard's next poll fires everything that became
//!   due, in deadline order.
//! - **backward**: the clock jumps back with UTC. The shard's wheel never moves backwards:
//!   timers that fired stay fired (never twice), timers still pending have deadlines after the
//!   wheel's time and fire when the clock reaches them (never early), and a timer scheduled
//!   inside the gap waits on the wheel's expired list until the clock reaches it. The wheel's
//!   time, and so the engine's notion of "what has happened", is monotonic across the step.
//!
//! # Fallback
//!
//! Without an invariant TSC (CPUID 0x8000_0007 EDX bit 8, and RDTSCP), or off x86-64, the
//! ticks are CLOCK_MONOTONIC nanoseconds read with `clock_gettime`; everything above applies
//! unchanged. The log says so at start, and the `source` label of the clock metrics says
//! `clock_gettime`.
//!
//! # Cost
//!
//! `now()`: one RDTSCP (≈ 10–30 ns, serialising) and a 64×64→128-bit multiply. `anchor()`:
//! a few clock_gettime calls, every 100 ms.

mod source;

pub use source::{clock_ns, FakeSource, HostSource, SourceKind, TimeSource};

use crate::units::{TscTicks, UtcNanos};
use std::time::Duration;

const SHIFT: u32 = 32;

#[derive(Clone, Copy, Debug)]
pub struct ClockConfig {
    pub anchor_interval: Duration,
    pub step_threshold: Duration,
    /// The error is removed over about this long (geometric decay).
    pub slew_horizon: Duration,
    /// The largest rate correction, in parts per million.
    pub max_slew_ppm: u64,
    /// Time between the two calibration samples.
    pub cal_period: Duration,
    /// Bracketed reads per sample; the narrowest is kept.
    pub sample_tries: u32,
}

impl Default for ClockConfig {
    fn default() -> Self {
        ClockConfig {
            anchor_interval: Duration::from_millis(100),
            step_threshold: Duration::from_millis(50),
            slew_horizon: Duration::from_millis(500),
            max_slew_ppm: 100_000,
            cal_period: Duration::from_millis(20),
            sample_tries: 7,
        }
    }
}

/// One bracketed reading: UTC paired with the tick read just after it.
#[derive(Clone, Copy, Debug)]
struct Sample {
    ticks: u64,
    utc: u64,
    /// Width of the bracket, in ticks.
    width: u64,
}

/// What an anchor found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnchorOutcome {
    /// The error was within the threshold and is being slewed out.
    Slewed { offset_ns: i64 },
    /// The system clock stepped by about `-offset_ns`; the mapping followed it.
    Stepped { offset_ns: i64 },
}

/// Counters a shard exports as metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockStats {
    /// Mapped clock − CLOCK_REALTIME at the last anchor, ns (positive: the mapped clock leads).
    pub offset_ns: i64,
    pub steps: u64,
    pub anchors: u64,
    /// Width of the last anchor's bracket, ns: the measurement's own uncertainty.
    pub bracket_ns: u64,
}

/// One shard's clock. Not `Sync`: each shard owns its own, on its own core.
pub struct Clock<S: TimeSource> {
    src: S,
    cfg: ClockConfig,
    base_ticks: u64,
    base_ns: u64,
    /// ns per tick, 32.32 fixed point, as currently slewed.
    rate: u64,
    /// ns per tick, 32.32, from calibration.
    freq: u64,
    /// Integral term of the rate correction (dimensionless; 1e-6 is 1 ppm).
    integral: f64,
    next_anchor_ticks: u64,
    stats: ClockStats,
}

impl<S: TimeSource> Clock<S> {
    /// Calibrates against the system clock: waits `cfg.cal_period` between two samples.
    pub fn calibrate(src: S, cfg: ClockConfig) -> Clock<S> {
        let first = sample(&src, cfg.sample_tries);
        src.pause(cfg.cal_period);
        let second = sample(&src, cfg.sample_tries);
        let freq = rate_between(&first, &second).unwrap_or(1 << SHIFT);
        let mut clock = Clock {
            src,
            cfg,
            base_ticks: second.ticks,
            base_ns: second.utc,
            rate: freq,
            freq,
            integral: 0.0,
            next_anchor_ticks: 0,
            stats: ClockStats {
                bracket_ns: mul_rate(second.width, freq),
                ..ClockStats::default()
            },
        };
        clock.schedule_next_anchor(second.ticks);
        if clock.src.kind() == SourceKind::ClockGettime {
            tracing::warn!(
                "no invariant TSC with RDTSCP on this CPU: the clock falls back to clock_gettime \
                 (slower reads; see `punctual doctor`)"
            );
        }
        clock
    }

    pub fn source(&self) -> &S {
        &self.src
    }

    pub fn kind(&self) -> SourceKind {
        self.src.kind()
    }

    pub fn stats(&self) -> ClockStats {
        self.stats
    }

    /// The current UTC time in nanoseconds, from one tick reading.
    #[inline]
    pub fn now(&self) -> UtcNanos {
        self.at(self.src.ticks())
    }

    /// UTC at tick `t` (which should not precede the last anchor).
    #[inline]
    pub fn at(&self, t: TscTicks) -> UtcNanos {
        let delta = t.0.saturating_sub(self.base_ticks);
        UtcNanos(self.base_ns + mul_rate(delta, self.rate))
    }

    /// Ticks that cover at least `dur` at the current rate (for spin and park budgets).
    pub fn ticks_for(&self, dur: Duration) -> u64 {
        ((dur.as_nanos() << SHIFT) / self.rate.max(1) as u128).min(u64::MAX as u128) as u64
    }

    /// Whether an anchor is due at tick `t`.
    #[inline]
    pub fn anchor_due(&self, t: TscTicks) -> bool {
        t.0 >= self.next_anchor_ticks
    }

    /// UTC of the next anchor, so a parked shard wakes for it.
    pub fn next_anchor_at(&self) -> UtcNanos {
        self.at(TscTicks(self.next_anchor_ticks))
    }

    /// Takes a fresh anchor against the system clock and slews or steps.
    pub fn anchor(&mut self) -> AnchorOutcome {
        let s = sample(&self.src, self.cfg.sample_tries);
        let mapped = self.at(TscTicks(s.ticks)).0;
        let offset_ns = (mapped as i128 - s.utc as i128) as i64;
        self.stats.anchors += 1;
        self.stats.offset_ns = offset_ns;
        self.stats.bracket_ns = mul_rate(s.width, self.rate);
        let since_last_ns = mul_rate(s.ticks.saturating_sub(self.base_ticks), self.rate);
        let outcome = if offset_ns.unsigned_abs() as u128 > self.cfg.step_threshold.as_nanos() {
            self.stats.steps += 1;
            tracing::warn!(
                offset_ms = offset_ns as f64 / 1e6,
                direction = if offset_ns > 0 { "backward" } else { "forward" },
                "system clock stepped; the mapping follows it (deadlines are UTC instants)"
            );
            self.base_ticks = s.ticks;
            self.base_ns = s.utc;
            self.rate = self.corrected_rate(self.integral);
            AnchorOutcome::Stepped { offset_ns }
        } else {
            self.base_ticks = s.ticks;
            self.base_ns = mapped;
            self.rate = self.slewed_rate(offset_ns, since_last_ns);
            AnchorOutcome::Slewed { offset_ns }
        };
        self.schedule_next_anchor(s.ticks);
        outcome
    }

    /// The PI controller: a rate that removes `offset_ns` over about `slew_horizon`.
    fn slewed_rate(&mut self, offset_ns: i64, since_last_ns: u64) -> u64 {
        let max = self.cfg.max_slew_ppm as f64 * 1e-6;
        let horizon = self.cfg.slew_horizon.as_secs_f64().max(1e-3);
        let x = offset_ns as f64 * 1e-9;
        let dt = since_last_ns as f64 * 1e-9;
        let ki = 1.0 / (4.0 * horizon * horizon);
        self.integral = (self.integral - ki * x * dt).clamp(-max, max);
        self.corrected_rate(self.integral - x / horizon)
    }

    fn corrected_rate(&self, correction: f64) -> u64 {
        let max = self.cfg.max_slew_ppm as f64 * 1e-6;
        let rate = self.freq as f64 * (1.0 + correction.clamp(-max, max));
        rate.clamp(1.0, u64::MAX as f64) as u64
    }

    fn schedule_next_anchor(&mut self, t: u64) {
        let interval = self.ticks_for(self.cfg.anchor_interval).max(1);
        self.next_anchor_ticks = t.saturating_add(interval);
    }
}

#[inline]
fn mul_rate(ticks: u64, rate: u64) -> u64 {
    ((ticks as u128 * rate as u128) >> SHIFT).min(u64::MAX as u128) as u64
}

/// ns per tick between two samples, 32.32; `None` if the ticks did not move.
fn rate_between(a: &Sample, b: &Sample) -> Option<u64> {
    let dt = b.ticks.checked_sub(a.ticks).filter(|&d| d > 0)?;
    let dn = b.utc.checked_sub(a.utc)?;
    Some((((dn as u128) << SHIFT) / dt as u128).min(u64::MAX as u128) as u64)
}

/// The narrowest of `tries` (tick, UTC, tick) brackets.
fn sample<S: TimeSource>(src: &S, tries: u32) -> Sample {
    let mut best: Option<Sample> = None;
    for _ in 0..tries.max(1) {
        let t1 = src.ticks().0;
        let utc = src.realtime().0;
        let t2 = src.ticks().0;
        let s = Sample {
            ticks: t2,
            utc,
            width: t2.saturating_sub(t1),
        };
        if best.is_none_or(|b| s.width < b.width) {
            best = Some(s);
        }
    }
    best.unwrap_or(Sample {
        ticks: src.ticks().0,
        utc: src.realtime().0,
        width: 0,
    })
}

#[cfg(test)]
mod tests;
