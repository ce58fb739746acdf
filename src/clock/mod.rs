//! UTC time from the TSC: read with RDTSCP, mapped to CLOCK_REALTIME, re-anchored every
//! 100 ms and whenever the system clock is set, and kept just *behind* the system clock.
//!
//! # The policy: never ahead of CLOCK_REALTIME
//!
//! Deadlines are CLOCK_REALTIME instants. A mapped clock that read later than CLOCK_REALTIME
//! would fire timers early by the system clock, so the mapping is held `lag_target` (1 µs)
//! behind it, and every anchor corrects it in the safe direction only:
//!
//! | an anchor finds the mapping        | the mapping                                     | counted     |
//! |------------------------------------|-------------------------------------------------|-------------|
//! | ahead, by up to `step_threshold`   | set back at once, to `lag_target` behind        | `set_backs` |
//! | behind, by up to `step_threshold`  | continuous; its rate slews the lag down to the target over `slew_horizon` | — |
//! | off by more, either way (a step)   | moved at once to `lag_target` behind; logged    | `steps`     |
//!
//! A lead is never slewed away: a slew would keep the clock ahead, firing timers early, for as
//! long as it took. Only a lag is slewed, and a slew cannot overshoot into a lead: over
//! `slew_horizon` (taken as at least two anchor intervals) it removes at most the excess lag.
//!
//! # The mapping
//!
//! ```text
//!   utc_ns(t) = base_ns + (t − base_ticks) × rate        rate: ns per tick, 32.32 fixed point
//!   rate      = measured × (1 + (lag − lag_target) / slew_horizon)   (clamped to ±max_slew_ppm)
//! ```
//!
//! | step      | when                                   | what                                   |
//! |-----------|----------------------------------------|----------------------------------------|
//! | calibrate | start                                  | two samples `cal_period` apart → rate   |
//! | anchor    | every `anchor_interval`, and on a set  | a sample → lag, measured rate → policy  |
//!
//! A *sample* (`sample.rs`) brackets one CLOCK_REALTIME read between two tick reads and
//! pairs it with the later tick, so its UTC errs towards the past. `measured` (`rate.rs`) is
//! the rate CLOCK_REALTIME kept against the ticks over the last anchor intervals, rounded
//! down, the slower of the last two: NTP slews the system clock by up to 500 ppm, 50 µs per
//! 100 ms interval, which a calibrated rate alone would turn into a lead within an interval.
//!
//! # Sets and steps of the system clock
//!
//! [`SetWatch`] (one thread per process, on a cancel-on-set timerfd) bumps a generation when
//! CLOCK_REALTIME is set. A clock that follows it ([`Clock::follow_sets`]) has an anchor due
//! at its owner's next check, not up to 100 ms later, so shards agree again within a loop
//! pass; the span that the set broke is not measured as a rate. The anchor then applies the
//! table above. After the mapping moves back (a lead set back, a backward step) the shard's
//! wheel does not rewind: timers that fired stay fired (never twice), pending ones have
//! deadlines after the wheel's time and fire when the clock reaches them (never early), and a
//! timer scheduled inside the gap waits on the wheel's expired list.
//!
//! # What a caller may rely on
//!
//! - Right after every anchor the mapping is behind CLOCK_REALTIME.
//! - Between anchors it stays behind unless CLOCK_REALTIME's rate drops, against the slower of
//!   the last two intervals', by more than the lag in hand per interval: about `lag_target`,
//!   so 10 ppm at the defaults. A larger drop (the end of a large NTP slew) shows only at the
//!   next anchor: until then the clock leads by at most the drop × 100 ms less that lag,
//!   49 µs for 500 ppm, 8.3 ms at the end of a chrony slew at its default `maxslewrate`
//!   (83,333 ppm); a drop beyond the rate tracker's band is believed only when a second span
//!   confirms it, so such a lead can last two intervals. A step of the system clock that no
//!   [`SetWatch`] reports leads by the step until the next anchor.
//! - So the mapping alone does not make firing never-early: the shard closes the gap. Before
//!   a pass fires anything it asks [`Clock::ahead_of_system`] (one `clock_gettime`, only
//!   when something is due), and on a lead it anchors first, which sets the lead back
//!   (counted in `set_backs`). A timer fires only once the mapped clock, read before the
//!   system clock, has reached its deadline without leading the system clock.
//! - `now()` runs forward between anchors and is continuous across an anchor that finds a
//!   lag. It is **not** monotonic: it moves back by the lead when a lead is set back, and by
//!   the step when the system clock steps back.
//! - The mapping trails CLOCK_REALTIME by 1.39 µs at the median
//!   (p1 1.32, p99 1.57 µs; the 1 µs target plus the brackets' widths taken out of the rate)
//!   on the 2-vCPU KVM guest of docs/BENCHMARKS.md; a mapping aimed at zero lag sits at 0.04 µs
//!   there, 43 % of its readings later than a CLOCK_REALTIME read taken just before. Command:
//!   `cargo test --release --lib clock::tests::host_lag_figure -- --ignored --nocapture`.
//!   That lag is not paid in lateness: the shard waits on the mapping only until
//!   [`Clock::lag_allowance`] before a deadline, then reads the system clock itself and fires
//!   by that reading (`shard::fire`), as a thread spinning on CLOCK_REALTIME would.
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
//! `now()`: one RDTSC (not serialising: an early read can only map to an earlier time, so a fire
//! can be later, never earlier) and a 64×64→128-bit multiply, nothing more. Anchors and
//! calibration read with RDTSCP, which does not execute early.
//! `anchor_due()`: a compare, and one relaxed atomic load when following sets. `anchor()`: a
//! few clock_gettime calls and a few floating-point operations, every 100 ms.

mod rate;
mod sample;
mod set_watch;
mod source;

pub use set_watch::SetWatch;
pub use source::{clock_ns, FakeSource, HostSource, SourceKind, TimeSource};

use crate::units::{TscTicks, UtcNanos};
use rate::{RateLimits, RateTracker};
use sample::{sample, Sample};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const SHIFT: u32 = 32;

#[derive(Clone, Copy, Debug)]
pub struct ClockConfig {
    pub anchor_interval: Duration,
    /// An error beyond this is a step of the system clock: counted and logged.
    pub step_threshold: Duration,
    /// How far behind CLOCK_REALTIME the mapping is kept: slack for a drop in the system
    /// clock's rate between two anchors (1 µs covers 10 ppm over a 100 ms interval).
    pub lag_target: Duration,
    /// A lag beyond the target is removed over about this long (geometric decay). Taken as at
    /// least two anchor intervals, so that a late anchor does not turn the slew into a lead.
    pub slew_horizon: Duration,
    /// The largest rate correction, and the largest believable error of the system clock's
    /// rate against the calibrated one, in parts per million.
    pub max_slew_ppm: u64,
    /// A change of the system clock's measured rate from one anchor interval to the next
    /// beyond this, in parts per million, is taken for a step until a second interval
    /// confirms it (the kernel's NTP frequency adjustment spans ±500 ppm).
    pub max_rate_change_ppm: u64,
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
            lag_target: Duration::from_micros(1),
            slew_horizon: Duration::from_millis(500),
            max_slew_ppm: 100_000,
            max_rate_change_ppm: 2_000,
            cal_period: Duration::from_millis(20),
            sample_tries: 7,
        }
    }
}

/// What an anchor found. `offset_ns` is mapped − CLOCK_REALTIME (positive: the mapping led).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnchorOutcome {
    /// The mapping lagged by no more than the threshold; it stays continuous and its rate
    /// slews the lag back to the target.
    Slewed { offset_ns: i64 },
    /// The mapping led by no more than the threshold; it was set back at once.
    SetBack { offset_ns: i64 },
    /// The system clock stepped by about `-offset_ns`; the mapping followed it at once.
    Stepped { offset_ns: i64 },
}

/// Counters a shard exports as metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockStats {
    /// Mapped clock − CLOCK_REALTIME at the last anchor, ns (positive: the mapped clock leads).
    pub offset_ns: i64,
    /// Errors beyond the step threshold, either way.
    pub steps: u64,
    /// Leads under the step threshold, each set back at once.
    pub set_backs: u64,
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
    /// The system clock's measured rate: what the mapping extrapolates with.
    rates: RateTracker,
    next_anchor_ticks: u64,
    /// A counter that moves when the system clock is set ([`SetWatch::generation`]).
    sets: Option<FollowedSets>,
    stats: ClockStats,
    /// See [`Clock::unseen_before`].
    unseen_before_ns: u64,
}

struct FollowedSets {
    generation: Arc<AtomicU64>,
    /// The generation the last anchor saw.
    seen: u64,
}

impl<S: TimeSource> Clock<S> {
    /// Calibrates against the system clock: waits `cfg.cal_period` between two samples.
    pub fn calibrate(src: S, cfg: ClockConfig) -> Clock<S> {
        let first = sample(&src, cfg.sample_tries);
        src.pause(cfg.cal_period);
        let second = sample(&src, cfg.sample_tries);
        let limits = RateLimits {
            max_change_ppm: cfg.max_rate_change_ppm,
            plausible_ppm: cfg.max_slew_ppm,
            min_span: cfg.anchor_interval / 2,
        };
        let rates = RateTracker::calibrate(&first, &second, limits)
            .unwrap_or_else(|| RateTracker::fixed(1.0, &second, limits));
        let mut clock = Clock {
            src,
            cfg,
            base_ticks: 0,
            base_ns: 0,
            rate: fixed_point(rates.floor()),
            rates,
            next_anchor_ticks: 0,
            sets: None,
            stats: ClockStats::default(),
            unseen_before_ns: second.utc,
        };
        clock.rebase_on(&second);
        clock.stats.bracket_ns = mul_rate(second.width, clock.rate);
        clock.schedule_next_anchor(second.ticks);
        if clock.src.kind() == SourceKind::ClockGettime {
            tracing::warn!(
                "no invariant TSC with RDTSCP on this CPU: the clock falls back to clock_gettime \
                 (slower reads; see `punctual doctor`)"
            );
        }
        clock
    }

    /// The latest instant before which a deadline may have passed unseen, in no time of this
    /// clock's: its calibration (nothing ran before it), or where the last forward step of the
    /// system clock landed (the instants it jumped over passed at once). A deadline at or
    /// after it passed while this clock ran: whatever made it late was the owner's own work.
    pub fn unseen_before(&self) -> UtcNanos {
        UtcNanos(self.unseen_before_ns)
    }

    /// Makes an anchor due as soon as `generation` moves: pass [`SetWatch::generation`], so
    /// that a set of the system clock is followed at the owner's next `anchor_due` check
    /// rather than up to an anchor interval later. The owner must still be woken to check.
    pub fn follow_sets(&mut self, generation: Arc<AtomicU64>) {
        let seen = generation.load(Ordering::Acquire);
        self.sets = Some(FollowedSets { generation, seen });
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

    /// The current UTC time in nanoseconds, from one tick reading (plain RDTSC: see
    /// [`TimeSource::ticks_now`]).
    #[inline]
    pub fn now(&self) -> UtcNanos {
        self.at(self.src.ticks_now())
    }

    /// Whether `mapped`, a reading of [`Clock::now`] taken just before this call, is ahead of
    /// the system clock (read now, so after `mapped`: a `true` is a real lead). One
    /// `clock_gettime`; the shard asks before it fires, so that a lead that built up since the
    /// last anchor (the system clock slowed down faster than the rate tracker could see)
    /// never fires a timer early.
    pub fn ahead_of_system(&self, mapped: UtcNanos) -> bool {
        mapped.0 > self.src.realtime().0
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

    /// Whether an anchor is due at tick `t`: the interval has passed, or the followed
    /// generation moved (the system clock was set).
    #[inline]
    pub fn anchor_due(&self, t: TscTicks) -> bool {
        t.0 >= self.next_anchor_ticks || self.set_pending()
    }

    #[inline]
    fn set_pending(&self) -> bool {
        self.sets
            .as_ref()
            .is_some_and(|f| f.generation.load(Ordering::Relaxed) != f.seen)
    }

    /// How far behind the system clock the mapping may read while it follows the policy:
    /// twice `lag_target` (the target, plus the brackets' widths and the slew's remainder,
    /// with room to spare). A shard stops waiting on the mapping this long before a
    /// deadline and finishes on the system clock itself (`shard::fire`).
    pub fn lag_allowance(&self) -> Duration {
        self.cfg.lag_target.saturating_mul(2)
    }

    /// UTC of the next anchor, so a parked shard wakes for it.
    pub fn next_anchor_at(&self) -> UtcNanos {
        self.at(TscTicks(self.next_anchor_ticks))
    }

    /// Takes a fresh anchor against the system clock and applies the policy: set back a
    /// lead, slew a lag, follow a step. Callable at any time; an anchor soon after another
    /// corrects the offset and leaves the rate measurement to a longer span.
    pub fn anchor(&mut self) -> AnchorOutcome {
        let was_set = self.take_set();
        let s = sample(&self.src, self.cfg.sample_tries);
        let mapped = self.at(TscTicks(s.ticks)).0;
        let offset_ns = UtcNanos(mapped).signed_diff(UtcNanos(s.utc));
        self.stats.anchors += 1;
        self.stats.offset_ns = offset_ns;
        self.stats.bracket_ns = mul_rate(s.width, self.rate);
        let stepped = offset_ns.unsigned_abs() as u128 > self.cfg.step_threshold.as_nanos();
        if was_set || stepped {
            self.rates.restart(&s);
        } else {
            self.rates.observe(&s);
        }
        let outcome = if stepped {
            self.stats.steps += 1;
            tracing::warn!(
                offset_ms = offset_ns as f64 / 1e6,
                direction = if offset_ns > 0 { "backward" } else { "forward" },
                "system clock stepped; the mapping follows it (deadlines are UTC instants)"
            );
            self.rebase_on(&s);
            if offset_ns < 0 {
                self.unseen_before_ns = self.unseen_before_ns.max(s.utc);
            }
            AnchorOutcome::Stepped { offset_ns }
        } else if offset_ns > 0 {
            self.stats.set_backs += 1;
            tracing::debug!(lead_ns = offset_ns, "clock led the system clock; set back");
            self.rebase_on(&s);
            AnchorOutcome::SetBack { offset_ns }
        } else {
            self.base_ticks = s.ticks;
            self.base_ns = mapped;
            self.rate = self.slewing_rate(offset_ns.unsigned_abs());
            AnchorOutcome::Slewed { offset_ns }
        };
        self.schedule_next_anchor(s.ticks);
        outcome
    }

    /// Whether the followed generation moved since the last anchor; marks it seen.
    fn take_set(&mut self) -> bool {
        match &mut self.sets {
            Some(f) => {
                let now = f.generation.load(Ordering::Acquire);
                let moved = now != f.seen;
                f.seen = now;
                moved
            }
            None => false,
        }
    }

    /// Puts the mapping `lag_target` behind the sample's UTC, at the measured rate.
    fn rebase_on(&mut self, s: &Sample) {
        let target = self.lag_target_ns();
        self.base_ticks = s.ticks;
        self.base_ns = s.utc.saturating_sub(target);
        self.rate = self.slewing_rate(target);
    }

    /// The measured rate, corrected to bring `lag_ns` to the target over the horizon. The
    /// correction removes at most the excess lag within the horizon, so it cannot overshoot
    /// into a lead while anchors come at least that often.
    fn slewing_rate(&self, lag_ns: u64) -> u64 {
        let horizon = self
            .cfg
            .slew_horizon
            .max(self.cfg.anchor_interval * 2)
            .as_secs_f64()
            .max(1e-3);
        let max = self.cfg.max_slew_ppm as f64 * 1e-6;
        let excess_s = (lag_ns as f64 - self.lag_target_ns() as f64) * 1e-9;
        let correction = (excess_s / horizon).clamp(-max, max);
        fixed_point(self.rates.floor() * (1.0 + correction))
    }

    fn lag_target_ns(&self) -> u64 {
        self.cfg.lag_target.as_nanos().min(u64::MAX as u128) as u64
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

/// ns per tick as 32.32 fixed point, rounded down (a slower rate errs towards a lag).
fn fixed_point(ns_per_tick: f64) -> u64 {
    (ns_per_tick * (1u64 << SHIFT) as f64).clamp(1.0, u64::MAX as f64) as u64
}

#[cfg(test)]
mod tests;
