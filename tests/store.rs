//! The durable store against a real redis-server: acknowledged timers survive an engine
//! restart and a change of shard count, fire once and never early, and cancels that race
//! fires agree with the stream. Nothing here asserts a duration.

#[path = "support/redis_server.rs"]
mod redis_server;

use punctual::engine::Pinning;
use punctual::store::redis::RedisConfig;
use punctual::{Cancelled, EngineBuilder, Error, UtcMicros};
use redis_server::{free_port, read_stream, wait_stream, RedisServer};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The store's config for tests: a long ack timeout, because `appendfsync always` on a disk
/// shared with compilers can take seconds; the tests assert outcomes, not latency.
fn config(url: String) -> RedisConfig {
    let mut cfg = RedisConfig::new(url);
    cfg.ack_timeout = Duration::from_secs(20);
    cfg
}

fn engine(shards: usize, cfg: RedisConfig) -> punctual::Engine {
    EngineBuilder::new()
        .shards(shards)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .shard_capacity(100_000)
        .redis_config(cfg)
        .build()
        .expect("engine starts")
}

fn ready(shards: usize, redis: &RedisServer) -> punctual::Engine {
    let e = engine(shards, config(redis.url()));
    assert!(
        e.handle().wait_store_ready(Duration::from_secs(30)),
        "store ready"
    );
    e
}

#[test]
fn acknowledged_timers_survive_an_engine_restart_and_fire_once_never_early() {
    let redis = RedisServer::start();
    let first = ready(2, &redis);
    let h = first.handle();
    let due = h.now().0 + 1_500_000; // after the restart below
    let mut versions = HashMap::new();
    for i in 0..300u64 {
        let key = format!("order-{i}");
        let s = h
            .schedule(
                "shop",
                &key,
                UtcMicros(due + i * 100),
                format!("{{\"n\":{i}}}").as_bytes(),
            )
            .expect("durable schedule acknowledged");
        versions.insert(key, s.version);
    }
    drop(first);

    let second = ready(2, &redis);
    let mut con = redis.client().expect("client");
    wait_stream(&mut con, "shop", |e| e.len() >= 300);
    std::thread::sleep(Duration::from_millis(300)); // would a second copy show up?
    let entries = read_stream(&mut con, "shop");
    assert_eq!(entries.len(), 300, "each timer fired exactly once");
    for e in &entries {
        assert_eq!(
            versions.get(&e.key),
            Some(&e.version),
            "version kept for {}",
            e.key
        );
        assert!(e.fired_at_us >= e.fire_at_us, "{} fired early", e.key);
        assert!(
            e.id_ms * 1000 + 999 >= e.fire_at_us,
            "{} entered the stream early",
            e.key
        );
        let n: u64 = e.key["order-".len()..].parse().expect("key");
        assert_eq!(e.payload, format!("{{\"n\":{n}}}"));
    }
    drop(second);
    // Nothing is left pending.
    let third = ready(1, &redis);
    assert!(third
        .handle()
        .get("shop", "order-1")
        .expect("get")
        .is_none());
}

#[test]
fn recovery_with_a_different_shard_count_loads_everything() {
    let redis = RedisServer::start();
    let mut far = {
        let e = ready(3, &redis);
        let h = e.handle();
        let far = h.now().0 + 3_600_000_000;
        let mut v = HashMap::new();
        for i in 0..1000u64 {
            let key = format!("k{i}");
            v.insert(
                key.clone(),
                h.schedule("t", &key, UtcMicros(far + i), b"")
                    .expect("ack")
                    .version,
            );
        }
        (far, v)
    };
    for shards in [1, 2] {
        let e = ready(shards, &redis);
        let h = e.handle();
        for (key, version) in &far.1 {
            let got = h.get("t", key).expect("get").expect("recovered");
            assert_eq!(got.version, *version);
            let i: u64 = key[1..].parse().expect("key");
            assert_eq!(got.deadline, UtcMicros(far.0 + i));
        }
        // A fresh schedule gets a version above every recovered one.
        let newer = h.schedule("t", "k0", UtcMicros(far.0), b"").expect("ack");
        assert!(newer.replaced && newer.version > far.1["k0"]);
        let c = h.cancel("t", "k0").expect("ack");
        assert!(matches!(c, Cancelled::Cancelled { .. }));
        let again = h.schedule("t", "k0", UtcMicros(far.0), b"").expect("ack");
        assert!(!again.replaced);
        far.1.insert("k0".into(), again.version);
    }
}

#[test]
fn cancel_racing_fire_agrees_with_the_stream() {
    let redis = RedisServer::start();
    let e = ready(2, &redis);
    let h = e.handle();
    let due = h.now().0 + 200_000;
    let n = 2000u64;
    for i in 0..n {
        h.schedule("race", &format!("k{i}"), UtcMicros(due + i * 50), b"")
            .expect("ack");
    }
    while h.now().0 < due {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut not_found = HashSet::new();
    let mut cancelled = HashSet::new();
    for i in 0..n {
        let key = format!("k{i}");
        match h.cancel("race", &key).expect("answered") {
            Cancelled::Cancelled { .. } => cancelled.insert(key),
            Cancelled::NotFound => not_found.insert(key),
        };
    }
    let mut con = redis.client().expect("client");
    let entries = wait_stream(&mut con, "race", |e| e.len() >= not_found.len());
    let fired: HashSet<String> = entries.iter().map(|e| e.key.clone()).collect();
    assert_eq!(entries.len(), fired.len(), "no duplicates without a crash");
    assert_eq!(
        fired, not_found,
        "fired exactly the timers whose cancel said not found"
    );
    assert!(fired.is_disjoint(&cancelled));
}

#[test]
fn redis_down_at_start_is_not_healthy_then_recovers_when_it_comes_up() {
    let port = free_port();
    let mut redis = RedisServer::stopped(port);
    let mut cfg = config(redis.url());
    cfg.ack_timeout = Duration::from_millis(500); // the refusal below waits for it
    let e = engine(1, cfg);
    let h = e.handle();
    assert!(!h.store_healthy());
    assert!(!h.wait_store_ready(Duration::from_millis(300)));
    // Held during recovery, refused once the ack timeout passes.
    let refused = h.schedule("t", "early", UtcMicros(h.now().0), b"");
    assert_eq!(refused, Err(Error::StoreUnavailable { retry_after_s: 1 }));
    redis.start_again();
    assert!(h.wait_store_ready(Duration::from_secs(30)));
    h.schedule("t", "late", UtcMicros(h.now().0 + 10_000), b"7")
        .expect("ack");
    let mut con = redis.client().expect("client");
    let entries = wait_stream(&mut con, "t", |e| e.iter().any(|x| x.key == "late"));
    assert!(entries.iter().any(|x| x.key == "late" && x.payload == "7"));
}

#[test]
fn full_outage_buffer_refuses_new_durable_writes() {
    let mut redis = RedisServer::start();
    let mut cfg = config(redis.url());
    cfg.max_buffered = 10;
    cfg.ack_timeout = Duration::from_millis(200);
    let e = engine(1, cfg);
    let h = e.handle();
    assert!(h.wait_store_ready(Duration::from_secs(30)));
    redis.kill();
    let far = UtcMicros(h.now().0 + 3_600_000_000);
    for i in 0..10 {
        h.schedule_detached("t", &format!("k{i}"), far, b"")
            .expect("queued");
    }
    let mut refused = 0;
    for i in 10..20 {
        if let Err(Error::StoreUnavailable { .. }) = h.schedule("t", &format!("k{i}"), far, b"") {
            refused += 1;
        }
    }
    assert_eq!(refused, 10, "every write past the bound is refused");
    let m = &h.store_metrics()[0].store;
    assert!(m.refused_total.load(std::sync::atomic::Ordering::Relaxed) >= 10);
}

/// While Redis stops answering, a flooding tenant's writes wait in the outbox only up to its
/// share (a quarter of `max_buffered`); past it they are refused `StoreShare` at once, and
/// another tenant's write is still admitted and acknowledged once Redis is back.
#[test]
fn one_tenant_holds_at_most_a_quarter_of_the_writes_waiting_for_the_store() {
    let redis = RedisServer::start();
    let mut cfg = config(redis.url());
    cfg.max_buffered = 40;
    let e = engine(1, cfg);
    let h = e.handle();
    assert!(h.wait_store_ready(Duration::from_secs(30)));
    redis.signal("STOP");
    let far = UtcMicros(h.now().0 + 3_600_000_000);
    let flood: Vec<_> = (0..40)
        .map(|i| h.schedule_async("flood", &format!("k{i}"), far, b""))
        .collect();
    let calm = h.schedule_async("calm", "k", far, b"");
    // Each push is applied by the shard before Redis answers anything; give it time to.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while h.store_metrics()[0]
        .store
        .share_refused_total
        .load(std::sync::atomic::Ordering::Relaxed)
        < 30
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    redis.signal("CONT");
    let (mut acked, mut over_share) = (0, 0);
    for f in flood {
        match futures_lite::future::block_on(f) {
            Ok(_) => acked += 1,
            Err(Error::StoreShare { share: 10, .. }) => over_share += 1,
            Err(other) => panic!("a flood write: {other}"),
        }
    }
    assert_eq!((acked, over_share), (10, 30));
    let calm = futures_lite::future::block_on(calm);
    assert!(calm.is_ok(), "the calm tenant's write: {calm:?}");
    let m = &h.store_metrics()[0].store;
    assert_eq!(
        m.refused_total.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[test]
fn stream_lengths_are_sampled_per_tenant() {
    let redis = RedisServer::start();
    let e = ready(2, &redis);
    let h = e.handle();
    for i in 0..3 {
        h.schedule("lens", &format!("k{i}"), UtcMicros(h.now().0), b"")
            .expect("ack");
    }
    let mut con = redis.client().expect("client");
    wait_stream(&mut con, "lens", |e| e.len() >= 3);
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    while !h.stream_lengths().contains(&("lens".to_string(), 3)) {
        assert!(
            std::time::Instant::now() < give_up,
            "{:?}",
            h.stream_lengths()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn overdue_timers_fire_at_once_in_deadline_order_after_recovery() {
    let redis = RedisServer::start();
    let due = {
        let e = ready(1, &redis);
        let h = e.handle();
        let due = h.now().0 + 1_000_000;
        // Registered in the reverse of their deadline order.
        let futs: Vec<_> = (0..200u64)
            .map(|i| {
                h.schedule_async(
                    "late",
                    &format!("k{i}"),
                    UtcMicros(due + (200 - i) * 10),
                    b"",
                )
            })
            .collect();
        for r in futures_lite::future::block_on(futures_util::future::join_all(futs)) {
            r.expect("ack");
        }
        due
    };
    // Nothing runs until the deadlines have passed: the next engine finds them overdue.
    while punctual::clock::clock_ns(libc::CLOCK_REALTIME) / 1_000 < due + 3_000 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _e = ready(1, &redis);
    let mut con = redis.client().expect("client");
    let entries = wait_stream(&mut con, "late", |e| e.len() >= 200);
    assert_eq!(entries.len(), 200);
    let deadlines: Vec<u64> = entries.iter().map(|e| e.fire_at_us).collect();
    let mut sorted = deadlines.clone();
    sorted.sort_unstable();
    assert_eq!(deadlines, sorted, "overdue timers fire in deadline order");
    assert!(entries.iter().all(|e| e.fired_at_us >= e.fire_at_us));
}

#[test]
fn malformed_records_are_skipped_counted_and_left_in_redis() {
    let redis = RedisServer::start();
    let mut con = redis.client().expect("client");
    let p = punctual::store::redis::layout::partition_of("t", "good");
    let key = punctual::store::redis::layout::timers_key(p);
    let far = punctual::clock::clock_ns(libc::CLOCK_REALTIME) / 1_000 + 3_600_000_000;
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("t/good")
        .arg(format!("7 {far} {{}}"))
        .arg("no-slash")
        .arg("1 2 x")
        .arg("t/bad-record")
        .arg("not a record")
        .query(&mut con)
        .expect("HSET");
    let e = ready(1, &redis);
    let h = e.handle();
    let good = h.get("t", "good").expect("get").expect("loaded");
    assert_eq!((good.version, good.deadline), (7, UtcMicros(far)));
    let errors = h.store_metrics()[0]
        .store
        .errors_total
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(errors >= 2, "{errors}");
    let left: u64 = redis::cmd("HLEN").arg(&key).query(&mut con).expect("HLEN");
    assert_eq!(left, 3);
    // The version counter went past the recovered one.
    assert!(
        h.schedule("t", "good", UtcMicros(far), b"")
            .expect("ack")
            .version
            > 7
    );
}
