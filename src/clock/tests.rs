//! The clock against a hand-driven TSC and system clock.

use super::*;

const START: UtcNanos = UtcNanos(1_750_000_000_000_000_000);

fn fake_clock() -> (FakeSource, Clock<FakeSource>) {
    let src = FakeSource::new(START, 2_900); // a 2.9 GHz TSC
    let clock = Clock::calibrate(src.clone(), ClockConfig::default());
    (src, clock)
}

/// Runs the clock for `secs`, reading it every millisecond and anchoring when due, and
/// asserts that it never runs backwards. Returns the last anchor's offset.
fn run_monotonic(src: &FakeSource, clock: &mut Clock<FakeSource>, secs: u64) -> i64 {
    let mut last = clock.now();
    for _ in 0..secs * 1_000 {
        src.advance(Duration::from_millis(1));
        if clock.anchor_due(src.ticks()) {
            clock.anchor();
        }
        let now = clock.now();
        assert!(now >= last, "clock ran backwards: {} -> {}", last.0, now.0);
        last = now;
    }
    clock.stats().offset_ns
}

#[test]
fn calibration_recovers_the_tick_rate() {
    let (src, clock) = fake_clock();
    src.advance(Duration::from_secs(1));
    let err = clock.now().signed_diff(src.realtime());
    assert!(
        err.abs() < 1_000,
        "after 1 s the mapping is off by {err} ns"
    );
    assert!(err <= 0, "the mapping must lag, not lead, UTC: {err} ns");
}

#[test]
fn slewing_removes_a_small_offset_without_jumping_or_running_backwards() {
    let (src, mut clock) = fake_clock();
    // The system clock steps back by 20 ms: under the 50 ms threshold, so it is slewed.
    src.step_realtime(-20_000_000);
    src.advance(Duration::from_millis(100));
    let before = clock.now();
    assert!(
        matches!(clock.anchor(), AnchorOutcome::Slewed { offset_ns } if offset_ns > 19_000_000)
    );
    assert_eq!(
        clock.now(),
        before,
        "an anchor must not move the clock by itself"
    );
    let offset = run_monotonic(&src, &mut clock, 10);
    assert!(
        offset.abs() < 50_000,
        "after 10 s of slewing the offset is still {offset} ns"
    );
    assert_eq!(clock.stats().steps, 0);
}

#[test]
fn slewing_follows_an_ntp_slewed_system_clock() {
    let src = FakeSource::new(START, 3_000);
    src.set_realtime_drift_ppb(200_000); // the system clock runs 200 ppm fast
    let mut clock = Clock::calibrate(src.clone(), ClockConfig::default());
    // Calibration measured the drifting rate already; drift starts before it.
    let offset = run_monotonic(&src, &mut clock, 20);
    assert!(
        offset.abs() < 5_000,
        "offset {offset} ns after 20 s of a 200 ppm slew"
    );
}

#[test]
fn forward_step_is_counted_and_followed() {
    let (src, mut clock) = fake_clock();
    src.step_realtime(3_600_000_000_000); // +1 h
    src.advance(Duration::from_millis(100));
    assert!(matches!(clock.anchor(), AnchorOutcome::Stepped { offset_ns } if offset_ns < 0));
    assert_eq!(clock.stats().steps, 1);
    let err = clock.now().signed_diff(src.realtime());
    assert!(
        err.abs() < 1_000,
        "after a forward step the clock is off by {err} ns"
    );
}

#[test]
fn backward_step_is_counted_and_followed_to_utc() {
    let (src, mut clock) = fake_clock();
    src.advance(Duration::from_millis(100));
    clock.anchor();
    src.step_realtime(-3_600_000_000_000); // -1 h
    src.advance(Duration::from_millis(100));
    assert!(matches!(clock.anchor(), AnchorOutcome::Stepped { offset_ns } if offset_ns > 0));
    assert_eq!(clock.stats().steps, 1);
    let err = clock.now().signed_diff(src.realtime());
    assert!(
        err.abs() < 1_000,
        "after a backward step the clock is off by {err} ns"
    );
    // And it is monotonic again from there on.
    run_monotonic(&src, &mut clock, 1);
}

#[test]
fn small_backward_error_never_runs_the_clock_backwards() {
    let (src, mut clock) = fake_clock();
    src.step_realtime(-49_000_000); // just under the threshold
    let offset = run_monotonic(&src, &mut clock, 15);
    assert!(offset.abs() < 100_000, "offset {offset} ns");
}

#[test]
fn host_fallback_tracks_realtime_with_clock_gettime() {
    let src = HostSource::fallback();
    assert_eq!(src.kind(), SourceKind::ClockGettime);
    let cfg = ClockConfig {
        cal_period: Duration::from_millis(5),
        ..ClockConfig::default()
    };
    let clock = Clock::calibrate(src, cfg);
    let err = clock
        .now()
        .signed_diff(UtcNanos(clock_ns(libc::CLOCK_REALTIME)));
    // A generous bound: this test shares two noisy cores; it checks the mapping, not speed.
    assert!(err.abs() < 50_000_000, "fallback clock is off by {err} ns");
    let a = clock.now();
    let b = clock.now();
    assert!(b >= a);
}

#[test]
fn host_source_detects_the_tsc_that_cpuinfo_reports() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    if cfg!(target_arch = "x86_64") && has("constant_tsc") && has("nonstop_tsc") && has("rdtscp") {
        assert_eq!(HostSource::detect().kind(), SourceKind::Tsc);
    } else {
        assert_eq!(HostSource::detect().kind(), SourceKind::ClockGettime);
    }
}
