//! `GET /cluster` and `punctual cluster status` on two real `punctual serve` nodes sharing a
//! real Redis Cluster (three masters, a replica each): once the leases settle, either node
//! lists both nodes, every one of the 1,024 partitions held by exactly one of them under an
//! epoch of 1 or more, agreeing with each node's own count in `/healthz`; after one node is
//! SIGKILLed, the survivor's answer shows it holding all 1,024. The CLI (the real binary)
//! prints both nodes and exits 0, and exits nonzero, saying why, against a port where nothing
//! listens and against a node not in cluster mode. With Redis gone, the endpoint answers a
//! bounded `503 store_unavailable`. Every wait is bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
mod openapi_support;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::{free_port, try_request, Server};
use cluster_serve::Proc;
use punctual::nodes::rendezvous::owned_by;
use punctual::nodes::report::Report;
use punctual::partition::PARTITIONS;
use redis_cluster::RedisCluster;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `GET /cluster` at `addr`, checked against `docs/openapi.yaml` and read as a report; `Err`
/// with the status and body otherwise.
fn status_of(addr: SocketAddr) -> Result<Report, String> {
    let r = try_request(addr, "GET", "/cluster", &[], b"").map_err(|e| e.to_string())?;
    spec().check("GET", "/cluster", &r);
    let body = String::from_utf8_lossy(&r.body).into_owned();
    if r.status != 200 {
        return Err(format!("{}: {body}", r.status));
    }
    serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
}

/// The API's document, loaded once.
fn spec() -> &'static openapi_support::Spec {
    static SPEC: std::sync::OnceLock<openapi_support::Spec> = std::sync::OnceLock::new();
    SPEC.get_or_init(openapi_support::Spec::load)
}

/// Partition ranges (`"0-12,15"`) back to the partitions.
fn expand(ranges: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in ranges.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.parse().expect("a number"), b.parse().expect("a number"));
        out.extend(a..=b);
    }
    out
}

/// The report's partitions of live node `id`.
fn held_by(r: &Report, id: &str) -> BTreeSet<u32> {
    r.live
        .iter()
        .filter(|h| h.id == id)
        .flat_map(|h| expand(&h.partitions.ranges))
        .collect()
}

/// Asks `addr` until `settled` holds of its answer; panics with the last answer after 30 s.
fn wait_status(addr: SocketAddr, what: &str, settled: impl Fn(&Report) -> bool) -> Report {
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut last = Err(String::from("not asked"));
    while Instant::now() < give_up {
        last = status_of(addr);
        if let Ok(r) = &last {
            if settled(r) {
                return r.clone();
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no answer of {addr} where {what} in 30 s; last: {last:?}");
}

/// `punctual cluster status` with `args`, at most 20 s.
fn cli(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["cluster", "status"])
        .args(args)
        .env_remove("PUNCTUAL_URL")
        .env_remove("PUNCTUAL_METRICS_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn punctual cluster status");
    let give_up = Instant::now() + Duration::from_secs(20);
    while Instant::now() < give_up {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("its output");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("punctual cluster status {args:?} still running after 20 s");
}

#[test]
fn two_nodes_report_every_partition_held_once_and_the_survivor_takes_all_after_a_kill() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let addrs: [SocketAddr; 2] = [0, 1].map(|_| {
        format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("an address")
    });
    let ids = addrs.map(|a| a.to_string());
    let shares = [0, 1].map(|i| owned_by(&ids[i], &ids).len() as u64);
    let mut procs =
        [0, 1].map(|i| Proc::spawn(addrs[i], &cluster.url(), dir.path(), &format!("node{i}")));
    for i in 0..2 {
        procs[i].wait_partitions(addrs[i], shares[i]);
    }
    // Both nodes, every partition held once, by either node's answer, and the answering node's
    // view caught up with the live set. (Started together, a node whose first heartbeat saw
    // itself alone can hold exactly its share, the rest taken by the other, while its view
    // still gives it everything: for up to a round, `should_own` shows the lag.)
    let settled = |r: &Report| {
        r.live.len() == 2
            && r.unowned.count == 0
            && r.not_live.is_empty()
            && r.live.iter().map(|h| h.partitions.count).sum::<u32>() == PARTITIONS
            && r.this_node.holds == r.this_node.should_own
    };
    for (i, &addr) in addrs.iter().enumerate() {
        let r = wait_status(addr, "both nodes hold every partition", settled);
        let live: Vec<&str> = r.live.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(live, {
            let mut s = ids.iter().map(String::as_str).collect::<Vec<_>>();
            s.sort();
            s
        });
        let a = held_by(&r, &ids[0]);
        let b = held_by(&r, &ids[1]);
        assert!(a.is_disjoint(&b), "a partition held by both");
        assert_eq!(a.len() + b.len(), PARTITIONS as usize);
        assert_eq!(
            a.union(&b).copied().collect::<Vec<_>>(),
            (0..PARTITIONS).collect::<Vec<_>>()
        );
        for h in &r.live {
            let e = h.epochs.as_ref().expect("a holder's epochs");
            assert!(e.min >= 1 && e.max >= e.min, "{e:?}");
            assert_eq!(h.advertise.as_deref(), Some(h.id.as_str()));
            assert!(h.started_at_us.is_some_and(|t| t > 0));
        }
        // Agrees with each node's own count of what it loaded, and with this node's view.
        for (j, id) in ids.iter().enumerate() {
            assert_eq!(held_by(&r, id).len() as u64, shares[j], "{id}'s share");
            // `/healthz` counts what the node loaded, a moment behind its leases: bounded.
            procs[j].wait_partitions(addrs[j], shares[j]);
        }
        assert_eq!(r.this_node.id, ids[i]);
        assert_eq!(r.this_node.holds.count as u64, shares[i]);
    }
    // Many at once (over both shards) share reads, and every one is answered.
    std::thread::scope(|scope| {
        let asks: Vec<_> = (0..32)
            .map(|_| scope.spawn(|| status_of(addrs[0])))
            .collect();
        for ask in asks {
            let r = ask.join().expect("no panic").expect("answered 200");
            assert_eq!(r.live.len(), 2);
        }
    });
    // The CLI prints both nodes.
    let url = format!("http://{}", addrs[0]);
    let out = cli(&["--url", &url]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for id in &ids {
        assert!(text.contains(id.as_str()), "{id} in:\n{text}");
    }
    assert!(text.contains("unowned partitions: 0"), "{text}");
    eprintln!("punctual cluster status --url {url}:\n{text}");
    let out = cli(&["--url", &url, "--json"]);
    assert!(out.status.success());
    let r: Report = serde_json::from_slice(&out.stdout).expect("--json prints the report");
    assert_eq!(r.live.len(), 2);
    // One node killed: the survivor's answer shows it holding every partition.
    procs[1].sigkill();
    let r = wait_status(addrs[0], "the survivor holds every partition", |r| {
        r.live.len() == 1 && held_by(r, &ids[0]).len() == PARTITIONS as usize
    });
    assert_eq!(r.unowned.count, 0);
    assert!(r.not_live.is_empty(), "{:?}", r.not_live);
    let e = r.live[0].epochs.as_ref().expect("epochs");
    assert!(e.min >= 1, "{e:?}");
    procs[0].wait_partitions(addrs[0], PARTITIONS as u64);
    // Redis gone: the answer is a bounded 503 that says Redis did not answer, never a hang.
    let mut cluster = cluster;
    for n in &mut cluster.nodes {
        n.kill();
    }
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let asked = Instant::now();
        let r = try_request(addrs[0], "GET", "/cluster", &[], b"").expect("answered");
        let took = asked.elapsed();
        assert!(took < Duration::from_secs(10), "answered after {took:?}");
        if r.status == 503 {
            spec().check("GET", "/cluster", &r);
            assert_eq!(r.code(), "store_unavailable");
            let text = String::from_utf8_lossy(&r.body);
            assert!(text.contains("Redis"), "{text}");
            break;
        }
        assert!(
            Instant::now() < give_up,
            "still {} with Redis gone",
            r.status
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_cli_fails_clearly_against_nothing_listening_and_a_node_not_in_cluster_mode() {
    let (_held, port) = api_support::refused_port();
    let nothing = format!("http://127.0.0.1:{port}");
    let out = cli(&["--url", &nothing]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("cannot reach") && err.contains(&nothing),
        "{err}"
    );

    let alone = Server::start(&[]);
    let r = try_request(alone.addr, "GET", "/cluster", &[], b"").expect("answered");
    assert_eq!(r.status, 404);
    assert_eq!(r.code(), "not_found");
    let out = cli(&["--url", &format!("http://{}", alone.addr)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("not a node in cluster mode"), "{err}");

    let out = cli(&["--url", "ftp://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2), "a URL it cannot use");
}
