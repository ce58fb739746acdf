//! Where the clock's readings come from: a tick counter and the system's UTC clock.
//!
//! [`HostSource`] reads the TSC with RDTSCP when the CPU has an invariant TSC, and otherwise
//! falls back to `clock_gettime(CLOCK_MONOTONIC)` nanoseconds as its ticks. Either way UTC
//! comes from `clock_gettime(CLOCK_REALTIME)`. [`FakeSource`] lets tests drive both by hand.

use crate::units::{TscTicks, UtcNanos};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The readings a [`super::Clock`] needs. Implementations are cheap to call and `Send`, so a
/// shard can own one.
pub trait TimeSource: Send + 'static {
    /// A reading of the tick counter: strictly a function of elapsed time at a fixed rate.
    /// Serialising where that matters (RDTSCP): calibration and anchors pair it with
    /// CLOCK_REALTIME, so it must not execute before the instructions around it.
    fn ticks(&self) -> TscTicks;
    /// A reading for `Clock::now()`: may execute a little before the instructions that precede
    /// it (plain RDTSC), so it can only read an earlier tick, which maps to an earlier time and
    /// can make a fire later, never earlier. Defaults to [`TimeSource::ticks`].
    #[inline]
    fn ticks_now(&self) -> TscTicks {
        self.ticks()
    }
    /// The system's UTC clock (CLOCK_REALTIME), which may be slewed or stepped by NTP.
    fn realtime(&self) -> UtcNanos;
    /// Lets `dur` of time pass (calibration waits between its two samples).
    fn pause(&self, dur: Duration);
    /// What the ticks are, for logs and metrics.
    fn kind(&self) -> SourceKind;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// RDTSCP on a CPU with an invariant TSC.
    Tsc,
    /// `clock_gettime(CLOCK_MONOTONIC)`: no invariant TSC on this CPU, or not x86-64.
    ClockGettime,
    /// A test's hand-driven source.
    Fake,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Tsc => "tsc",
            SourceKind::ClockGettime => "clock_gettime",
            SourceKind::Fake => "fake",
        }
    }
}

/// The host's clocks. Copy-able and stateless: every shard makes its own.
#[derive(Clone, Copy, Debug)]
pub struct HostSource {
    use_tsc: bool,
}

impl HostSource {
    /// The TSC when the CPU reports it invariant and supports RDTSCP; else clock_gettime.
    pub fn detect() -> HostSource {
        HostSource {
            use_tsc: invariant_tsc_available(),
        }
    }

    /// clock_gettime even when a TSC is there (for tests and for `--clock clock_gettime`).
    pub fn fallback() -> HostSource {
        HostSource { use_tsc: false }
    }
}

impl TimeSource for HostSource {
    #[inline]
    fn ticks(&self) -> TscTicks {
        if self.use_tsc {
            TscTicks(rdtscp())
        } else {
            TscTicks(clock_ns(libc::CLOCK_MONOTONIC))
        }
    }

    #[inline]
    fn ticks_now(&self) -> TscTicks {
        if self.use_tsc {
            TscTicks(rdtsc())
        } else {
            TscTicks(clock_ns(libc::CLOCK_MONOTONIC))
        }
    }

    #[inline]
    fn realtime(&self) -> UtcNanos {
        UtcNanos(clock_ns(libc::CLOCK_REALTIME))
    }

    fn pause(&self, dur: Duration) {
        std::thread::sleep(dur);
    }

    fn kind(&self) -> SourceKind {
        if self.use_tsc {
            SourceKind::Tsc
        } else {
            SourceKind::ClockGettime
        }
    }
}

/// Nanoseconds of `clock`; 0 if the call fails (it cannot for these clock ids).
#[inline]
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and the clock
    // ids used here (REALTIME, MONOTONIC) exist on every Linux kernel.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc_available() -> bool {
    use std::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86-64 CPU; leaf 0x8000_0000 reports the highest extended
    // leaf, and we only query leaves at or below it.
    #[allow(unused_unsafe)]
    let (max_ext, ext1, power) = unsafe {
        let max_ext = __cpuid(0x8000_0000).eax;
        let ext1 = if max_ext >= 0x8000_0001 {
            __cpuid(0x8000_0001).edx
        } else {
            0
        };
        let power = if max_ext >= 0x8000_0007 {
            __cpuid(0x8000_0007).edx
        } else {
            0
        };
        (max_ext, ext1, power)
    };
    let rdtscp = ext1 & (1 << 27) != 0;
    let invariant = power & (1 << 8) != 0;
    max_ext >= 0x8000_0007 && rdtscp && invariant
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc_available() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtscp() -> u64 {
    let mut aux = 0u32;
    // SAFETY: only called when `invariant_tsc_available()` found RDTSCP in CPUID
    // (leaf 0x8000_0001, EDX bit 27); `aux` is a valid place for the processor id.
    unsafe { std::arch::x86_64::__rdtscp(&mut aux) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtscp() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC is part of the x86-64 baseline; it is only called when
    // `invariant_tsc_available()` found an invariant TSC, and it reads no memory.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// A source whose ticks and UTC move only when a test says so.
///
/// Ticks advance at `ticks_per_us` per microsecond of `pause`/`advance`. The system clock can
/// be stepped (`step_realtime`) and slewed (`set_realtime_drift_ppb`) independently, as NTP
/// does to CLOCK_REALTIME while the TSC runs on at its constant rate.
#[derive(Clone)]
pub struct FakeSource {
    inner: Arc<FakeInner>,
}

struct FakeInner {
    /// Elapsed true time, ns.
    elapsed_ns: AtomicU64,
    /// UTC at elapsed 0 if the current drift had always applied, ns; steps and drift changes
    /// move it so that the system clock stays continuous across a drift change.
    realtime_base: AtomicU64,
    /// Tick rate in ticks per 1000 ns (so a 2.5 GHz TSC is 2500).
    ticks_per_us: u64,
    /// Error of the system clock's rate against true time, in parts per billion (negative:
    /// the system clock runs slow).
    realtime_drift_ppb: AtomicI64,
}

impl FakeSource {
    pub fn new(utc_start: UtcNanos, ticks_per_us: u64) -> FakeSource {
        FakeSource {
            inner: Arc::new(FakeInner {
                elapsed_ns: AtomicU64::new(0),
                realtime_base: AtomicU64::new(utc_start.0),
                ticks_per_us,
                realtime_drift_ppb: AtomicI64::new(0),
            }),
        }
    }

    pub fn advance(&self, dur: Duration) {
        self.inner
            .elapsed_ns
            .fetch_add(dur.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Steps the system clock by `delta_ns` (negative: backwards).
    pub fn step_realtime(&self, delta_ns: i64) {
        let base = self.inner.realtime_base.load(Ordering::SeqCst) as i64;
        self.inner
            .realtime_base
            .store((base + delta_ns) as u64, Ordering::SeqCst);
    }

    /// Makes the system clock run fast (positive) or slow (negative) by `ppb` parts per
    /// billion from here on, as an NTP slew does. The system clock does not jump.
    pub fn set_realtime_drift_ppb(&self, ppb: i64) {
        let elapsed = self.inner.elapsed_ns.load(Ordering::SeqCst);
        let now = self.realtime().0 as i128;
        // Choose the base so that `realtime()` under the new drift reads `now` at `elapsed`.
        let base = now - elapsed as i128 - skew_ns(elapsed, ppb) as i128;
        self.inner
            .realtime_base
            .store(base as u64, Ordering::SeqCst);
        self.inner.realtime_drift_ppb.store(ppb, Ordering::SeqCst);
    }
}

/// `elapsed_ns × ppb / 1e9`, rounded towards minus infinity.
fn skew_ns(elapsed_ns: u64, ppb: i64) -> i64 {
    (elapsed_ns as i128 * ppb as i128).div_euclid(1_000_000_000) as i64
}

impl TimeSource for FakeSource {
    fn ticks(&self) -> TscTicks {
        let ns = self.inner.elapsed_ns.load(Ordering::SeqCst) as u128;
        TscTicks((ns * self.inner.ticks_per_us as u128 / 1_000) as u64)
    }

    fn realtime(&self) -> UtcNanos {
        let ns = self.inner.elapsed_ns.load(Ordering::SeqCst);
        let drift = self.inner.realtime_drift_ppb.load(Ordering::SeqCst);
        let base = self.inner.realtime_base.load(Ordering::SeqCst) as i64;
        UtcNanos((base + ns as i64 + skew_ns(ns, drift)) as u64)
    }

    fn pause(&self, dur: Duration) {
        self.advance(dur);
    }

    fn kind(&self) -> SourceKind {
        SourceKind::Fake
    }
}
