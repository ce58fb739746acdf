//! A key's versions only grow across the owners of its partition, against a real Redis Cluster
//! and real `punctual serve` nodes, one of them with its clock behind (libfaketime).
//!
//! A version names one scheduling of a key (webhooks carry `tenant/key/version` as their
//! idempotency key), so a new scheduling must never repeat or undercut one acknowledged
//! before, even by another node whose clock is behind. A key fired or cancelled at the old
//! owner leaves no record for the new owner to count on from; the partition's version floor,
//! raised in Redis with every record written, is what it counts on from.
//!
//! The skew is two minutes, not the few hundred milliseconds NTP leaves between hosts: a
//! handoff takes longer than that, so with a small skew a broken build would pass by timing
//! alone. Whatever the skew, the defect is the same. Every wait is bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::try_request;
use cluster_serve::{node_addr, Proc};
use redis_cluster::RedisCluster;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// libfaketime, which makes a process's CLOCK_REALTIME run at an offset.
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// How far behind the second owner's clock runs.
const BEHIND_S: u64 = 120;

fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// PUT of `tenant/key`: its (version, fire_at_us); panics unless acknowledged.
fn put(at: SocketAddr, key: &str, delay_ms: u64) -> (u64, u64) {
    let path = format!("/v1/timers/shop/{key}");
    let body = format!(r#"{{"delay_ms":{delay_ms}}}"#);
    let r = try_request(at, "PUT", &path, &[], body.as_bytes()).expect("PUT answered");
    assert!(matches!(r.status, 200 | 201), "PUT {path}: {}", r.status);
    let j = r.json();
    (
        j["version"].as_u64().expect("version"),
        j["fire_at_us"].as_u64().expect("fire_at_us"),
    )
}

/// Waits until `GET` of `key` answers 404 (it fired); panics after 20 s.
fn wait_gone(at: SocketAddr, key: &str) {
    let path = format!("/v1/timers/shop/{key}");
    let give_up = Instant::now() + Duration::from_secs(20);
    while Instant::now() < give_up {
        if try_request(at, "GET", &path, &[], b"").is_ok_and(|r| r.status == 404) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{key} did not fire in 20 s");
}

#[test]
fn a_new_owner_whose_clock_is_behind_never_repeats_or_undercuts_an_acknowledged_version() {
    assert!(
        Path::new(FAKETIME).exists(),
        "this test needs libfaketime ({FAKETIME}): apt-get install libfaketime"
    );
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let url = cluster.url();

    // The first owner, on the host's clock, holds every partition. Keys it cancels and keys
    // it fires leave no record behind.
    let a = node_addr();
    let mut first = Proc::spawn(a, &url, dir.path(), "first");
    first.wait_healthy(a);
    let keys: Vec<String> = (0..40).map(|i| format!("k-{i}")).collect();
    let mut before = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        if i % 2 == 0 {
            before.push(put(a, key, 3_600_000).0);
            let path = format!("/v1/timers/shop/{key}");
            let r = try_request(a, "DELETE", &path, &[], b"").expect("DELETE answered");
            assert_eq!(r.status, 204, "DELETE {path}");
        } else {
            before.push(put(a, key, 50).0);
        }
    }
    for key in keys.iter().skip(1).step_by(2) {
        wait_gone(a, key);
    }
    // A SIGTERM releases every lease: the next owner takes them at once.
    assert!(first.sigterm().success(), "{}", first.stderr_text());

    // The next owner's clock runs two minutes behind the first's.
    let b = node_addr();
    let offset = format!("-{BEHIND_S}s");
    let mut next = Proc::spawn_env(
        b,
        &url,
        dir.path(),
        "next",
        &[],
        &[
            ("LD_PRELOAD", FAKETIME),
            ("FAKETIME", &offset),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    next.wait_healthy(b);
    let real_now_us = wall_us();
    for (key, &old) in keys.iter().zip(&before) {
        let (v, fire_at) = put(b, key, 3_600_000);
        assert!(
            fire_at + (BEHIND_S - 30) * 1_000_000 < real_now_us + 3_600_000_000,
            "the next owner's clock is not behind (libfaketime not in effect): {fire_at}"
        );
        assert!(
            v > old,
            "{key}: version {v} from the next owner after {old} was acknowledged by the first"
        );
    }
}
