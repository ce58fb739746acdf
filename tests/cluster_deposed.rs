//! A deposed node acts on nothing it lost, against a real Redis Cluster (three masters, a
//! replica each) and two real `punctual serve` nodes.
//!
//! Node A holds its share of the partitions with timers due in them: timers that only write
//! their fired stream entry, webhook timers whose receiver answers 200, and webhook timers
//! whose receiver answers 410 (each a dead letter at its first attempt). A is stopped
//! (`SIGSTOP`, as a long GC pause, a frozen VM or a partitioned host would) before any of them
//! is due, for longer than the lease TTL; node B takes every partition, loads A's timers and
//! fires them. Only then is A woken (`SIGCONT`), with all of those timers overdue in its wheel.
//! A must fire, deliver and write nothing for the partitions it lost: every timer fires once
//! (one fired stream entry, with the version it was acknowledged with), each webhook is
//! delivered once, each dead letter is written once (one entry in the tenant's dead stream, one
//! record in the partition's dead hash), and no pending record is left. A then rejoins and
//! takes its share back. Every wait is bounded; the test takes about 20 s.

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
use cluster_serve::{
    check, cluster_with_config, node_addr, put_hook, wait_all_fired, Book, Proc, Promise, Reader,
};
use punctual::nodes::rendezvous::owned_by;
use punctual::partition::{partition_of, PARTITIONS};
use punctual::store::redis::cluster::slot::{partition_slot, slot_of};
use punctual::store::redis::dead::dead_key;
use receiver::{Receiver, Reply};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Timers of each kind.
const EACH: usize = 30;

/// `n` keys of tenant `shop` named `<prefix>-<i>` whose partitions `share` holds.
fn keys_in(share: &BTreeSet<u32>, prefix: &str, n: usize) -> Vec<String> {
    (0u64..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|k| share.contains(&partition_of("shop", k)))
        .take(n)
        .collect()
}

/// PUT of a webhook timer to `url`, booked in `book` (its fire writes a fired stream entry
/// too). Panics unless acknowledged.
fn book_hook(book: &mut Book, at: SocketAddr, key: &str, delay_ms: u64, url: &str) {
    let j = put_hook(at, "shop", key, delay_ms, url);
    book.promises.insert(
        ("shop".to_owned(), key.to_owned()),
        Promise {
            version: j["version"].as_u64().expect("version"),
            fire_at_us: j["fire_at_us"].as_u64().expect("fire_at_us"),
            cancelled: false,
            replaced: Vec::new(),
        },
    );
}

/// Webhook requests received per timer key (the `key` of the body).
fn per_key(rx: &Receiver, path: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in rx.to(path) {
        let key = r.json()["key"].as_str().unwrap_or("?").to_owned();
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

/// The `key` field of every entry of tenant `shop`'s dead stream, by key.
fn dead_entries(reader: &mut Reader<'_>) -> BTreeMap<String, usize> {
    let stream = "punctual:dead:{shop}";
    let v: redis::Value = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query(reader.master(slot_of(stream.as_bytes())))
        .expect("XRANGE");
    let mut out = BTreeMap::new();
    let redis::Value::Array(entries) = v else {
        return out;
    };
    for e in entries {
        let redis::Value::Array(mut parts) = e else {
            continue;
        };
        let Some(redis::Value::Array(fields)) = parts.pop() else {
            continue;
        };
        for pair in fields.chunks_exact(2) {
            if let [redis::Value::BulkString(k), redis::Value::BulkString(v)] = pair {
                if k == b"key" {
                    let key = String::from_utf8_lossy(v).into_owned();
                    *out.entry(key).or_insert(0) += 1;
                }
            }
        }
    }
    out
}

/// Dead letters recorded in all partitions' dead hashes.
fn dead_records(reader: &mut Reader<'_>) -> u64 {
    (0..PARTITIONS)
        .map(|p| {
            let n: u64 = redis::cmd("HLEN")
                .arg(dead_key(p))
                .query(reader.master(partition_slot(p)))
                .expect("HLEN");
            n
        })
        .sum()
}

fn signal(proc: &Proc, sig: i32) {
    // SAFETY: kill(2) on the pid of a child the test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(proc.pid(), sig) }, 0);
}

/// Polls `done` every 50 ms; panics with `what` after `limit`.
fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < give_up, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_stopped_past_its_leases_fires_delivers_and_writes_nothing_for_what_it_lost() {
    let rx = Receiver::start(|r, _| {
        if r.path.ends_with("gone") {
            Reply::status(410)
        } else {
            Reply::status(200)
        }
    });
    let (cluster, dir, config) = cluster_with_config(&rx.base(), "");
    let extra = config.each_ref().map(String::as_str);
    let url = cluster.url();
    let (a, b) = (node_addr(), node_addr());
    let ids = [a.to_string(), b.to_string()];
    let share_a: BTreeSet<u32> = owned_by(&ids[0], &ids).into_iter().collect();
    let share_b = PARTITIONS as u64 - share_a.len() as u64;
    let mut node_a = Proc::spawn_with(a, &url, dir.path(), "a", &extra);
    let mut node_b = Proc::spawn_with(b, &url, dir.path(), "b", &extra);
    node_a.wait_settled(a, share_a.len() as u64, 2);
    node_b.wait_settled(b, share_b, 2);

    // Timers on A's partitions, due 2 to 3.5 s from now: after A is stopped.
    let (plain, ok, gone) = (
        keys_in(&share_a, "plain", EACH),
        keys_in(&share_a, "ok", EACH),
        keys_in(&share_a, "gone", EACH),
    );
    let mut book = Book::default();
    for (i, key) in plain.iter().enumerate() {
        book.put(a, "shop", key, 2_000 + 50 * i as u64, "deposed");
    }
    for (i, key) in ok.iter().enumerate() {
        book_hook(&mut book, a, key, 2_000 + 50 * i as u64, &rx.url("ok"));
    }
    for (i, key) in gone.iter().enumerate() {
        book_hook(&mut book, a, key, 2_000 + 50 * i as u64, &rx.url("gone"));
    }
    assert!(rx.received().is_empty(), "nothing is due yet");

    signal(&node_a, libc::SIGSTOP);
    let stopped = Instant::now();
    // B takes every partition once A's leases lapse (3 s), and fires A's timers.
    node_b.wait_partitions(b, PARTITIONS as u64);
    let mut reader = Reader::new(&cluster);
    wait_for(Duration::from_secs(20), "B fires what A held", || {
        per_key(&rx, "/ok").len() == EACH
            && dead_entries(&mut reader).len() == EACH
            && reader.pending_records() == 0
    });
    let streams_before = reader.streams(&book.tenants());
    assert!(
        stopped.elapsed() > Duration::from_secs(3),
        "A was stopped past its leases' TTL"
    );

    // A wakes with every one of those timers overdue in its wheel, and its writes queued.
    signal(&node_a, libc::SIGCONT);
    node_a.wait_settled(a, share_a.len() as u64, 2);
    node_b.wait_settled(b, share_b, 2);
    // Past a round of A's, which would have fired anything left in its wheel.
    std::thread::sleep(Duration::from_millis(1_500));

    let streams = wait_all_fired(&mut reader, &book);
    assert_eq!(
        check(&book, &streams),
        0,
        "a timer fired twice (A fired what it lost)"
    );
    assert_eq!(
        cluster_serve::count(&streams),
        cluster_serve::count(&streams_before),
        "A wrote fired stream entries after it was woken"
    );
    let delivered = per_key(&rx, "/ok");
    assert_eq!(delivered.len(), EACH);
    assert!(
        delivered.values().all(|&n| n == 1),
        "a webhook delivered twice: {delivered:?}"
    );
    let attempts = per_key(&rx, "/gone");
    assert!(
        attempts.len() == EACH && attempts.values().all(|&n| n == 1),
        "a failing webhook attempted twice: {attempts:?}"
    );
    let letters = dead_entries(&mut reader);
    assert!(
        letters.len() == EACH && letters.values().all(|&n| n == 1),
        "a dead letter written twice: {letters:?}"
    );
    assert_eq!(dead_records(&mut reader), EACH as u64);
    assert_eq!(reader.pending_records(), 0, "a timer record written back");
    for (_, key) in book.promises.keys() {
        let r = try_request(b, "GET", &format!("/v1/timers/shop/{key}"), &[], b"")
            .expect("GET answered");
        assert_eq!(r.status, 404, "{key} pending again");
    }
}
