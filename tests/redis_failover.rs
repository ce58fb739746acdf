//! Failover with Redis Sentinel and `--redis-wait-replicas 1`, end to end: the real binary,
//! a real master, replica and three sentinels (`support/sentinel.rs`). The master is
//! SIGKILLed while timers are being registered; Sentinel promotes the replica; the old master
//! is started again as the new master's replica.
//! Every timer punctual acknowledged, before or during the failover, must appear in its
//! stream on the new master, and punctual must acknowledge new writes again within 30 s of
//! the switch. (Until the old master is back as a replica the new master has none, so no
//! write can be acknowledged: those callers get 503 store_unavailable and are not counted.)
//! `perf/drills/failover.sh` is the longer drill, with figures.

mod api_support;
#[path = "support/keepalive.rs"]
mod keepalive;
#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/sentinel.rs"]
mod sentinel;

use api_support::Server;
use keepalive::KeepAlive;
use redis_server::try_read_stream;
use sentinel::Sentinels;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TENANT: &str = "failover";

/// A timer punctual acknowledged.
#[derive(Clone, Debug)]
struct Acked {
    key: String,
    version: u64,
    fire_at_us: u64,
}

#[derive(Default)]
struct LoadRun {
    acked: Vec<Acked>,
    refused: usize,
    errors: usize,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros() as u64
}

/// Registers timers due 0.5-3 s ahead from one keep-alive connection, `batch` per request
/// (1: PUT, more: a batch POST), one request per `period`, every key new, until `stop`.
fn load(
    addr: SocketAddr,
    id: &str,
    batch: usize,
    period: Duration,
    stop: Arc<AtomicBool>,
) -> LoadRun {
    let mut c = KeepAlive::new(addr, Duration::from_secs(10));
    let mut out = LoadRun::default();
    let mut seq = 0;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let keys: Vec<String> = (0..batch).map(|i| format!("{id}-{}", seq + i)).collect();
        seq += batch;
        let items: Vec<serde_json::Value> = keys
            .iter()
            .map(|k| serde_json::json!({"key": k, "delay_ms": fastrand::u64(500..3000), "payload": {"k": k}}))
            .collect();
        let reply = if batch == 1 {
            let body = serde_json::json!({"delay_ms": items[0]["delay_ms"], "payload": items[0]["payload"]});
            c.send(
                "PUT",
                &format!("/v1/timers/{TENANT}/{}", keys[0]),
                body.to_string().as_bytes(),
            )
        } else {
            let body = serde_json::json!({ "timers": items });
            c.send(
                "POST",
                &format!("/v1/timers/{TENANT}"),
                body.to_string().as_bytes(),
            )
        };
        match reply {
            Err(_) => out.errors += 1,
            Ok(r) if r.status == 503 => out.refused += batch,
            Ok(r) if (200..300).contains(&r.status) => {
                let j: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
                let results = if batch == 1 {
                    vec![
                        serde_json::json!({"key": keys[0], "status": r.status, "version": j["version"], "fire_at_us": j["fire_at_us"]}),
                    ]
                } else {
                    j["results"].as_array().cloned().unwrap_or_default()
                };
                for it in results {
                    match it["status"].as_u64() {
                        Some(200 | 201) => out.acked.push(Acked {
                            key: it["key"].as_str().expect("key").to_owned(),
                            version: it["version"].as_u64().expect("version"),
                            fire_at_us: it["fire_at_us"].as_u64().expect("fire_at_us"),
                        }),
                        Some(503) => out.refused += 1,
                        other => panic!("unexpected item status {other:?}: {it}"),
                    }
                }
            }
            Ok(r) => panic!(
                "unexpected status {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ),
        }
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now; // behind (a request waited for Redis): no burst to catch up
        }
    }
    out
}

#[test]
fn acknowledged_timers_survive_a_sentinel_failover_with_wait_replicas() {
    let started = Instant::now();
    let mut redis = Sentinels::start();
    let old = redis.master.port;
    let s = Server::start(&[
        "--redis",
        &redis.url(),
        "--redis-wait-replicas",
        "1",
        "--shards",
        "2",
    ]);

    // About 600 timers a second: batches of 25 every 50 ms, and single PUTs every 10 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = [("b", 25, 50), ("p", 1, 10)]
        .into_iter()
        .map(|(id, batch, ms)| {
            let (addr, stop) = (s.addr, stop.clone());
            std::thread::spawn(move || load(addr, id, batch, Duration::from_millis(ms), stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2500));

    redis.master.kill();
    let killed = Instant::now();
    let new = redis
        .wait_switch(old, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no failover within 30 s of the kill\n{}", redis.logs()));
    assert_eq!(new, redis.replica.port, "the replica is the new master");
    let switched = Instant::now();
    // The old master comes back as the new master's replica. It keeps nothing on disk, so it
    // must not come back as a master: until Sentinel reconfigured it, a slow or aborted
    // failover could take the empty node for the master again and the replicas would resync
    // from it, wiping what they hold (the hazard Redis documents for masters without
    // persistence). A node that restarts with its data would be turned into a replica by
    // Sentinel itself.
    redis.master.start_replica_of(new);

    // New writes are acknowledged again (WAIT 1 satisfied by the returning node) within 30 s.
    let mut probes = Vec::new();
    let mut tries = 0;
    let resumed = loop {
        tries += 1;
        let key = format!("probe-{tries}");
        let r = s.req(
            "PUT",
            &format!("/v1/timers/{TENANT}/{key}"),
            r#"{"delay_ms": 500}"#,
        );
        if (200..300).contains(&r.status) {
            let j = r.json();
            probes.push(Acked {
                key,
                version: j["version"].as_u64().expect("version"),
                fire_at_us: j["fire_at_us"].as_u64().expect("fire_at_us"),
            });
            break Instant::now();
        }
        assert_eq!(
            (r.status, r.code().as_str()),
            (503, "store_unavailable"),
            "a write punctual cannot get a replica to hold is refused, not acknowledged"
        );
        assert!(r.header("retry-after").is_some(), "503 without Retry-After");
        assert!(
            switched.elapsed() < Duration::from_secs(30),
            "punctual acknowledged no write within 30 s of the switch\n{}",
            redis.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let mut acked = probes;
    let (mut refused, mut errors) = (0, 0);
    for l in loaders {
        let l = l.join().expect("a load thread panicked");
        acked.extend(l.acked);
        refused += l.refused;
        errors += l.errors;
    }
    assert_eq!(
        errors, 0,
        "requests failed at the transport (hung or reset)"
    );
    assert!(
        acked.len() >= 1000,
        "too few timers acknowledged to mean anything: {}",
        acked.len()
    );
    eprintln!(
        "failover: {} acknowledged, {refused} refused with 503; switch {:.1} s after the kill, acks again {:.1} s after the switch",
        acked.len(),
        (switched - killed).as_secs_f64(),
        (resumed - switched).as_secs_f64()
    );

    // Every acknowledged timer must reach its stream on the new master.
    let last_us = acked.iter().map(|a| a.fire_at_us).max().unwrap_or(0);
    let wait_us = (last_us + 500_000).saturating_sub(now_us());
    std::thread::sleep(Duration::from_micros(wait_us));
    let mut con = redis.replica.client().expect("a client of the new master");
    let give_up = Instant::now() + Duration::from_secs(30);
    let (missing, entries) = loop {
        let entries = match try_read_stream(&mut con, TENANT) {
            Ok(entries) => entries,
            // Sentinel closes the promoted master's normal clients once the switch is done;
            // this reader may be one of them. Connect again and read again.
            Err(e) if Instant::now() < give_up => {
                eprintln!("reading the stream: {e}; connecting again");
                std::thread::sleep(Duration::from_millis(200));
                con = redis.replica.client().expect("a client of the new master");
                continue;
            }
            Err(e) => panic!("XRANGE on the new master: {e}"),
        };
        let mut fired: HashMap<&str, Vec<u64>> = HashMap::new();
        for e in &entries {
            fired.entry(e.key.as_str()).or_default().push(e.version);
        }
        let missing: Vec<Acked> = acked
            .iter()
            .filter(|a| {
                !fired
                    .get(a.key.as_str())
                    .is_some_and(|v| v.contains(&a.version))
            })
            .cloned()
            .collect();
        if missing.is_empty() || Instant::now() > give_up {
            break (missing, entries);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let still_pending: Vec<String> = missing
        .iter()
        .take(10)
        .map(|a| {
            let p = pending_record(&mut con, &a.key);
            format!("{} v{} (pending record: {p:?})", a.key, a.version)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged timers are not in the stream on the new master, e.g. {still_pending:?}",
        missing.len(),
        acked.len()
    );
    let early: Vec<_> = entries
        .iter()
        .filter(|e| e.fired_at_us < e.fire_at_us)
        .collect();
    assert!(early.is_empty(), "fired before the deadline: {early:?}");
    assert_eq!(s.req("GET", "/healthz", "").status, 200);
    eprintln!(
        "failover test: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}

/// The pending record of `key`, if Redis still holds one (searched in every partition: the
/// test does not re-implement the partition hash).
fn pending_record(con: &mut redis::Connection, key: &str) -> Option<String> {
    let field = format!("{TENANT}/{key}");
    (0..1024).find_map(|n| {
        redis::cmd("HGET")
            .arg(format!("punctual:{{p{n}}}:timers"))
            .arg(&field)
            .query::<Option<String>>(con)
            .ok()
            .flatten()
    })
}
