//! The system clock's rate against the ticks, as the anchors measure it, and the rate the
//! mapping extrapolates with between anchors.
//!
//! NTP slews CLOCK_REALTIME by changing its rate (up to 500 ppm through the kernel's frequency
//! adjustment, more with chrony), while the TSC runs on at its own. An anchor interval of
//! 100 ms at a rate 500 ppm off is 50 µs of error, so the mapping does not assume the
//! calibrated rate: every anchor measures the rate CLOCK_REALTIME actually kept since the last
//! one, and the next interval extrapolates with a *lower bound* of it, so that whatever error
//! remains grows as a lag, not a lead.
//!
//! # One measurement
//!
//! Over the span between two samples `a` and `b` (at least half an anchor interval, so the
//! brackets' widths stay small against it), the system clock advanced by at least
//! `b.utc − a.utc − width(a)` (each sample's UTC may trail the true reading at its tick by
//! up to its width): that over the ticks is the span's rate, rounded down.
//!
//! # Which rate the mapping uses
//!
//! | the span's rate, against the last accepted one | taken as                                   |
//! |-----------------------------------------------|--------------------------------------------|
//! | within `max_rate_change_ppm`                  | accepted                                   |
//! | beyond it, but within it of the previous span | a sustained change (a fast slew): accepted |
//! | beyond it otherwise                           | a step inside the span: held for one span  |
//! | beyond `max_slew_ppm` of the calibrated rate  | a step: dropped                            |
//!
//! The mapping extrapolates with the *slower* of the last two accepted rates. A rate that
//! rises is believed one interval late (the mapping lags by the rise times one interval, and
//! slews it out); a rate that falls is believed at once. A span that held a small forward step
//! looks fast, and one that held a small backward step looks slow; taking the slower of two
//! keeps the first from carrying the mapping into a lead. A span that contains a known clock
//! set or a step beyond the threshold is not measured at all (`restart`).
//!
//! # What this cannot see
//!
//! A rate that drops *during* an interval is seen only at the next anchor: until then the
//! mapping gains the drop times the time since the last anchor (at most 50 µs for a 500 ppm
//! drop over 100 ms), less the target lag that the clock keeps in hand for it.

use super::sample::Sample;
use std::time::Duration;

/// What the tracker takes for a rate and what for a step (from the clock's configuration).
#[derive(Clone, Copy, Debug)]
pub(super) struct RateLimits {
    /// A change between consecutive spans beyond this, in ppm, is a step unless confirmed.
    pub max_change_ppm: u64,
    /// A rate further than this from the calibrated one, in ppm, is a step.
    pub plausible_ppm: u64,
    /// Spans shorter than this are left open (half an anchor interval).
    pub min_span: Duration,
}

/// Rates in nanoseconds of CLOCK_REALTIME per tick.
#[derive(Clone, Copy, Debug)]
pub(super) struct RateTracker {
    /// The calibrated rate (ns per tick), the centre of the plausible band.
    calibrated: f64,
    /// Where the span being measured starts.
    from: Sample,
    /// The last accepted rate and the one before it (lower bounds, ns per tick).
    last: f64,
    before: f64,
    /// A rate that broke with `last`: a step, unless the next span confirms it.
    pending: Option<f64>,
    /// Relative change between spans taken as a rate change rather than a step.
    max_change: f64,
    /// Relative distance from `calibrated` beyond which a span's rate is a step.
    plausible: f64,
    /// The shortest span measured, in ticks.
    min_span: u64,
}

impl RateTracker {
    /// Starts from the calibration's two samples; `None` if the ticks did not move.
    pub fn calibrate(first: &Sample, second: &Sample, limits: RateLimits) -> Option<RateTracker> {
        let ticks = second.ticks.checked_sub(first.ticks).filter(|&d| d > 0)? as f64;
        let calibrated = second.utc.checked_sub(first.utc)? as f64 / ticks;
        let plausible = limits.plausible_ppm as f64 * 1e-6;
        let lower = lower_bound(first, second, calibrated)
            .unwrap_or(calibrated)
            .max(calibrated * (1.0 - plausible));
        Some(RateTracker {
            calibrated,
            from: *second,
            last: lower,
            before: lower,
            pending: None,
            max_change: limits.max_change_ppm as f64 * 1e-6,
            plausible,
            min_span: (limits.min_span.as_nanos() as f64 / calibrated) as u64,
        })
    }

    /// A tracker that knows only a rate (the ticks did not move during calibration).
    pub fn fixed(ns_per_tick: f64, at: &Sample, limits: RateLimits) -> RateTracker {
        RateTracker {
            calibrated: ns_per_tick,
            from: *at,
            last: ns_per_tick,
            before: ns_per_tick,
            pending: None,
            max_change: limits.max_change_ppm as f64 * 1e-6,
            plausible: limits.plausible_ppm as f64 * 1e-6,
            min_span: 1,
        }
    }

    /// The rate to extrapolate with, ns per tick: the slower of the last two accepted.
    pub fn floor(&self) -> f64 {
        self.last.min(self.before)
    }

    /// An anchor's sample: measures the span since the last measurement if it is long enough
    /// (an anchor forced soon after another leaves the span open).
    pub fn observe(&mut self, s: &Sample) {
        if s.ticks.saturating_sub(self.from.ticks) < self.min_span {
            return;
        }
        let measured = lower_bound(&self.from, s, self.calibrated);
        self.from = *s;
        if let Some(rate) = measured {
            self.judge(rate);
        }
    }

    /// The system clock was set or stepped before `s`: the open span is not a rate.
    pub fn restart(&mut self, s: &Sample) {
        self.from = *s;
        self.pending = None;
    }

    fn judge(&mut self, rate: f64) {
        if (rate / self.calibrated - 1.0).abs() > self.plausible {
            self.pending = None;
            return;
        }
        let band = self.calibrated * self.max_change;
        if (rate - self.last).abs() <= band {
            self.before = self.last;
            self.last = rate;
            self.pending = None;
        } else if let Some(previous) = self.pending.filter(|p| (rate - p).abs() <= band) {
            self.before = previous;
            self.last = rate;
            self.pending = None;
        } else {
            self.pending = Some(rate);
        }
    }
}

/// The least rate (ns per tick) the system clock can have kept from `a` to `b`.
fn lower_bound(a: &Sample, b: &Sample, ns_per_tick: f64) -> Option<f64> {
    let ticks = b.ticks.checked_sub(a.ticks).filter(|&d| d > 0)? as f64;
    // Subtract in integers: UTC nanoseconds as f64 are only good to 256 ns.
    let utc = (b.utc as i128 - a.utc as i128) as f64 - a.width as f64 * ns_per_tick;
    (utc > 0.0).then(|| utc / ticks)
}

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
