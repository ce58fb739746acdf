//! Faults against real processes: punctual SIGKILLed while holding timers, Redis SIGKILLed
//! and restarted while timers are registered and fired, Redis answering OOM. The rule under
//! test: an acknowledged timer is never lost and never fires early. Nothing asserts a duration.

#[path = "support/redis_server.rs"]
mod redis_server;

use punctual::engine::Pinning;
use punctual::store::redis::layout;
use punctual::store::redis::RedisConfig;
use punctual::{EngineBuilder, Error, UtcMicros};
use redis_server::{wait_stream, RedisServer};
use std::collections::HashMap;
use std::io::BufRead;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The store's config for tests: a long ack timeout, because `appendfsync always` on a disk
/// shared with compilers can take seconds; the tests assert outcomes, not latency.
fn config(url: String) -> RedisConfig {
    let mut cfg = RedisConfig::new(url);
    cfg.ack_timeout = Duration::from_secs(20);
    cfg
}

fn engine(shards: usize, cfg: RedisConfig) -> punctual::Engine {
    let e = EngineBuilder::new()
        .shards(shards)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .shard_capacity(100_000)
        .redis_config(cfg)
        .build()
        .expect("engine starts");
    assert!(
        e.handle().wait_store_ready(Duration::from_secs(30)),
        "store ready"
    );
    e
}

/// Schedules `keys` concurrently (the acks are batched by the store); the outcome of each.
fn schedule_all(
    h: &punctual::Handle,
    tenant: &str,
    keys: &[(String, u64)],
) -> Vec<Result<punctual::Scheduled, Error>> {
    let futs: Vec<_> = keys
        .iter()
        .map(|(k, due)| h.schedule_async(tenant, k, UtcMicros(*due), b"{}"))
        .collect();
    futures_lite::future::block_on(futures_util::future::join_all(futs))
}

/// Run as a child process by `sigkill_of_punctual_holding_10000_timers_loses_none`.
#[test]
#[ignore = "a child process of another test"]
fn child_process_holding_timers() {
    let Ok(url) = std::env::var("PUNCTUAL_TEST_REDIS") else {
        return;
    };
    let e = engine(2, config(url));
    let h = e.handle();
    let far = h.now().0 + 3_600_000_000;
    let keys: Vec<_> = (0..10_000u64).map(|i| (format!("k{i}"), far + i)).collect();
    let acked = schedule_all(&h, "crash", &keys)
        .iter()
        .filter(|r| r.is_ok())
        .count();
    println!("ACKED {acked} {far}");
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn sigkill_of_punctual_holding_10000_timers_loses_none() {
    let redis = RedisServer::start();
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "child_process_holding_timers",
            "--nocapture",
        ])
        .env("PUNCTUAL_TEST_REDIS", redis.url())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("child starts");
    let stdout = child.stdout.take().expect("piped");
    let line = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("ACKED "))
        .expect("child reports its acknowledged timers");
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    let parts: Vec<u64> = line
        .split(' ')
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    assert_eq!(parts.first(), Some(&10_000), "{line}");
    let far = parts[1];

    let e = engine(1, config(redis.url()));
    let h = e.handle();
    for i in 0..10_000u64 {
        let got = h.get("crash", &format!("k{i}")).expect("get");
        assert_eq!(
            got.map(|t| t.deadline),
            Some(UtcMicros(far + i)),
            "k{i} lost"
        );
    }
}

#[test]
fn redis_killed_and_restarted_mid_run_delivers_every_acknowledged_timer() {
    let mut redis = RedisServer::start();
    let e = engine(2, config(redis.url()));
    let h = e.handle();
    let mut acked: HashMap<String, (u64, u64)> = HashMap::new();
    let batch = |from: u64, n: u64, acked: &mut HashMap<String, (u64, u64)>| {
        let now = h.now().0;
        let keys: Vec<_> = (from..from + n)
            .map(|i| (format!("k{i}"), now + 50_000 + (i % 40) * 10_000))
            .collect();
        for ((key, due), r) in keys.iter().zip(schedule_all(&h, "orders", &keys)) {
            if let Ok(s) = r {
                acked.insert(key.clone(), (s.version, *due));
            }
        }
    };
    batch(0, 1000, &mut acked);
    redis.kill();
    // Registered while Redis is down: buffered, answered after the restart or refused.
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        redis.start_again();
        redis
    });
    batch(1000, 500, &mut acked);
    let redis = restarter.join().expect("restarted");
    batch(1500, 1000, &mut acked);
    assert!(acked.len() >= 2000, "acknowledged {}", acked.len());

    let mut con = redis.client().expect("client");
    let entries = wait_stream(&mut con, "orders", |es| {
        let seen: std::collections::HashSet<_> = es.iter().map(|e| &e.key).collect();
        acked.keys().all(|k| seen.contains(k))
    });
    let mut copies: HashMap<(String, u64), usize> = HashMap::new();
    for e in &entries {
        assert!(e.fired_at_us >= e.fire_at_us, "{} fired early", e.key);
        *copies.entry((e.key.clone(), e.version)).or_default() += 1;
    }
    for (key, (version, due)) in &acked {
        assert!(
            copies.contains_key(&(key.clone(), *version)),
            "{key} v{version} (due {due}) lost"
        );
    }
    let duplicates: usize = copies.values().map(|c| c - 1).sum();
    let m = &h.store_metrics();
    let reconnects: u64 = m
        .iter()
        .map(|m| m.store.reconnects_total.load(Ordering::Relaxed))
        .sum();
    println!(
        "acknowledged {}, stream entries {}, duplicates {duplicates}, reconnects {reconnects}",
        acked.len(),
        entries.len()
    );
    assert!(reconnects >= 1);
}

#[test]
fn oom_replies_are_logged_counted_retried_and_never_fatal() {
    let redis = RedisServer::start();
    let mut con = redis.client().expect("client");
    let mut cfg = config(redis.url());
    cfg.ack_timeout = Duration::from_millis(300);
    let e = engine(1, cfg);
    let h = e.handle();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut con)
        .expect("config");
    let far = UtcMicros(h.now().0 + 3_600_000_000);
    let refused = h.schedule("t", "during-oom", far, b"");
    assert_eq!(refused, Err(Error::StoreUnavailable { retry_after_s: 1 }));
    let errors = h.store_metrics()[0]
        .store
        .errors_total
        .load(Ordering::Relaxed);
    assert!(errors >= 1, "error replies are counted");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut con)
        .expect("config");
    // The refused write stayed queued and lands once Redis accepts writes again.
    h.schedule("t", "after-oom", far, b"")
        .expect("acknowledged");
    let key = layout::timers_key(layout::partition_of("t", "during-oom"));
    let stored: bool = redis::cmd("HEXISTS")
        .arg(key)
        .arg(layout::field("t", "during-oom"))
        .query(&mut con)
        .expect("HEXISTS");
    assert!(stored);
}

#[test]
fn readonly_replica_replies_are_retried_until_writes_are_accepted() {
    let redis = RedisServer::start();
    let mut con = redis.client().expect("client");
    let mut cfg = config(redis.url());
    cfg.ack_timeout = Duration::from_millis(300);
    let e = engine(1, cfg);
    let h = e.handle();
    // A replica of a master that does not exist answers every write READONLY.
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(redis_server::free_port())
        .query(&mut con)
        .expect("replicaof");
    let soon = UtcMicros(h.now().0 + 20_000);
    let refused = h.schedule("ro", "k1", soon, b"1");
    assert_eq!(refused, Err(Error::StoreUnavailable { retry_after_s: 1 }));
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut con)
        .expect("promote");
    // The refused registration stayed queued: it is written, fires, and reaches the stream.
    let entries = wait_stream(&mut con, "ro", |e| !e.is_empty());
    assert_eq!(entries.iter().filter(|e| e.key == "k1").count(), 1);
    h.schedule("ro", "k2", soon, b"2")
        .expect("acknowledged again");
}

/// While Redis is down, fired timers' stream entries wait in memory; past
/// `max_buffered_fires` the shard holds further due timers back instead of buffering without
/// bound, and fires every one of them, exactly once, when Redis is back.
#[test]
fn fires_during_an_outage_are_bounded_in_memory_and_none_is_lost() {
    let mut redis = RedisServer::start();
    let mut cfg = config(redis.url());
    cfg.max_buffered_fires = 50;
    let e = engine(1, cfg);
    let h = e.handle();
    // Due well after the 500 acknowledgements (fsync'd by Redis), however slow the host.
    let due = h.now().0 + 5_000_000;
    let keys: Vec<_> = (0..500u64).map(|i| (format!("k{i}"), due + i)).collect();
    let acked: HashMap<String, u64> = keys
        .iter()
        .zip(schedule_all(&h, "outage", &keys))
        .filter_map(|((k, _), r)| r.ok().map(|s| (k.clone(), s.version)))
        .collect();
    assert_eq!(acked.len(), 500);
    assert!(
        h.now().0 < due,
        "the writes took longer than the plan allows"
    );
    redis.kill();
    // All 500 fall due while Redis is down.
    std::thread::sleep(Duration::from_micros(
        (due + 1_000_000).saturating_sub(h.now().0),
    ));
    let m = &h.store_metrics()[0].store;
    let buffered = m.pending_writes.load(Ordering::Relaxed);
    let held = m.fires_held.load(Ordering::Relaxed);
    let pending = h.stats()[0].pending;
    assert!(
        buffered <= 50,
        "{buffered} writes buffered for a bound of 50 fires"
    );
    assert_eq!(held, 1, "the shard says it holds fires back");
    assert!(pending >= 450, "held timers stay pending: {pending}");
    assert!(m.fire_pauses_total.load(Ordering::Relaxed) >= 1);
    redis.start_again();
    let mut con = redis.client().expect("client");
    let entries = wait_stream(&mut con, "outage", |es| {
        let seen: std::collections::HashSet<_> = es.iter().map(|e| &e.key).collect();
        acked.keys().all(|k| seen.contains(k))
    });
    let mut copies: HashMap<(String, u64), usize> = HashMap::new();
    for e in &entries {
        assert!(e.fired_at_us >= e.fire_at_us, "{} fired early", e.key);
        *copies.entry((e.key.clone(), e.version)).or_default() += 1;
    }
    for (key, version) in &acked {
        assert!(copies.contains_key(&(key.clone(), *version)), "{key} lost");
    }
    assert_eq!(
        h.store_metrics()[0]
            .store
            .fires_held
            .load(Ordering::Relaxed),
        0
    );
}
