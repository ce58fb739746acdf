//! The bench's table and its targets, as ratios to this run's baselines.

use super::*;

pub(super) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub(super) fn print_table(rows: &[Row]) {
    println!(
        "{:<16} {:<4} {:>9} {:>9} {:>5} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>7}",
        "system",
        "wl",
        "n",
        "fired",
        "lost",
        "early",
        "min µs",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "cpu s"
    );
    for r in rows {
        println!(
            "{:<16} {:<4} {:>9} {:>9} {:>5} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>11.1} {:>7.2}",
            r.system, r.workload, r.n, r.fired, r.lost, r.early, r.min_us, r.p50_us, r.p90_us, r.p99_us, r.p999_us, r.max_us, r.cpu_s
        );
    }
}

/// The targets as ratios against baselines measured in this run, printed so that a reader sees
/// them without arithmetic. A ratio whose systems were not run (`--only`) is left out.
pub(super) fn print_ratios(rows: &[Row]) {
    let row = |system: &str, wl: &str| rows.iter().find(|r| r.system == system && r.workload == wl);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::INFINITY };
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!("ratios against this run's baselines:");
    if let (Some(p), Some(f)) = (row("punctual-spin", "W1"), row("floor-spin", "W1")) {
        let r99 = ratio(p.p99_us, f.p99_us);
        let r999 = ratio(p.p999_us, f.p999_us);
        println!(
            "  W1 punctual-spin / floor-spin: p99 {r99:.2}x (target <= 1.2x: {}), p99.9 {r999:.2}x (target <= 2x: {})",
            verdict(r99 <= 1.2),
            verdict(r999 <= 2.0)
        );
    }
    let tokio = [
        "tokio-sleep-ct",
        "tokio-sleep-mt",
        "delayqueue-ct",
        "delayqueue-mt",
    ]
    .iter()
    .filter_map(|s| row(s, "W1"))
    .min_by(|a, b| a.p99_us.total_cmp(&b.p99_us));
    if let (Some(p), Some(t)) = (row("punctual-spin", "W1"), tokio) {
        let r = ratio(t.p99_us, p.p99_us);
        println!(
            "  W1 p99 of tokio's best mode ({}) / punctual-spin: {r:.0}x (target >= 100x: {})",
            t.system,
            verdict(r >= 100.0)
        );
    }
    if let (Some(p), Some(f)) = (row("punctual-spin-2shards", "W2"), row("floor-spin", "W2")) {
        let r = ratio(p.max_us, f.max_us / 2.0);
        println!(
            "  W2 last fire, punctual-spin-2shards / half of floor-spin's: {r:.2}x (target <= 1.2x: {})",
            verdict(r <= 1.2)
        );
    }
    if let (Some(p), Some(f)) = (row("punctual-spin", "W2"), row("floor-spin", "W2")) {
        println!(
            "  W2 last fire, punctual-spin / floor-spin (one thread each): {:.2}x",
            ratio(p.max_us, f.max_us)
        );
    }
    // The spin window's settings: lateness beside the CPU it costs, against the fixed window.
    if let Some(base) = row("punctual-spin", "W1") {
        for s in ["punctual-adaptive", "punctual-nospin"] {
            if let Some(r) = row(s, "W1") {
                println!(
                    "  W1 {s} / punctual-spin: p99 {:.2}x, p99.9 {:.2}x, max {:.2}x, cpu {:.2}x",
                    ratio(r.p99_us, base.p99_us),
                    ratio(r.p999_us, base.p999_us),
                    ratio(r.max_us, base.max_us),
                    ratio(r.cpu_s, base.cpu_s)
                );
            }
        }
    }
}
