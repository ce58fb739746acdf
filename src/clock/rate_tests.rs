use super::*;

/// Calibrated at 1 ns per tick, exactly.
fn tracker() -> RateTracker {
    let a = Sample {
        ticks: 0,
        utc: 0,
        width: 0,
    };
    let b = Sample {
        ticks: 20_000_000,
        utc: 20_000_000,
        width: 0,
    };
    let limits = RateLimits {
        max_change_ppm: 2_000,
        plausible_ppm: 100_000,
        min_span: Duration::from_millis(50),
    };
    RateTracker::calibrate(&a, &b, limits).expect("ticks moved")
}

/// Feeds spans of 100 ms of ticks that advance UTC by the given ns each.
fn feed(t: &mut RateTracker, spans: &[u64]) {
    for &utc in spans {
        let from = t.from;
        t.observe(&Sample {
            ticks: from.ticks + 100_000_000,
            utc: from.utc + utc,
            width: 0,
        });
    }
}

#[test]
fn a_steady_slew_is_tracked() {
    let mut t = tracker();
    feed(&mut t, &[99_950_000, 99_950_000]); // -500 ppm
    assert!((t.floor() - 0.9995).abs() < 1e-12, "floor {}", t.floor());
}

#[test]
fn a_rising_rate_is_believed_one_span_late_a_falling_one_at_once() {
    let mut t = tracker();
    feed(&mut t, &[100_050_000]); // +500 ppm
    assert_eq!(t.floor(), 1.0, "a rise waits for a second span");
    feed(&mut t, &[100_050_000]);
    assert!((t.floor() - 1.0005).abs() < 1e-12, "floor {}", t.floor());
    feed(&mut t, &[99_900_000]); // -1000 ppm: a fall of 1500 ppm, within the band
    assert!((t.floor() - 0.999).abs() < 1e-12, "floor {}", t.floor());
}

#[test]
fn a_step_inside_a_span_does_not_move_the_rate() {
    let mut t = tracker();
    feed(&mut t, &[99_000_000, 100_000_000]); // 1 ms back inside the first span
    assert_eq!(t.floor(), 1.0);
    feed(&mut t, &[101_000_000, 100_000_000]); // 1 ms forward
    assert_eq!(t.floor(), 1.0);
    feed(&mut t, &[60_000_000, 100_000_000]); // 40 ms back: beyond the plausible band
    assert_eq!(t.floor(), 1.0);
}

#[test]
fn a_fast_slew_is_accepted_once_a_second_span_confirms_it() {
    let mut t = tracker();
    feed(&mut t, &[99_000_000]); // -10,000 ppm: a step, or a fast slew
    assert_eq!(t.floor(), 1.0);
    feed(&mut t, &[99_000_000]);
    assert!((t.floor() - 0.99).abs() < 1e-12, "floor {}", t.floor());
}

#[test]
fn a_short_span_is_left_open_and_a_restart_discards_it() {
    let mut t = tracker();
    let from = t.from;
    let short = Sample {
        ticks: from.ticks + 10_000_000,
        utc: from.utc + 9_000_000,
        width: 0,
    };
    t.observe(&short);
    assert_eq!(t.from, from, "a 10 ms span is not measured");
    t.restart(&short);
    assert_eq!(t.from, short);
    assert_eq!(t.floor(), 1.0);
}
