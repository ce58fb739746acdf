//! Recurring schedules on two `punctual serve` nodes sharing one real Redis Cluster
//! (`--advertise`): a schedule is served through either node (forwarded to its partition's
//! owner), listed and counted against `max_schedules` across both, and fired by its owner
//! alone: each occurrence once, under one version, never early. When the owner is SIGKILLed
//! the survivor takes its partition once the lease lapses and fires on from the cursor Redis
//! holds, firing no occurrence again. Nothing asserts a duration; every wait is bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/occurrences.rs"]
mod occurrences;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::{free_port, try_request};
use cluster_serve::{Proc, Reader};
use occurrences::{now_us, occurrences, once_each};
use punctual::nodes::rendezvous::owned_by;
use punctual::partition::{partition_of, PARTITIONS};
use redis_cluster::RedisCluster;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let r = try_request(addr, method, path, &[], body.as_bytes()).expect("a request");
    (r.status, r.json())
}

/// Keys of the form `{stem}-N`, the first owned by the node of `share`.
fn key_in(share: &BTreeSet<u32>, stem: &str) -> String {
    (0..)
        .map(|i| format!("{stem}-{i}"))
        .find(|k| share.contains(&partition_of("shop", k)))
        .expect("a key")
}

#[test]
fn two_nodes_fire_each_occurrence_once_and_the_survivor_goes_on_after_a_kill() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = cluster.url();
    let addrs: [SocketAddr; 2] =
        [0, 1].map(|_| format!("127.0.0.1:{}", free_port()).parse().expect("addr"));
    let ids = addrs.map(|a| a.to_string());
    let extra = ["--max-schedules", "2"];
    let mut procs =
        [0, 1].map(|i| Proc::spawn_with(addrs[i], &url, dir.path(), &format!("node{i}"), &extra));
    let shares: [BTreeSet<u32>; 2] = [0, 1].map(|i| owned_by(&ids[i], &ids).into_iter().collect());
    for i in 0..2 {
        procs[i].wait_settled(addrs[i], shares[i].len() as u64, 2);
    }
    let [a, b] = addrs;
    // `tick` on b (the node to kill), `beat` on a; each written through the other node.
    let (tick, beat) = (key_in(&shares[1], "tick"), key_in(&shares[0], "beat"));
    let every = r#"{"every_ms": 1000, "catch_up": {"policy": "all", "window_ms": 60000}}"#;
    let (status, put) = call(a, "PUT", &format!("/v1/schedules/shop/{tick}"), every);
    assert_eq!(status, 201, "{put}");
    let (status, put) = call(b, "PUT", &format!("/v1/schedules/shop/{beat}"), every);
    assert_eq!(status, 201, "{put}");
    // The quota counts both nodes' schedules, from either.
    for at in [a, b] {
        let (status, refused) = call(at, "PUT", "/v1/schedules/shop/third", every);
        assert_eq!(status, 429, "{refused}");
        let (status, listed) = call(at, "GET", "/v1/schedules/shop", "");
        assert_eq!(status, 200, "{listed}");
        let keys: Vec<&str> = listed["schedules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["key"].as_str())
            .collect();
        let mut want = vec![beat.as_str(), tick.as_str()];
        want.sort_unstable();
        assert_eq!(keys, want, "{listed}");
        let (status, page) = call(at, "GET", "/v1/schedules/shop?limit=1", "");
        assert_eq!(
            (status, page["next"].as_str()),
            (200, Some(want[0])),
            "{page}"
        );
    }

    let mut reader = Reader::new(&cluster);
    let tenants: BTreeSet<String> = ["shop".to_string()].into();
    let wait_tick_past = |reader: &mut Reader<'_>, past_us: u64| {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            let entries = reader.streams(&tenants).remove("shop").unwrap_or_default();
            let done = occurrences(&entries, &tick)
                .iter()
                .any(|o| o.occurrence_us > past_us);
            if done || Instant::now() > give_up {
                return entries;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let before = wait_tick_past(&mut reader, now_us() + 2_000_000);
    assert!(once_each(&occurrences(&before, &tick)).len() >= 3);
    once_each(&occurrences(&before, &beat));

    // The owner of `tick` killed: the survivor takes every partition, and `tick` goes on from
    // the cursor in Redis, each occurrence once, the missed ones caught up.
    procs[1].sigkill();
    let killed_us = now_us();
    procs[0].wait_partitions(a, PARTITIONS as u64);
    let entries = wait_tick_past(&mut reader, now_us() + 2_000_000);
    let seq = once_each(&occurrences(&entries, &tick));
    assert!(
        seq.iter()
            .any(|o| o.occurrence_us > killed_us && o.caught_up),
        "the occurrences due while no node held the partition fire, caught up: {seq:#?}"
    );
    for w in seq.windows(2) {
        assert_eq!(
            w[1].occurrence_us - w[0].occurrence_us,
            1_000_000,
            "{seq:#?}"
        );
    }
    once_each(&occurrences(&entries, &beat));
    let (status, got) = call(a, "GET", &format!("/v1/schedules/shop/{tick}"), "");
    assert_eq!(status, 200, "{got}");
    assert!(
        got["sequence"].as_u64() >= seq.last().map(|o| o.sequence),
        "{got}"
    );
    assert_eq!(
        call(a, "DELETE", &format!("/v1/schedules/shop/{tick}"), "").0,
        204
    );
    assert_eq!(call(a, "PUT", "/v1/schedules/shop/third", every).0, 201);
}
