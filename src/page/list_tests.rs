//! The paged timers' key order (`keys.rs`) kept with the index through pages, replaces,
//! cancels and loads: a walk by key shows exactly the timers paged at that moment.

use super::tests::{pager, timer, walk, Model, SECOND, T0};
use super::*;
use crate::runtime::cooperate::on_executor;

/// Everything `p` lists of the tenant from `start` (after it when `after`), by key.
fn listed(p: &Pager, start: &str, after: bool) -> Vec<(String, UtcMicros, u64)> {
    let mut out = Vec::new();
    p.walk_keys("acme", start, after, |k, paged| {
        out.push((k.to_string(), paged.deadline, paged.version));
        true
    });
    out
}

fn expected(model: &Model, start: &str, after: bool) -> Vec<(String, UtcMicros, u64)> {
    model
        .iter()
        .filter(|(k, _)| k.as_str() > start || (!after && k.as_str() == start))
        .map(|(k, m)| (k.clone(), m.0, m.1))
        .collect()
}

/// Pages, replaces and cancels at random, then loads half of the buckets: at each point the
/// walk by key lists exactly the timers still paged, under their last deadline and version,
/// from any start; none that a load put into the wheel, none cancelled, and no other tenant's.
#[test]
fn a_walk_by_key_lists_exactly_the_timers_still_paged() {
    let dir = tempfile::tempdir().expect("tmp");
    on_executor(async {
        let mut p = pager(dir.path(), 4, Disk::default()).await;
        let mut model = Model::new();
        let mut rng = fastrand::Rng::with_seed(11);
        for version in 1..5_000u64 {
            let key = format!("order-{}", rng.u32(0..2_000));
            if version % 7 == 0 {
                assert_eq!(
                    p.remove(timer(&key, b"").identity()).is_some(),
                    model.remove(&key).is_some()
                );
                continue;
            }
            let d = UtcMicros(T0 + 4 * SECOND + rng.u64(0..16 * SECOND));
            p.put(&timer(&key, b"p"), d, version).expect("paged");
            model.insert(key, (d, version, b"p".to_vec()));
        }
        let other = PackedTimer::with_meta("other", "x-9", b"", b"").expect("small");
        p.put(&other, UtcMicros(T0 + 5 * SECOND), 1).expect("paged");
        assert_eq!(p.keys_held().0, model.len() + 1);
        assert_eq!(listed(&p, "", false), expected(&model, "", false));
        assert_eq!(
            listed(&p, "order-1000", true),
            expected(&model, "order-1000", true)
        );
        // Loads up to T0 + 12 s: those timers leave the pages, the rest stay listed.
        let wheel = walk(&mut p, T0 + 8 * SECOND, SECOND / 2).await;
        assert!(!wheel.is_empty(), "some loaded");
        model.retain(|k, _| !wheel.contains_key(k));
        assert!(!model.is_empty(), "some still paged");
        assert_eq!(listed(&p, "", false), expected(&model, "", false));
        assert_eq!(
            listed(&p, "order-15", false),
            expected(&model, "order-15", false)
        );
    });
}

/// The resident set size of this process, in bytes (0 where `/proc` does not say).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn percentile(sorted: &[u128], p: f64) -> u128 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

/// Figure (docs/BENCHMARKS.md): a page of 1,000 paged timers, read by key as a listing
/// reads them (the walk to its first key, then each key's entry for its deadline and
/// version), among `PAGED_N` paged timers of one tenant (default 1,000,000), from 500 random
/// starts; and what the key order costs: its own count of bytes, and the RSS a separate
/// key order of the same keys adds (and its inserts' time, in random order, as a start's
/// recovery makes them), against an owned `BTreeSet<String>` of them.
/// `PAGED_N=10000000 cargo test --release --lib paged_listing_figure -- --ignored --nocapture`
#[test]
#[ignore]
fn paged_listing_figure() {
    let n: usize = std::env::var("PAGED_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("tmp");
    let mut ids: Vec<u32> = (0..n as u32).collect();
    fastrand::Rng::with_seed(3).shuffle(&mut ids);
    let key = |i: u32| format!("order-{i:08}");
    on_executor(async {
        let mut p = pager(dir.path(), 3_600, Disk::default()).await;
        let mut rng = fastrand::Rng::with_seed(5);
        let started = std::time::Instant::now();
        for (v, &i) in ids.iter().enumerate() {
            let d = UtcMicros(T0 + 7_200 * SECOND + rng.u64(0..100 * 86_400 * SECOND));
            p.put(&timer(&key(i), b"p"), d, v as u64 + 1)
                .expect("paged");
            if v % 10_000 == 0 {
                glommio::timer::sleep(Duration::from_micros(10)).await;
            }
        }
        let paging = started.elapsed();
        let mut took = Vec::new();
        for _ in 0..500 {
            let start = key(rng.u32(0..n as u32));
            let t = std::time::Instant::now();
            let mut page = Vec::with_capacity(1_000);
            p.walk_keys("acme", &start, true, |k, paged| {
                page.push((k.to_string(), paged.deadline, paged.version));
                page.len() < 1_000
            });
            took.push(t.elapsed().as_micros());
            assert!(!page.is_empty() || start >= key(n as u32 - 1));
        }
        took.sort_unstable();
        let (held, bytes) = p.keys_held();
        println!(
            "paged {n} in {paging:?}; a page of 1,000: p50 {} µs, p99 {} µs, max {} µs; key order: {:.1} B a key by its count",
            percentile(&took, 0.5),
            percentile(&took, 0.99),
            took.last().copied().unwrap_or(0),
            bytes as f64 / held as f64,
        );
    });
    let sequential: Vec<String> = ids.iter().map(|&i| key(i)).collect();
    let mut rng = fastrand::Rng::with_seed(9);
    let random: Vec<String> = (0..n).map(|_| format!("{:032x}", rng.u128(..))).collect();
    for (shape, names) in [("order-%08d", sequential), ("32 random hex digits", random)] {
        key_order_cost(shape, &names);
    }
}

/// What a key order of `names` (inserted in their order) costs in time and RSS, against an
/// owned `BTreeSet<String>` of them.
fn key_order_cost(shape: &str, names: &[String]) {
    let before = rss();
    let started = std::time::Instant::now();
    let mut keys = super::keys::PagedKeys::default();
    for k in names {
        keys.insert("acme", k);
    }
    let built = started.elapsed();
    let front = rss().saturating_sub(before);
    let before = rss();
    let set: std::collections::BTreeSet<String> = names.iter().cloned().collect();
    let owned = rss().saturating_sub(before);
    let n = names.len() as f64;
    println!(
        "{shape}: {} keys; an insert in random order {:.0} ns; RSS a key: front-coded {:.1} B ({:.1} B by its count), BTreeSet<String> {:.1} B",
        keys.len().min(set.len()),
        built.as_nanos() as f64 / n,
        front as f64 / n,
        keys.bytes() as f64 / n,
        owned as f64 / n,
    );
}
