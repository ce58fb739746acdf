//! What a planned join does to webhooks in flight, against a real Redis Cluster and real
//! `punctual serve` nodes: how many deliveries it duplicates, measured.
//!
//! Node A alone holds every partition; webhook timers fire there and their deliveries are under
//! way (the receiver answers 200 after [`ANSWER_AFTER`]) when node C joins and takes its share.
//! A drops each moved partition; the delivery it had started completes, but its outcome is
//! written under a lease A no longer holds, so it is not written: the record C loads still says
//! "in flight", and C delivers it again at its safety net (the webhook timeout and 1 s after
//! the fire). So a join delivers twice exactly the webhooks that were in flight on the
//! partitions that moved, and no other: at least once, never lost. The figure is printed and
//! recorded in `docs/SCALING.md`. Every wait is bounded; the test takes about 15 s.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::try_request;
use cluster_serve::{cluster_with_config, node_addr, put_hook, share, Proc};
use punctual::nodes::rendezvous::owned_by;
use punctual::partition::{partition_of, PARTITIONS};
use receiver::{Receiver, Reply};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long the receiver takes to answer each delivery: longer than a join takes.
const ANSWER_AFTER: Duration = Duration::from_millis(3_000);

/// Webhook timers in flight at the join.
const TIMERS: usize = 60;

#[test]
fn a_join_delivers_twice_only_the_webhooks_in_flight_on_the_partitions_that_moved() {
    let rx = Receiver::start(|_, _| Reply::status(200).after(ANSWER_AFTER));
    // The safety net of a delivery in flight: 4 s + 1 s after its fire.
    let (cluster, dir, config) = cluster_with_config(&rx.base(), "webhook_timeout_ms = 4000\n");
    let extra = config.each_ref().map(String::as_str);
    let url = cluster.url();
    let (a, c) = (node_addr(), node_addr());
    let mut node_a = Proc::spawn_with(a, &url, dir.path(), "a", &extra);
    node_a.wait_healthy(a);

    let keys: Vec<String> = (0..TIMERS).map(|i| format!("hook-{i}")).collect();
    for key in &keys {
        put_hook(a, "shop", key, 100, &rx.url("hook"));
    }
    let in_flight = rx.wait(Duration::from_secs(10), |r| r.len() >= TIMERS);
    assert_eq!(in_flight.len(), TIMERS, "every delivery under way at A");
    let joined = Instant::now();

    // C joins while every answer is still due.
    let ids = [a.to_string(), c.to_string()];
    let moved: BTreeSet<u32> = owned_by(&ids[1], &ids).into_iter().collect();
    let mut node_c = Proc::spawn_with(c, &url, dir.path(), "c", &extra);
    node_c.wait_settled(c, share(c, &[a, c]), 2);
    node_a.wait_settled(a, PARTITIONS as u64 - moved.len() as u64, 2);
    assert!(
        joined.elapsed() < ANSWER_AFTER,
        "the join took longer than the deliveries: nothing was in flight at the drop"
    );

    let on_moved: BTreeSet<&String> = keys
        .iter()
        .filter(|k| moved.contains(&partition_of("shop", k)))
        .collect();
    assert!(!on_moved.is_empty() && on_moved.len() < TIMERS);
    let want = TIMERS + on_moved.len();
    rx.wait(Duration::from_secs(20), |r| r.len() >= want);
    // Every delivery answered and its outcome written (bounded), then past a safety net more,
    // for any delivery more than the measure allows.
    let give_up = Instant::now() + Duration::from_secs(15);
    for key in &keys {
        let path = format!("/v1/timers/shop/{key}");
        while try_request(a, "GET", &path, &[], b"").map_or(true, |r| r.status != 404) {
            assert!(Instant::now() < give_up, "{key} still pending after 15 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    std::thread::sleep(Duration::from_millis(1_000));
    let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
    for r in rx.received() {
        let key = r.json()["key"].as_str().unwrap_or("?").to_owned();
        *per_key.entry(key).or_insert(0) += 1;
    }
    let twice: BTreeSet<&String> = per_key
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(k, _)| k)
        .collect();
    eprintln!(
        "a join with {TIMERS} webhooks in flight, {} of them on partitions that moved: {} delivered twice ({} deliveries in all)",
        on_moved.len(),
        twice.len(),
        rx.received().len()
    );
    assert_eq!(
        per_key.len(),
        TIMERS,
        "every webhook delivered: {per_key:?}"
    );
    assert!(
        per_key.values().all(|&n| n <= 2),
        "a webhook delivered more than twice: {per_key:?}"
    );
    assert!(
        twice.iter().all(|k| on_moved.contains(k)),
        "a webhook that did not move delivered twice: {twice:?}"
    );
}
