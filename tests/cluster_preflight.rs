//! What a node checks of its Redis Cluster at start, against a real cluster (three masters, a
//! replica each) whose masters evict any key under memory pressure (`allkeys-lru`): the real
//! binary refuses to start a node among others, says why and how to override; overridden, it
//! starts and warns; `punctual doctor --redis` reports the same as a FAIL; and every start warns
//! that `--redis-wait-replicas 0` is below the replicas Redis reports. Every wait is bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use cluster_serve::{node_addr, Proc};
use redis_cluster::RedisCluster;
use std::process::Command;
use std::time::{Duration, Instant};

/// Waits (bounded) for `p` to exit; its stderr.
fn exited(p: &mut Proc) -> String {
    let give_up = Instant::now() + Duration::from_secs(30);
    while !p.exited() {
        assert!(
            Instant::now() < give_up,
            "still running: {}",
            p.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    p.stderr_text()
}

#[test]
fn an_evicting_cluster_is_refused_unless_overridden_and_doctor_fails_it() {
    let cluster = RedisCluster::start_with(&["maxmemory-policy allkeys-lru"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let url = cluster.url();

    let refused_at = node_addr();
    let mut refused = Proc::spawn(refused_at, &url, dir.path(), "refused");
    let said = exited(&mut refused);
    assert!(
        said.contains("allkeys-lru") && said.contains("--redis-allow-eviction"),
        "{said}"
    );

    let allowed_at = node_addr();
    let mut allowed = Proc::spawn_with(
        allowed_at,
        &url,
        dir.path(),
        "allowed",
        &["--redis-allow-eviction"],
    );
    allowed.wait_healthy(allowed_at);
    let said = allowed.stderr_text();
    assert!(said.contains("allkeys-lru"), "warned: {said}");
    assert!(
        said.contains("--redis-wait-replicas is 0 but a master has 1 replicas"),
        "{said}"
    );

    let doctor = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["doctor", "--json", "--redis", &url])
        .output()
        .expect("doctor runs");
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).expect("doctor's JSON");
    let status_of = |id: &str| {
        report["checks"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["id"] == id))
            .map(|c| c["status"].as_str().unwrap_or("?").to_owned())
    };
    assert_eq!(status_of("redis.maxmemory_policy").as_deref(), Some("fail"));
    assert_eq!(status_of("redis.wait_replicas").as_deref(), Some("warn"));
    assert_eq!(doctor.status.code(), Some(1), "a FAIL fails the doctor");
}
