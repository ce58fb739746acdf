//! The spin window: how long before a deadline a shard stops parking and spins on the TSC.
//!
//! A park ends late by the executor's wake-up latency: the kernel's timer, the scheduler, and
//! with glommio its ring and `membarrier` (`park.rs`). A shard that parks until `deadline −
//! window` and then spins fires on time whenever that latency stays under the window; every
//! microsecond of window beyond the latency is CPU spent for nothing.
//!
//! - **Fixed**: the window is what the operator set (`--spin-us`, `EngineBuilder::spin`).
//! - **Adaptive** (`EngineBuilder::adaptive_spin`): the shard measures each park that ran to
//!   its timeout (how far past the intended wake it resumed) and sets the window to the recent
//!   p99.9 of those overshoots plus [`MARGIN`], within `[MIN_WINDOW, max]`. It rises at once on
//!   a sample above the window (the next timer must not pay for the slow wake twice) and falls
//!   only at the end of a round of [`ROUND`] samples, to that round's p99.9: a lone fast round
//!   cannot lower it below what the host showed in the last [`ROUND`] parks.
//!
//! Cost: one subtraction and two compares per park; no allocation.

use std::time::Duration;

/// Parks per round: the window falls at most once a round, to the round's p99.9 (its second
/// largest overshoot: 0.1% of 1,024 is one sample).
pub(crate) const ROUND: u32 = 1024;

/// Added to the measured overshoot: a spin turn, the fire pass's start, and the TSC's jitter.
pub(crate) const MARGIN: Duration = Duration::from_micros(10);

/// The least an adaptive window falls to: below it, one preemption of the shard's thread makes
/// a timer late.
pub(crate) const MIN_WINDOW: Duration = Duration::from_micros(20);

/// A shard's spin window, fixed or following its measured wake-up latency.
#[derive(Clone, Debug)]
pub(crate) struct SpinWindow {
    window: Duration,
    adaptive: Option<Adaptive>,
}

#[derive(Clone, Debug)]
struct Adaptive {
    max: Duration,
    /// This round's largest and second-largest overshoot, and its sample count.
    top: [Duration; 2],
    samples: u32,
}

impl SpinWindow {
    /// Always `window`; zero turns spinning off.
    pub fn fixed(window: Duration) -> SpinWindow {
        SpinWindow {
            window,
            adaptive: None,
        }
    }

    /// Follows the measured wake-up latency, never above `max`. It starts at `max` (nothing is
    /// measured yet) and falls after the first round. A zero `max` turns spinning off.
    pub fn adaptive(max: Duration) -> SpinWindow {
        SpinWindow {
            window: max,
            adaptive: Some(Adaptive {
                max,
                top: [Duration::ZERO; 2],
                samples: 0,
            }),
        }
    }

    /// Whether the window follows the measured latency (and so wants [`SpinWindow::parked`]).
    pub fn is_adaptive(&self) -> bool {
        self.adaptive.is_some()
    }

    /// How long before a deadline to stop parking.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// A park that was to end at `intended` resumed at `resumed` (both on the shard's clock, in
    /// ns). A park that ended early (a ring wake-up) says nothing of the latency and is ignored.
    pub fn parked(&mut self, intended: u64, resumed: u64) {
        let Some(a) = self.adaptive.as_mut() else {
            return;
        };
        let Some(over) = resumed.checked_sub(intended) else {
            return;
        };
        let over = Duration::from_nanos(over);
        if over > a.top[0] {
            a.top = [over, a.top[0]];
        } else if over > a.top[1] {
            a.top[1] = over;
        }
        let want = |over: Duration| (over + MARGIN).clamp(MIN_WINDOW.min(a.max), a.max);
        if want(over) > self.window {
            self.window = want(over);
        }
        a.samples += 1;
        if a.samples >= ROUND {
            self.window = want(a.top[1]);
            a.top = [Duration::ZERO; 2];
            a.samples = 0;
        }
    }
}

#[cfg(test)]
#[path = "spin_tests.rs"]
mod tests;
