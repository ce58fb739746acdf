//! Batches through HTTP against the store alone, in one run and against one `redis-server`
//! (append-only file, `appendfsync everysec`, as `benches/store.rs`).
//!
//! Each round measures three things on a freshly emptied Redis, in an order that rotates from
//! round to round (so that a busy moment of the host, or Redis's own state, does not always
//! fall on the same one):
//!
//! - **store bench**: `benches/store.rs`'s registration figure, its code and shape (an engine
//!   in this process, 1 shard, 4 producer threads × 2,048 acknowledged schedules in flight,
//!   an 11-byte payload);
//! - **store, HTTP's shape**: the same, with 2 shards and the HTTP workload's 60-byte payloads,
//!   so the difference to the HTTP row is the HTTP path alone;
//! - **HTTP**: the release binary, `punctual serve --redis … --shards 2`, driven by 4
//!   keep-alive connections (hyper, one client thread) POSTing 1,000-timer batches with 60-byte
//!   payloads; bodies are encoded before the clock starts, every item's answer is read.
//!
//! Timers are due in an hour: nothing fires during a round. CPU per registration comes from
//! `/proc/<pid>/stat` for Redis, the server and this process (the client during the HTTP row,
//! the engine and its producers during the store rows).

use super::api_support::Server;
use super::client::KeepAlive;
use super::cpu::{self, Meter};
use super::redis_server::RedisServer;
use super::registrations::{engine, register};
use bytes::Bytes;
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The acceptance target: the HTTP batch path at ≥ 80% of the store bench.
const TARGET: f64 = 0.80;
const BATCH: u64 = 1_000;
const CONNECTIONS: usize = 4;
const DELAY_MS: u64 = 3_600_000;

#[derive(Serialize)]
struct Payload {
    order: String,
    cents: u32,
    note: &'static str,
}

/// The 60-byte JSON payload of timer `i`.
fn payload(i: u64) -> Payload {
    Payload {
        order: format!("order-{:08}", i % 100_000_000),
        cents: 100_000 + (i % 900_000) as u32,
        note: "if unpaid",
    }
}

fn payload_bytes(i: u64) -> Vec<u8> {
    serde_json::to_vec(&payload(i)).unwrap_or_default()
}

#[derive(Serialize)]
struct Item {
    key: String,
    delay_ms: u64,
    payload: Payload,
}

#[derive(Serialize)]
struct Batch {
    timers: Vec<Item>,
}

#[derive(Deserialize)]
struct Answer {
    results: Vec<ItemAnswer>,
}

#[derive(Deserialize)]
struct ItemAnswer {
    status: u16,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Store,
    StoreShape,
    Http,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Store => "store bench (1 shard, 11-byte payload)",
            Kind::StoreShape => "store, HTTP's shape (2 shards, 60-byte payload)",
            Kind::Http => "HTTP batches (serve --shards 2, 4 connections)",
        }
    }
}

struct Figure {
    round: usize,
    kind: Kind,
    rate: f64,
    line: String,
}

pub fn run(n: u64) {
    let redis = RedisServer::start_with_fsync("everysec");
    let Some(redis_pid) = redis.pid() else {
        println!("batch: redis-server did not start");
        return;
    };
    println!(
        "== batches: {n} timers a row, {BATCH} per batch, payload {} bytes; redis-server {} (appendfsync everysec)",
        payload_bytes(0).len(),
        redis.port
    );
    let mut figures: Vec<Figure> = Vec::new();
    let kinds = [Kind::Store, Kind::StoreShape, Kind::Http];
    for round in 0..3 {
        for k in 0..kinds.len() {
            if super::stopped() {
                println!("  interrupted");
                return;
            }
            let kind = kinds[(k + round) % kinds.len()];
            if let Err(e) = empty(&redis) {
                println!("  round {round}: Redis could not be emptied: {e}");
                return;
            }
            let tenant = format!("r{round}");
            let measured = match kind {
                Kind::Store | Kind::StoreShape => store_row(&redis, redis_pid, kind, &tenant, n),
                Kind::Http => http_row(&redis, redis_pid, &tenant, n),
            };
            match measured {
                Ok(mut f) => {
                    f.round = round;
                    println!(
                        "  round {round}: {:<48} {:>9.0}/s; {}",
                        kind.name(),
                        f.rate,
                        f.line
                    );
                    figures.push(f);
                }
                Err(e) => println!("  round {round}: {}: FAILED: {e}", kind.name()),
            }
        }
    }
    summary(&figures);
}

/// FLUSHALL, then a rewrite of the append-only file so that no round starts with a rewrite
/// pending from the previous one's growth; waits for it (at most 30 s).
fn empty(redis: &RedisServer) -> Result<(), String> {
    let mut con = redis.client().map_err(|e| e.to_string())?;
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut con)
        .map_err(|e| e.to_string())?;
    let _: redis::Value = redis::cmd("BGREWRITEAOF")
        .query(&mut con)
        .map_err(|e| e.to_string())?;
    let give_up = Instant::now() + Duration::from_secs(30);
    while Instant::now() < give_up {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        let busy = |field: &str| info.lines().any(|l| l.trim() == format!("{field}:1"));
        if !busy("aof_rewrite_in_progress") && !busy("aof_rewrite_scheduled") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err("the append-only file's rewrite did not finish in 30 s".into())
}

fn store_row(
    redis: &RedisServer,
    redis_pid: u32,
    kind: Kind,
    tenant: &str,
    n: u64,
) -> Result<Figure, String> {
    let shards = if kind == Kind::Store { 1 } else { 2 };
    let e = engine(redis, shards);
    let h = e.handle();
    let far = h.now().0 + DELAY_MS * 1000;
    let meter = Meter::start(&[
        ("Redis", redis_pid),
        ("engine+producers", std::process::id()),
    ]);
    let rate = if kind == Kind::Store {
        register(&h, tenant, n, |i| far + i, |_| b"{\"order\":1}".to_vec())
    } else {
        register(&h, tenant, n, |i| far + i, payload_bytes)
    };
    let used = meter.stop();
    drop(e);
    Ok(Figure {
        round: 0,
        kind,
        rate,
        line: used.line(n, "reg"),
    })
}

fn http_row(redis: &RedisServer, redis_pid: u32, tenant: &str, n: u64) -> Result<Figure, String> {
    let server = Server::start(&[
        "--redis",
        &redis.url(),
        "--shards",
        "2",
        "--shard-capacity",
        "10000000",
    ]);
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..n.div_ceil(BATCH))
            .map(|b| {
                let timers = (b * BATCH..((b + 1) * BATCH).min(n))
                    .map(|i| Item {
                        key: format!("k{i}"),
                        delay_ms: DELAY_MS,
                        payload: payload(i),
                    })
                    .collect();
                serde_json::to_vec(&Batch { timers }).map(Bytes::from)
            })
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?,
    );
    let meter = Meter::start(&[
        ("Redis", redis_pid),
        ("server", server.child.id()),
        ("client", std::process::id()),
    ]);
    let started = Instant::now();
    let (addr, path) = (server.addr, format!("/v1/timers/{tenant}"));
    let outcome = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("bench-client")
        .spawn(move || async move {
            let next = Arc::new(AtomicUsize::new(0));
            let tasks: Vec<_> = (0..CONNECTIONS)
                .map(|_| {
                    let (bodies, next, path) = (bodies.clone(), next.clone(), path.clone());
                    glommio::spawn_local(async move { post_all(addr, &path, &bodies, &next).await })
                })
                .collect();
            let mut total = (0u64, 0u64);
            for t in tasks {
                let (ok, refused) = t.await?;
                total = (total.0 + ok, total.1 + refused);
            }
            Ok::<_, String>(total)
        })
        .map_err(|e| e.to_string())?
        .join()
        .map_err(|e| format!("client thread: {e:?}"))?;
    let took = started.elapsed().as_secs_f64();
    let used = meter.stop();
    let (ok, refused) = outcome?;
    if refused > 0 || ok != n {
        return Err(format!("{ok} of {n} acknowledged, {refused} items refused"));
    }
    Ok(Figure {
        round: 0,
        kind: Kind::Http,
        rate: ok as f64 / took,
        line: used.line(n, "reg"),
    })
}

/// One connection's share: takes the next unsent body until none is left; returns the items
/// acknowledged (2xx) and refused.
async fn post_all(
    addr: std::net::SocketAddr,
    path: &str,
    bodies: &[Bytes],
    next: &AtomicUsize,
) -> Result<(u64, u64), String> {
    let mut conn = KeepAlive::connect(addr).await?;
    let (mut ok, mut refused) = (0u64, 0u64);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(body) = bodies.get(i) else {
            return Ok((ok, refused));
        };
        let req = hyper::Request::post(path)
            .header("host", "punctual")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .map_err(|e| e.to_string())?;
        let (status, answer) = conn.send(req).await?;
        if status != 200 {
            return Err(format!(
                "batch answered {status}: {}",
                String::from_utf8_lossy(&answer)
            ));
        }
        let answer: Answer = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
        for item in answer.results {
            if (200..300).contains(&item.status) {
                ok += 1;
            } else {
                refused += 1;
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn summary(figures: &[Figure]) {
    let rates = |kind: Kind| -> Vec<f64> {
        figures
            .iter()
            .filter(|f| f.kind == kind)
            .map(|f| f.rate)
            .collect()
    };
    let (store, shape, http) = (
        rates(Kind::Store),
        rates(Kind::StoreShape),
        rates(Kind::Http),
    );
    for (kind, v) in [
        (Kind::Store, &store),
        (Kind::StoreShape, &shape),
        (Kind::Http, &http),
    ] {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        println!(
            "{:<48} median {:>9.0} registrations/s (min {min:.0}, max {max:.0}, {} rounds)",
            kind.name(),
            median(v.clone()),
            v.len()
        );
    }
    let ratio = median(http) / median(store);
    let shape_ratio = median(rates(Kind::Http)) / median(shape);
    println!(
        "HTTP / store bench: {:.0}% (target ≥ {:.0}%: {}); HTTP / store in HTTP's shape: {:.0}%",
        ratio * 100.0,
        TARGET * 100.0,
        if ratio >= TARGET { "met" } else { "MISSED" },
        shape_ratio * 100.0
    );
    // Within a round the rows ran back to back, so these ratios see the least host drift.
    let per_round: Vec<String> = (0..3)
        .filter_map(|r| {
            let rate = |kind: Kind| {
                figures
                    .iter()
                    .find(|f| f.round == r && f.kind == kind)
                    .map(|f| f.rate)
            };
            Some(format!(
                "round {r} {:.0}%",
                rate(Kind::Http)? / rate(Kind::Store)? * 100.0
            ))
        })
        .collect();
    println!("HTTP / store bench per round: {}", per_round.join(", "));
    println!("host after the batches: {}", cpu::host_load());
}
