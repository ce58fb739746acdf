//! The clock against a hand-driven TSC and system clock.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

/// The default target lag, ns.
const TARGET_NS: i64 = 1_000;

#[test]
fn calibration_recovers_the_tick_rate() {
    let (src, clock) = fake_clock();
    src.advance(Duration::from_secs(1));
    let lag = src.realtime().signed_diff(clock.now());
    assert!(
        (0..TARGET_NS + 1_000).contains(&lag),
        "after 1 s the mapping lags by {lag} ns (target {TARGET_NS} ns, never a lead)"
    );
}

#[test]
fn a_lag_is_slewed_out_without_jumping_or_running_backwards() {
    let (src, mut clock) = fake_clock();
    // The system clock steps forward by 20 ms: under the 50 ms threshold, a lag to slew.
    src.step_realtime(20_000_000);
    src.advance(Duration::from_millis(100));
    let before = clock.now();
    assert!(
        matches!(clock.anchor(), AnchorOutcome::Slewed { offset_ns } if offset_ns < -19_000_000)
    );
    assert_eq!(
        clock.now(),
        before,
        "an anchor must not move a lagging clock by itself"
    );
    let offset = run_monotonic(&src, &mut clock, 10);
    assert!(
        (-TARGET_NS - 1_000..=0).contains(&offset),
        "after 10 s of slewing the offset is still {offset} ns"
    );
    assert_eq!(clock.stats().steps, 0);
    assert_eq!(clock.stats().set_backs, 0);
}

#[test]
fn a_lead_under_the_threshold_is_set_back_at_once() {
    let (src, mut clock) = fake_clock();
    src.step_realtime(-49_000_000); // just under the threshold
    src.advance(Duration::from_millis(100));
    assert!(
        matches!(clock.anchor(), AnchorOutcome::SetBack { offset_ns } if offset_ns > 48_000_000)
    );
    assert_eq!(
        src.realtime().signed_diff(clock.now()),
        TARGET_NS,
        "set back to the target lag"
    );
    assert_eq!(clock.stats().steps, 0, "under the threshold: not a step");
    assert_eq!(clock.stats().set_backs, 1);
    let offset = run_monotonic(&src, &mut clock, 2);
    assert!(
        (-TARGET_NS - 1_000..=0).contains(&offset),
        "offset {offset} ns"
    );
}

#[test]
fn slewing_follows_an_ntp_slewed_system_clock() {
    let src = FakeSource::new(START, 3_000);
    src.set_realtime_drift_ppb(200_000); // the system clock runs 200 ppm fast
    let mut clock = Clock::calibrate(src.clone(), ClockConfig::default());
    // Calibration measured the drifting rate already; drift starts before it.
    let offset = run_monotonic(&src, &mut clock, 20);
    assert!(
        (-TARGET_NS - 1_000..=0).contains(&offset),
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
    let lag = src.realtime().signed_diff(clock.now());
    assert!(
        (0..TARGET_NS + 1_000).contains(&lag),
        "after a forward step the clock lags by {lag} ns"
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
    let lag = src.realtime().signed_diff(clock.now());
    assert!(
        (0..TARGET_NS + 1_000).contains(&lag),
        "after a backward step the clock lags by {lag} ns"
    );
    // And it is monotonic again from there on.
    run_monotonic(&src, &mut clock, 1);
}

#[test]
fn a_followed_set_makes_an_anchor_due_at_once_and_is_not_taken_for_a_rate() {
    let (src, mut clock) = fake_clock();
    let generation = Arc::new(AtomicU64::new(7));
    clock.follow_sets(generation.clone());
    walk_never_early(&src, &mut clock, Duration::from_secs(1), SAMPLE, "warm-up");
    src.advance(Duration::from_millis(90));
    assert!(!clock.anchor_due(src.ticks()), "nothing moved yet");
    // A 30 µs step back, as clock_settime to a value read a moment before makes: measured
    // as a rate over its span it would look 300 ppm slow and open a lag.
    src.step_realtime(-30_000);
    generation.fetch_add(1, Ordering::Release);
    assert!(
        clock.anchor_due(src.ticks()),
        "a set makes an anchor due at once"
    );
    assert!(matches!(clock.anchor(), AnchorOutcome::SetBack { .. }));
    assert!(!clock.anchor_due(src.ticks()), "the set was taken");
    let seen = walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(3),
        SAMPLE,
        "after the set",
    );
    assert!(
        seen.max_lag_ns <= TARGET_NS + 1_000,
        "lag up to {} ns after a followed set",
        seen.max_lag_ns
    );
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

// ---- never early against CLOCK_REALTIME ----

/// What a walk saw: lags are CLOCK_REALTIME − mapped, ns (never negative, or the walk fails).
#[derive(Debug, Default)]
struct Walked {
    max_lag_ns: i64,
    last_lag_ns: i64,
}

/// Moves true time on by `dur` in `step` increments, anchoring whenever the clock says one is
/// due, and asserts at every sample, just before and just after each anchor, that the mapped
/// time is not after the system clock: a timer due at the mapped time would not fire early.
fn walk_never_early(
    src: &FakeSource,
    clock: &mut Clock<FakeSource>,
    dur: Duration,
    step: Duration,
    what: &str,
) -> Walked {
    let mut seen = Walked::default();
    let steps = (dur.as_nanos() / step.as_nanos().max(1)) as u64;
    for i in 0..steps {
        src.advance(step);
        let lag = assert_not_early(src, clock, what, i, "between anchors");
        seen.max_lag_ns = seen.max_lag_ns.max(lag);
        if clock.anchor_due(src.ticks()) {
            clock.anchor();
            let lag = assert_not_early(src, clock, what, i, "after an anchor");
            seen.max_lag_ns = seen.max_lag_ns.max(lag);
        }
        seen.last_lag_ns = lag;
    }
    seen
}

fn assert_not_early(
    src: &FakeSource,
    clock: &Clock<FakeSource>,
    what: &str,
    i: u64,
    when: &str,
) -> i64 {
    let lag = src.realtime().signed_diff(clock.now());
    assert!(
        lag >= 0,
        "{what}: the mapped clock leads CLOCK_REALTIME by {} ns {when} (sample {i}); stats {:?}",
        -lag,
        clock.stats()
    );
    lag
}

const SAMPLE: Duration = Duration::from_micros(250);

#[test]
fn small_backward_steps_are_removed_at_once_and_never_lead() {
    for back_ms in [1i64, 10, 40] {
        let (src, mut clock) = fake_clock();
        let what = format!("{back_ms} ms back");
        walk_never_early(&src, &mut clock, Duration::from_secs(1), SAMPLE, &what);
        src.advance(Duration::from_millis(37));
        src.step_realtime(-back_ms * 1_000_000);
        // What the shard does when the set watch reports the step: anchor at once.
        clock.anchor();
        assert_not_early(&src, &clock, &what, 0, "right after the step's anchor");
        let seen = walk_never_early(&src, &mut clock, Duration::from_secs(3), SAMPLE, &what);
        assert!(
            seen.last_lag_ns < 5_000,
            "{what}: lag {} ns after 3 s",
            seen.last_lag_ns
        );
    }
}

#[test]
fn a_backward_step_leads_only_until_the_next_anchor() {
    let (src, mut clock) = fake_clock();
    walk_never_early(&src, &mut clock, Duration::from_secs(1), SAMPLE, "warm-up");
    src.advance(Duration::from_millis(30));
    src.step_realtime(-10_000_000);
    // Nobody tells the clock: until its next anchor it leads by the step, and no more.
    let mut anchored = false;
    while !anchored {
        src.advance(SAMPLE);
        let lead = clock.now().signed_diff(src.realtime());
        assert!(
            lead <= 10_000_000,
            "the lead {lead} ns exceeds the 10 ms step"
        );
        if clock.anchor_due(src.ticks()) {
            clock.anchor();
            anchored = true;
        }
    }
    walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(3),
        SAMPLE,
        "after the anchor that saw the step",
    );
}

#[test]
fn ntp_slew_slow_then_fast_never_leads_and_keeps_the_lag_small() {
    let src = FakeSource::new(START, 2_900);
    // NTP slews the system clock 500 ppm slow, from before calibration (a drop in the rate
    // between anchors is the one thing the clock sees late: see the module doc).
    src.set_realtime_drift_ppb(-500_000);
    let mut clock = Clock::calibrate(src.clone(), ClockConfig::default());
    let slow = walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(10),
        SAMPLE,
        "-500 ppm",
    );
    src.set_realtime_drift_ppb(500_000); // then 500 ppm fast
    let fast = walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(10),
        SAMPLE,
        "+500 ppm",
    );
    assert!(
        slow.max_lag_ns <= TARGET_NS + 1_000,
        "lag up to {} ns under a steady -500 ppm slew",
        slow.max_lag_ns
    );
    // A rise of 1000 ppm is believed one interval late: about two intervals of it, 200 µs.
    assert!(
        fast.max_lag_ns < 250_000,
        "lag up to {} ns after the slew turned to +500 ppm",
        fast.max_lag_ns
    );
    assert!(
        fast.last_lag_ns <= TARGET_NS + 1_000,
        "lag still {} ns 10 s into the +500 ppm slew",
        fast.last_lag_ns
    );
}

#[test]
fn slews_and_small_steps_combined_never_lead_and_the_lag_settles() {
    let src = FakeSource::new(START, 2_900);
    src.set_realtime_drift_ppb(-500_000);
    let mut clock = Clock::calibrate(src.clone(), ClockConfig::default());
    walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(2),
        SAMPLE,
        "slow slew",
    );
    src.advance(Duration::from_millis(61));
    src.step_realtime(-10_000_000);
    clock.anchor();
    walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(2),
        SAMPLE,
        "10 ms back, slow",
    );
    src.set_realtime_drift_ppb(500_000);
    walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(2),
        SAMPLE,
        "fast slew",
    );
    src.advance(Duration::from_millis(13));
    src.step_realtime(20_000_000); // forward, under the threshold: a lag to slew out
    clock.anchor();
    walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(2),
        SAMPLE,
        "20 ms forward",
    );
    src.advance(Duration::from_millis(89));
    src.step_realtime(-1_000_000);
    clock.anchor();
    let seen = walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(6),
        SAMPLE,
        "1 ms back",
    );
    assert!(
        seen.last_lag_ns < 5_000,
        "lag still {} ns 6 s after the last step",
        seen.last_lag_ns
    );
}

#[test]
fn forward_steps_under_the_threshold_are_slewed_out_within_5_s() {
    for ahead_ms in [1i64, 10, 40] {
        let (src, mut clock) = fake_clock();
        let what = format!("{ahead_ms} ms ahead");
        walk_never_early(&src, &mut clock, Duration::from_secs(1), SAMPLE, &what);
        src.advance(Duration::from_millis(37));
        src.step_realtime(ahead_ms * 1_000_000);
        assert!(matches!(clock.anchor(), AnchorOutcome::Slewed { .. }));
        let seen = walk_never_early(&src, &mut clock, Duration::from_secs(5), SAMPLE, &what);
        assert!(
            seen.last_lag_ns <= TARGET_NS + 1_000,
            "{what}: lag still {} ns after 5 s",
            seen.last_lag_ns
        );
    }
}

/// The figure in the module doc: how far the mapped clock trails CLOCK_REALTIME on this host
/// while it anchors as a shard does. Each sample brackets `now()` between two reads of
/// CLOCK_REALTIME; a lead is certain only when `now()` is after the second read.
/// Run: `cargo test --release --lib clock::tests::host_lag_figure -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement (10 s), not a check"]
fn host_lag_figure() {
    let mut clock = Clock::calibrate(HostSource::detect(), ClockConfig::default());
    let mut lags = Vec::new();
    let (mut certain_leads, mut possible_leads) = (0u64, 0u64);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < end {
        if clock.anchor_due(clock.source().ticks()) {
            clock.anchor();
        }
        let before = clock_ns(libc::CLOCK_REALTIME) as i64;
        let mapped = clock.now().0 as i64;
        let after = clock_ns(libc::CLOCK_REALTIME) as i64;
        certain_leads += u64::from(mapped > after);
        possible_leads += u64::from(mapped > before);
        lags.push((before + after) / 2 - mapped);
        std::thread::sleep(Duration::from_micros(200));
    }
    lags.sort_unstable();
    let pct = |p: f64| lags[((lags.len() - 1) as f64 * p) as usize];
    eprintln!(
        "source {}: {} samples; lag (CLOCK_REALTIME − mapped, bracket midpoint) ns: min {} p1 {} \
         p50 {} p99 {} max {}; now() after the second CLOCK_REALTIME read (a certain lead): {}; \
         after the first: {}; stats {:?}",
        clock.kind().as_str(),
        lags.len(),
        pct(0.0),
        pct(0.01),
        pct(0.5),
        pct(0.99),
        pct(1.0),
        certain_leads,
        possible_leads,
        clock.stats()
    );
}

#[test]
fn a_rate_drop_between_anchors_leads_at_most_the_drop_times_the_interval() {
    let src = FakeSource::new(START, 2_900);
    src.set_realtime_drift_ppb(500_000);
    let mut clock = Clock::calibrate(src.clone(), ClockConfig::default());
    walk_never_early(&src, &mut clock, Duration::from_secs(2), SAMPLE, "+500 ppm");
    src.advance(Duration::from_millis(3));
    // The slew ends: the system clock's rate drops by 500 ppm, which the clock sees only at
    // its next anchor. The documented bound: 500 ppm × 100 ms, less the lag in hand.
    src.set_realtime_drift_ppb(0);
    let mut worst_lead = 0i64;
    let mut anchors = 0;
    while anchors < 2 {
        src.advance(SAMPLE);
        worst_lead = worst_lead.max(clock.now().signed_diff(src.realtime()));
        if clock.anchor_due(src.ticks()) {
            clock.anchor();
            anchors += 1;
        }
    }
    assert!(
        worst_lead <= 50_000 - TARGET_NS,
        "a 500 ppm drop led by {worst_lead} ns"
    );
    walk_never_early(
        &src,
        &mut clock,
        Duration::from_secs(3),
        SAMPLE,
        "once the drop was measured",
    );
}
