use super::*;

const US: u64 = 1_000;

#[test]
fn a_fixed_window_never_moves() {
    let mut w = SpinWindow::fixed(Duration::from_micros(100));
    for i in 0..3 * ROUND as u64 {
        w.parked(i * 1_000 * US, i * 1_000 * US + 900 * US);
    }
    assert_eq!(w.window(), Duration::from_micros(100));
}

#[test]
fn an_adaptive_window_falls_to_the_round_s_p99_9_and_rises_at_once() {
    let max = Duration::from_micros(500);
    let mut w = SpinWindow::adaptive(max);
    assert_eq!(w.window(), max, "nothing measured yet");
    // A round of 40 µs wakes with one 90 µs outlier: p99.9 of 1,024 is the second largest.
    for i in 0..ROUND as u64 - 1 {
        w.parked(i * 1_000 * US, i * 1_000 * US + 40 * US);
    }
    assert_eq!(w.window(), max, "no fall before the round ends");
    w.parked(0, 90 * US);
    assert_eq!(w.window(), Duration::from_micros(40) + MARGIN);
    // One slow wake raises it before the round ends.
    w.parked(0, 200 * US);
    assert_eq!(w.window(), Duration::from_micros(200) + MARGIN);
    // Never above max, never below the floor.
    w.parked(0, 10_000 * US);
    assert_eq!(w.window(), max);
    for _ in 0..2 * ROUND {
        w.parked(5 * US, 5 * US);
    }
    assert_eq!(w.window(), MIN_WINDOW);
}

#[test]
fn a_park_ended_early_by_a_wake_up_is_not_a_sample() {
    let mut w = SpinWindow::adaptive(Duration::from_micros(500));
    for _ in 0..ROUND {
        w.parked(1_000 * US, 10 * US);
    }
    assert_eq!(
        w.window(),
        Duration::from_micros(500),
        "no samples, no fall"
    );
}

#[test]
fn an_adaptive_window_of_zero_stays_off() {
    let mut w = SpinWindow::adaptive(Duration::ZERO);
    for _ in 0..ROUND {
        w.parked(0, 300 * US);
    }
    assert_eq!(w.window(), Duration::ZERO);
}
