//! A bracketed reading: the system clock paired with the tick counter.
//!
//! One try reads the ticks, CLOCK_REALTIME, the ticks again. The UTC reading is paired with
//! the *second* tick reading: the system clock was read before that tick, so at that tick it
//! reads at least `utc`, and at most `utc` plus the bracket's width. A mapping built on a
//! sample therefore errs towards lagging the system clock, never towards leading it. Of a few
//! tries the narrowest is kept (an interrupt or a preempted vCPU widens a bracket).

use super::source::TimeSource;

/// One bracketed reading: UTC paired with the tick read just after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Sample {
    pub ticks: u64,
    /// CLOCK_REALTIME, ns: at `ticks` the system clock read between `utc` and `utc` plus the
    /// width.
    pub utc: u64,
    /// Width of the bracket, in ticks.
    pub width: u64,
}

/// The narrowest of `tries` (tick, UTC, tick) brackets.
pub(super) fn sample<S: TimeSource>(src: &S, tries: u32) -> Sample {
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
