//! The store bench's registration measurement, shared by `benches/store.rs` and
//! `benches/http.rs` (which reports the HTTP path beside it, in the same run): an engine on a
//! Redis store, and producer threads each with a window of acknowledged schedules in flight.

use super::redis_server::RedisServer;
use punctual::engine::Pinning;
use punctual::store::redis::RedisConfig;
use punctual::{EngineBuilder, Handle, UtcMicros};
use std::time::{Duration, Instant};

pub fn engine(redis: &RedisServer, shards: usize) -> punctual::Engine {
    let mut cfg = RedisConfig::new(redis.url());
    cfg.max_buffered = 2_000_000;
    if let Some(n) = std::env::var("PUNCTUAL_BENCH_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cfg.flush_max_commands = n;
    }
    cfg.ack_timeout = Duration::from_secs(60);
    let e = EngineBuilder::new()
        .shards(shards)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .shard_capacity(2_000_000)
        .redis_config(cfg)
        .build()
        .expect("engine starts");
    assert!(e.handle().wait_store_ready(Duration::from_secs(120)));
    e
}

/// Producer threads, each with `WINDOW` schedules in flight.
pub const PRODUCERS: u64 = 4;
pub const WINDOW: u64 = 2048;

/// Schedules `n` timers under `tenant` at `due(i)`, with `payload(i)`, keys `k0`, `k1`, …;
/// acknowledged timers per second.
pub fn register(
    h: &Handle,
    tenant: &str,
    n: u64,
    due: impl Fn(u64) -> u64 + Sync,
    payload: impl Fn(u64) -> Vec<u8> + Sync,
) -> f64 {
    let started = Instant::now();
    std::thread::scope(|s| {
        for p in 0..PRODUCERS {
            let (h, due, payload) = (h.clone(), &due, &payload);
            s.spawn(move || {
                let mut i = p * WINDOW;
                while i < n {
                    let end = (i + WINDOW).min(n);
                    let futs: Vec<_> = (i..end)
                        .map(|j| {
                            let key = format!("k{j}");
                            h.schedule_async(tenant, &key, UtcMicros(due(j)), &payload(j))
                        })
                        .collect();
                    let acks = futures_lite::future::block_on(futures_util::future::join_all(futs));
                    for r in acks {
                        r.expect("durable schedule acknowledged");
                    }
                    i += PRODUCERS * WINDOW;
                }
            });
        }
    });
    n as f64 / started.elapsed().as_secs_f64()
}
