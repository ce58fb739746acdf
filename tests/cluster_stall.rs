//! Every Redis master stalls past the lease TTL at once (`DEBUG SLEEP`, as an AOF fsync stall,
//! a fork for a large `BGSAVE` or a short network partition would), under load, with three
//! real `punctual serve` nodes on a real Redis Cluster (three masters, a replica each, a
//! cluster node timeout long enough that no failover happens). Every lease lapses together;
//! each node must tell its shards every partition lost, acquire it again under a new epoch and
//! load it afresh. Then every acknowledged timer fires once with the version it was
//! acknowledged with, none early, none later than [`LATE`] after its deadline or the stall's
//! end, whichever is later; every partition is held and loaded again, and none is reported
//! held but not loaded. Every wait is bounded; the test takes about 40 s.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::try_request;
use cluster_serve::{check, metrics, node_addr, sample, share, wait_all_fired, Book, Proc, Reader};
use redis_cluster::RedisCluster;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long every master sleeps: past the 3 s lease TTL.
const STALL: Duration = Duration::from_millis(4_500);

/// The latest a timer may fire after its deadline or the stall's end, whichever is later:
/// the lease TTL and 2 s. A partition never loaded again would exceed it by far (forever).
const LATE: Duration = Duration::from_secs(5);

fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// PUTs timers through `at` every 10 ms until `stop`, due 4 to 9 s out, under keys of
/// `writer`'s own: the acknowledged ones booked; the others (refused or unanswered while the
/// masters sleep) kept by (tenant, key): one that timed out may still have been applied, and
/// fires like any other.
fn write_while(at: SocketAddr, writer: usize, stop: &AtomicBool) -> (Book, Vec<(String, String)>) {
    let mut book = Book::default();
    let mut refused = Vec::new();
    for i in 0u64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let tenant = format!("shop{}", i % 3);
        let delay = 4_000 + (i * 131) % 5_000;
        let key = format!("w{writer}-{i}");
        if book.try_put(at, &tenant, &key, delay, "stall").is_err() {
            refused.push((tenant.clone(), key.clone()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (book, refused)
}

/// What the node at `addr` reports: [owned, loaded, held but not loaded for over 5 s] from
/// `/metrics`, and its `/healthz` status.
fn report(addr: SocketAddr) -> ([u64; 3], String) {
    let text = metrics(addr);
    let counts = [
        "punctual_cluster_partitions_owned",
        "punctual_cluster_partitions_loaded",
        "punctual_cluster_partitions_load_overdue",
    ]
    .map(|name| sample(&text, name));
    let health = try_request(addr, "GET", "/healthz", &[], b"")
        .map(|r| r.json()["status"].as_str().unwrap_or("?").to_owned())
        .unwrap_or_default();
    (counts, health)
}

#[test]
fn every_master_stalled_past_the_lease_ttl_loses_no_acknowledged_timer() {
    let started = Instant::now();
    let cluster = RedisCluster::start_with(&[
        "enable-debug-command local",
        // No failover during the stall: the masters come back as they were.
        "cluster-node-timeout 15000",
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let url = cluster.url();
    let nodes = [node_addr(), node_addr(), node_addr()];
    let mut procs: Vec<Proc> = nodes
        .iter()
        .zip(["a", "b", "c"])
        .map(|(&n, name)| {
            Proc::spawn_with(n, &url, dir.path(), name, &["--redis-wait-replicas", "1"])
        })
        .collect();
    for (p, &n) in procs.iter_mut().zip(&nodes) {
        p.wait_settled(n, share(n, &nodes), 3);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(w, &n)| {
            let stop = stop.clone();
            std::thread::spawn(move || write_while(n, w, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1_500));
    let sleep_arg = format!("{:.1}", STALL.as_secs_f64());
    let sleepers: Vec<_> = cluster
        .masters()
        .into_iter()
        .map(|port| {
            Command::new("redis-cli")
                .args(["-p", &port.to_string(), "DEBUG", "SLEEP", &sleep_arg])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("redis-cli")
        })
        .collect();
    for mut s in sleepers {
        assert!(
            s.wait().expect("redis-cli ends").success(),
            "DEBUG SLEEP ran"
        );
    }
    let stall_end_us = wall_us();
    let stall_end = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let mut book = Book::default();
    let mut refused = Vec::new();
    for w in writers {
        let (b, r) = w.join().expect("a writer");
        book.promises.extend(b.promises);
        refused.extend(r);
    }
    eprintln!(
        "acknowledged {}, not acknowledged {}",
        book.promises.len(),
        refused.len()
    );
    assert!(book.promises.len() > 200, "the writers wrote");

    // Every partition held and loaded again, and none reported held but not loaded.
    let give_up = stall_end + Duration::from_secs(30);
    for (p, &n) in procs.iter_mut().zip(&nodes) {
        let want = ([share(n, &nodes), share(n, &nodes), 0], "ok".to_owned());
        loop {
            let seen = report(n);
            if seen == want {
                break;
            }
            assert!(
                Instant::now() < give_up,
                "{n} never held and loaded its share again: [owned, loaded, overdue], \
                 health {seen:?}, not {want:?}\n{}",
                p.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    eprintln!("settled {:?} after the stall", stall_end.elapsed());

    let mut reader = Reader::new(&cluster);
    let mut streams = wait_all_fired(&mut reader, &book);
    // A write not acknowledged may have been applied (its answer timed out): its fire is
    // neither promised nor forbidden.
    let unpromised: std::collections::HashSet<(String, String)> = refused
        .into_iter()
        .filter(|id| !book.promises.contains_key(id))
        .collect();
    for (tenant, entries) in streams.iter_mut() {
        entries.retain(|e| !unpromised.contains(&(tenant.clone(), e.key.clone())));
    }
    let repeats = check(&book, &streams);
    assert_eq!(repeats, 0, "every stream entry is fenced: none lands twice");
    assert_eq!(reader.pending_records(), 0, "records left after every fire");
    let worst = streams
        .values()
        .flatten()
        .map(|e| e.fired_at_us.saturating_sub(e.fire_at_us.max(stall_end_us)))
        .max()
        .unwrap_or(0);
    eprintln!(
        "latest fire {} ms past its deadline or the stall's end; test took {:?}",
        worst / 1_000,
        started.elapsed()
    );
    assert!(
        worst <= LATE.as_micros() as u64,
        "a timer fired {} ms past max(deadline, stall end)",
        worst / 1_000
    );
}
