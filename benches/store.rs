//! Durable-store figures, printed as plain lines (run: `cargo bench --bench store`):
//!
//! 1. durable registrations/s (acknowledged by Redis), next to `redis-benchmark -q -P 64 -t
//!    zadd` against the same redis-server in the same run, and what each costs Redis: commands,
//!    bytes received and Redis CPU per timer (from `INFO`), beside the same figures for
//!    `redis-benchmark`'s own `HSET`s;
//! 2. a burst of 100,000 timers due in the same millisecond: time until all are in the stream;
//! 3. lateness of durable fires: the stream entry's Redis timestamp (ms) minus the deadline;
//! 4. recovery of 1,000,000 pending timers: start to every shard loaded and ready.
//!
//! `PUNCTUAL_BENCH_SCALE=0.1` shrinks every count tenfold (quick runs on shared hosts).

#[path = "../tests/support/redis_server.rs"]
mod redis_server;
#[path = "store/registrations.rs"]
mod registrations;

use punctual::UtcMicros;
use redis_server::RedisServer;
use registrations::{engine, register, PRODUCERS, WINDOW};
use std::time::{Duration, Instant};

fn scale(n: u64) -> u64 {
    let s: f64 = std::env::var("PUNCTUAL_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    ((n as f64 * s) as u64).max(1)
}

fn xlen(con: &mut redis::Connection, tenant: &str) -> u64 {
    redis::cmd("XLEN")
        .arg(format!("punctual:fired:{{{tenant}}}"))
        .query(con)
        .unwrap_or(0)
}

/// What Redis has done so far, from `INFO`: CPU seconds (user + system), bytes received,
/// commands, and `(command, calls, µs)` per command.
struct RedisWork {
    cpu_s: f64,
    net_in: u64,
    commands: u64,
    per_command: Vec<(String, u64, u64)>,
}

impl RedisWork {
    fn sample(con: &mut redis::Connection) -> RedisWork {
        let info: String = redis::cmd("INFO")
            .arg("everything")
            .query(con)
            .unwrap_or_default();
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or("0")
                .trim()
                .to_string()
        };
        let per_command = info
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let get = |k: &str| {
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                Some((name.to_string(), get("calls"), get("usec")))
            })
            .collect();
        RedisWork {
            cpu_s: field("used_cpu_user").parse::<f64>().unwrap_or(0.0)
                + field("used_cpu_sys").parse::<f64>().unwrap_or(0.0),
            net_in: field("total_net_input_bytes").parse().unwrap_or(0),
            commands: field("total_commands_processed").parse().unwrap_or(0),
            per_command,
        }
    }

    /// Per unit of work (`n` timers or operations) between `self` and `later`, as one line.
    fn per(&self, later: &RedisWork, n: u64, what: &str) -> String {
        let n = n.max(1) as f64;
        let mut commands: Vec<String> = later
            .per_command
            .iter()
            .filter_map(|(name, calls, usec)| {
                let (c0, u0) = self
                    .per_command
                    .iter()
                    .find(|(n0, _, _)| n0 == name)
                    .map_or((0, 0), |&(_, c, u)| (c, u));
                let calls = calls.saturating_sub(c0);
                (calls > 0 && name != "info").then(|| {
                    format!(
                        "{name} {:.3}/{what} {:.2} µs each",
                        calls as f64 / n,
                        usec.saturating_sub(u0) as f64 / calls as f64
                    )
                })
            })
            .collect();
        commands.sort();
        format!(
            "Redis CPU {:.2} µs/{what}, {:.1} bytes in/{what}, {:.3} commands/{what} ({})",
            (later.cpu_s - self.cpu_s) * 1e6 / n,
            later.net_in.saturating_sub(self.net_in) as f64 / n,
            later.commands.saturating_sub(self.commands) as f64 / n,
            commands.join("; ")
        )
    }
}

/// The payload of every timer this bench registers.
fn order(_: u64) -> Vec<u8> {
    b"{\"order\":1}".to_vec()
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// `redis-benchmark -q -P 64 -t <test> -n <n>` (plus `extra`) against `port`: its summary line.
fn redis_benchmark(port: u16, test: &str, n: u64, extra: &[&str]) -> String {
    let out = std::process::Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-q", "-P", "64", "-t", test])
        .args(["-n", &n.to_string()])
        .args(extra)
        .output();
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("requests per second"))
            .map(|l| l.rsplit('\r').next().unwrap_or(l).trim().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        Err(e) => format!("redis-benchmark did not run: {e}"),
    }
}

fn main() {
    let fsync = match std::env::var("PUNCTUAL_BENCH_FSYNC").as_deref() {
        Ok("always") => "always",
        Ok("no") => "no",
        _ => "everysec",
    };
    let redis = RedisServer::start_with_fsync(fsync);
    let mut con = redis.client().expect("client");
    println!(
        "redis-server {}: appendonly yes, appendfsync {fsync}",
        redis.port
    );

    // 1. Registrations.
    let n = scale(200_000);
    let zadd = redis_benchmark(redis.port, "zadd", n, &[]);
    // For context: HSET to a million random fields, closer to what a registration costs Redis.
    let before = RedisWork::sample(&mut con);
    let hset = redis_benchmark(redis.port, "hset", n, &["-r", "1000000"]);
    let hset_cost = before.per(&RedisWork::sample(&mut con), n, "op");
    // Three rounds on fresh keys, interleaved with redis-benchmark's, so that a busy moment
    // of a shared host shows as spread rather than as one misleading figure.
    let mut rates = Vec::new();
    for round in 0..3 {
        let e = engine(&redis, 1);
        let h = e.handle();
        let far = h.now().0 + 3_600_000_000;
        let tenant = format!("reg{round}");
        let before = RedisWork::sample(&mut con);
        rates.push(register(&h, &tenant, n, |i| far + i, order));
        println!(
            "  round {round}: {}",
            before.per(&RedisWork::sample(&mut con), n, "timer")
        );
        let m = &h.store_metrics()[0].store;
        let (f, b) = (m.flush_seconds.snapshot(), m.batch_commands.snapshot());
        println!(
            "  round {round}: {:.0} timers/s; pipelines {}, mean {:.0} commands, mean flush {:.2} ms",
            rates[round],
            f.count,
            b.sum / b.count.max(1) as f64,
            f.sum * 1e3 / f.count.max(1) as f64
        );
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "durable registrations: median {:.0} timers/s acknowledged (min {:.0}, max {:.0}; 1 shard, {n} timers a round, {} in flight)",
        rates[1],
        rates[0],
        rates[2],
        PRODUCERS * WINDOW
    );
    println!("redis-benchmark -q -P 64 -t zadd -n {n}: {zadd}");
    println!("redis-benchmark -q -P 64 -t hset -r 1000000 -n {n}: {hset}");
    println!("  redis-benchmark's HSETs: {hset_cost}");
    let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("flush");

    // 2. Burst, and 3. lateness from the same fires.
    let n = scale(100_000);
    let e = engine(&redis, 1);
    let h = e.handle();
    let due = h.now().0 + 5_000_000;
    let due = due - due % 1000; // on a millisecond
    register(&h, "burst", n, |_| due, order);
    while h.now().0 < due {
        std::thread::sleep(Duration::from_millis(1));
    }
    while xlen(&mut con, "burst") < n {
        std::thread::sleep(Duration::from_millis(1));
    }
    let last: redis::Value = redis::cmd("XREVRANGE")
        .arg("punctual:fired:{burst}")
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query(&mut con)
        .expect("XREVRANGE");
    let last_ms = format!("{last:?}")
        .split('"')
        .find_map(|s| s.split('-').next().and_then(|ms| ms.parse::<u64>().ok()))
        .unwrap_or(0);
    println!(
        "burst: {n} timers due in one millisecond, last stream entry {} ms after the deadline (Redis entry ids)",
        last_ms as i64 - (due / 1000) as i64
    );
    drop(e);
    let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("flush");

    let n = scale(20_000);
    let e = engine(&redis, 1);
    let h = e.handle();
    let start = h.now().0 + 1_000_000;
    register(
        &h,
        "late",
        n,
        |i| start + i * 100 + (i * 7919) % 97, // 10k/s, spread in the ms
        order,
    );
    while xlen(&mut con, "late") < n {
        std::thread::sleep(Duration::from_millis(10));
    }
    let entries = redis_server::read_stream(&mut con, "late");
    let mut late: Vec<i64> = entries
        .iter()
        .map(|e| (e.id_ms * 1000) as i64 - e.fire_at_us as i64)
        .collect();
    late.sort_unstable();
    println!(
        "durable fire lateness (Redis entry ms - deadline, truncated to the ms: true value up to +1 ms): p50 {} µs, p99 {} µs, max {} µs over {n} fires at 10,000/s",
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        late.last().copied().unwrap_or(0)
    );
    drop(e);
    let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("flush");

    // 4. Recovery.
    let n = scale(1_000_000);
    {
        let e = engine(&redis, 1);
        let h = e.handle();
        let far = h.now().0 + 3_600_000_000;
        for i in 0..n {
            let key = format!("order-{i}");
            while let Err(e) =
                h.schedule_detached("rec", &key, UtcMicros(far + i), b"{\"order\":1}")
            {
                assert!(matches!(e, punctual::Error::RingFull { .. }), "{e}");
                std::thread::sleep(Duration::from_millis(1)); // let the ring drain
            }
        }
        let m = h.store_metrics();
        while m[0]
            .store
            .pending_writes
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
            || h.stats()[0].pending < n
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    for shards in [1, 2] {
        let started = Instant::now();
        let e = engine(&redis, shards);
        let took = started.elapsed();
        let loaded: u64 = e.handle().stats().iter().map(|s| s.pending).sum();
        println!(
            "recovery: {loaded} timers loaded into {shards} shard(s), ready in {:.2} s",
            took.as_secs_f64()
        );
    }
}
