//! Durable end-to-end lateness under churn (run: `cargo bench --bench churn`, or
//! `cargo bench --bench churn -- --quick` for the CI-sized run).
//!
//! The workload of `tests/serve_churn.rs` at full size, against the release binary: 4 tenants
//! × 12,500 timers registered over HTTP in batches of 1,000 from 4 keep-alive connections
//! (`delay_ms` uniform 1,000–10,000, ~60-byte JSON payloads), then from 8 connections 5,000
//! `DELETE`s and 2,500 `PUT`s (new `delay_ms` 1,000–6,000) on random keys. `punctual serve
//! --redis … --shards 2 --pinning none --spin-us 0`, Redis started here (append-only file,
//! `appendfsync always`, or `everysec` with `-- --everysec`).
//!
//! Lateness is measured two ways for every stream entry: (a) `fired_at_us − fire_at_us` as
//! the entry says, and (b) when a consumer blocked in `XREAD BLOCK` on the tenants' streams
//! received it (its own CLOCK_REALTIME) − the deadline: what an application sees. Missing and
//! duplicate entries are counted against the client's model of what it was told (see
//! `tests/support/churn/`); the consumer is `churn/consumer.rs`.
//!
//! Rows: punctual with churn; punctual without the churn phase (the in-run baseline); and what
//! teams run today, a Redis sorted-set poller: `ZADD` with the deadline as score (plus the
//! record in a hash, in one `MULTI`), and a loop that every 1 ms runs a Lua script that takes
//! the due members (`ZRANGEBYSCORE … LIMIT 0 1000` against Redis's `TIME`), `ZREM`s them and
//! `XADD`s each to the same stream format, so (a) and (b) mean the same for it. Its cancels are
//! `ZREM`, its reschedules `ZADD` (replacing the score); it is `churn/zset.rs`.
//!
//! Targets reported against: p99 ≤ 2 ms and max ≤ 20 ms.

#[path = "../tests/api_support/mod.rs"]
mod api_support;
#[path = "../tests/support/churn/mod.rs"]
mod churn;
#[path = "../tests/support/keepalive.rs"]
mod keepalive;
#[path = "../tests/support/redis_server.rs"]
mod redis_server;

#[path = "churn/consumer.rs"]
mod consumer;
#[path = "churn/zset.rs"]
mod zset;

use churn::{Check, Http, Plan, Spec};
use consumer::Consumer;
use redis_server::RedisServer;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zset::{start_poller, Zset};

const TARGET_P99_US: i64 = 2_000;
const TARGET_MAX_US: i64 = 20_000;

fn spec(quick: bool) -> Spec {
    let full = Spec {
        rounds: 1,
        settle_ms: None,
        tenants: 4,
        timers_per_tenant: 12_500,
        batch: 1_000,
        register_conns: 4,
        delay_ms: (1_000, 10_000),
        churn_conns: 8,
        deletes: 5_000,
        puts: 2_500,
        put_delay_ms: (1_000, 6_000),
        seed: 0x00c0_ffee_7153,
    };
    if quick {
        Spec {
            timers_per_tenant: 2_500,
            batch: 500,
            delay_ms: (1_000, 4_000),
            deletes: 1_000,
            puts: 500,
            put_delay_ms: (1_000, 3_000),
            ..full
        }
    } else {
        full
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum System {
    Punctual,
    ZsetPoller,
}

/// One scenario's figures.
struct Row {
    name: String,
    registered_per_s: f64,
    churn_ops_per_s: Option<f64>,
    check: Check,
    /// Consumer receive time − deadline, µs, sorted.
    received_us: Vec<i64>,
    /// punctual's `/metrics` at the end: fired total and pending, summed over the shards.
    metrics: Option<(Option<f64>, Option<f64>)>,
}

/// Redis's `appendfsync` for the run: `always` (default: every acknowledged write is on disk,
/// so a stream consumer's reply waits for the fsync too) or `everysec` (`--everysec`).
fn fsync_policy() -> &'static str {
    if std::env::args().any(|a| a == "--everysec") {
        "everysec"
    } else {
        "always"
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let spec = spec(quick);
    let command = match (quick, fsync_policy()) {
        (true, "everysec") => "cargo bench --bench churn -- --quick --everysec",
        (true, _) => "cargo bench --bench churn -- --quick",
        (false, "everysec") => "cargo bench --bench churn -- --everysec",
        (false, _) => "cargo bench --bench churn",
    };
    println!("{command}");
    println!("{}", host());
    println!(
        "workload: {} tenants × {} timers in batches of {} from {} keep-alive connections, delay_ms {}–{}; \
         then {} DELETE + {} PUT (delay_ms {}–{}) on random keys from {} connections; seed {}",
        spec.tenants,
        spec.timers_per_tenant,
        spec.batch,
        spec.register_conns,
        spec.delay_ms.0,
        spec.delay_ms.1,
        spec.deletes,
        spec.puts,
        spec.put_delay_ms.0,
        spec.put_delay_ms.1,
        spec.churn_conns,
        spec.seed,
    );
    let rows = vec![
        scenario("punctual, churn", &spec, System::Punctual),
        scenario(
            "punctual, no churn",
            &spec.without_churn(),
            System::Punctual,
        ),
        scenario("zset poller, churn", &spec, System::ZsetPoller),
        scenario(
            "zset poller, no churn",
            &spec.without_churn(),
            System::ZsetPoller,
        ),
    ];
    print_table(&rows);
    println!("{command}");
}

fn host() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let redis = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("redis-server --version failed: {e}"));
    format!(
        "host: {cpus} CPUs ({cpu}); {redis}; appendonly yes, appendfsync {}\n\
         punctual: release binary, serve --shards 2 --pinning none --spin-us 0",
        fsync_policy()
    )
}

fn scenario(name: &str, spec: &Spec, system: System) -> Row {
    eprintln!("== {name}");
    let redis = RedisServer::start_with_fsync(fsync_policy());
    let url = redis.url();
    let consumer = Consumer::start(&redis, &spec.tenants());
    let plan = Plan::new(spec);
    let stop = Arc::new(AtomicBool::new(false));
    let (out, server, poller) = match system {
        System::Punctual => {
            let server = api_support::Server::start(&["--redis", &url, "--shards", "2"]);
            let out = churn::run(spec, &plan, || Http::new(server.addr));
            (out, Some(server), None)
        }
        System::ZsetPoller => {
            let poller = start_poller(&redis, stop.clone());
            let version = AtomicU64::new(0);
            let out = churn::run(spec, &plan, || Zset::connect(&redis, &version));
            (out, None, Some(poller))
        }
    };
    let last = out.model.last_deadline_us();
    std::thread::sleep(Duration::from_micros(
        (last + 1_000_000).saturating_sub(churn::now_us()),
    ));
    let mut con = redis.client().expect("redis client");
    let streams = churn::collect(
        &mut con,
        spec,
        &out.model,
        Instant::now() + Duration::from_secs(20),
    );
    let check = churn::check(&out.model, &streams);
    let received_us = consumer.finish(check.entries);
    // punctual's own count: fired in memory versus written to the streams.
    let metrics = server.as_ref().map(|s| {
        let text = String::from_utf8_lossy(&s.req("GET", "/metrics", "").body).into_owned();
        (
            churn::metric_sum(&text, "punctual_timers_fired_total"),
            churn::metric_sum(&text, "punctual_timers_pending"),
        )
    });
    stop.store(true, Ordering::Release);
    if poller.is_some_and(|p| p.join().is_err()) {
        eprintln!("the poller failed; its figures are partial");
    }
    let registrations = (spec.rounds * spec.tenants * spec.timers_per_tenant) as f64;
    let churn_ops = (spec.rounds * (spec.deletes + spec.puts)) as f64;
    eprintln!("{check}");
    Row {
        name: name.to_string(),
        registered_per_s: registrations / out.register_secs,
        churn_ops_per_s: (churn_ops > 0.0).then(|| churn_ops / out.churn_secs),
        check,
        received_us,
        metrics,
    }
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<22} {:<26} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>5} {:>5}",
        "system",
        "lateness (ms)",
        "p50",
        "p99",
        "p99.9",
        "max",
        "count",
        ">100ms",
        "missing",
        "dup",
        "other"
    );
    for r in rows {
        let other = r.check.forbidden.len()
            + r.check.unknown.len()
            + r.check.wrong_record.len()
            + r.check.early.len();
        for (what, values) in [
            ("(a) fired_at − fire_at", &r.check.lateness_us),
            ("(b) XREAD received − due", &r.received_us),
        ] {
            let q = |p| churn::quantile(values, p).map_or("-".into(), ms);
            println!(
                "{:<22} {:<26} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>5} {:>5}",
                r.name,
                what,
                q(0.5),
                q(0.99),
                q(0.999),
                q(1.0),
                values.len(),
                values.iter().filter(|&&l| l > 100_000).count(),
                r.check.missing.len(),
                r.check.duplicates.len(),
                other,
            );
        }
    }
    println!();
    for r in rows {
        let churn = r
            .churn_ops_per_s
            .map_or(String::new(), |c| format!("; churn {c:.0} requests/s"));
        let metrics = match r.metrics {
            Some((fired, pending)) => format!(
                "; /metrics: {} fired, {} pending",
                fired.map_or("?".into(), |f| format!("{f:.0}")),
                pending.map_or("?".into(), |p| format!("{p:.0}")),
            ),
            None => String::new(),
        };
        println!(
            "{:<22} registration {:.0} timers/s acknowledged{churn}{metrics}",
            r.name, r.registered_per_s
        );
    }
    println!();
    println!("targets: p99 ≤ 2 ms, max ≤ 20 ms");
    for r in rows {
        for (what, values) in [("(a)", &r.check.lateness_us), ("(b)", &r.received_us)] {
            let p99 = churn::quantile(values, 0.99).unwrap_or(i64::MAX);
            let max = values.last().copied().unwrap_or(i64::MAX);
            println!(
                "{:<22} {what} p99 {} ({}), max {} ({})",
                r.name,
                ms(p99),
                verdict(p99 <= TARGET_P99_US),
                ms(max),
                verdict(max <= TARGET_MAX_US)
            );
        }
    }
}

fn ms(us: i64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}
