//! Two `punctual serve` nodes sharing one Redis Cluster (`--advertise`): the real binary twice,
//! real TCP, a real cluster of three masters with a replica each. Each node holds the leases of
//! its rendezvous share of the 1,024 partitions and loads them; a request for the other node's
//! partition is answered 503 naming it; every acknowledged timer fires once, from the node that
//! owns it, with the version and deadline it was acknowledged with, never early. When one node
//! is SIGKILLed, the survivor takes its partitions once their leases lapse, loads them and fires
//! their pending timers: none lost, none early. When one is stopped with SIGTERM, it exits 0
//! having released its leases, and the other takes them at once. Nothing asserts a duration beyond an "absurdly
//! late" bound; every wait is bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::{free_port, try_request};
use cluster_serve::CLUSTER_SECRET;
use cluster_serve::{check, counter, forwarded, metrics, wait_all_fired, Book, Proc, Reader};
use punctual::nodes::rendezvous::owned_by;
use punctual::partition::{partition_of, PARTITIONS};
use redis_cluster::RedisCluster;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The header of a request another node forwarded: such a request is never forwarded again.
const FORWARDED: (&str, &str) = ("punctual-forwarded", "127.0.0.1:1");

/// The headers of a request another node forwarded, signed now with the cluster's secret,
/// then `extra`.
fn as_forwarded(
    method: &str,
    path: &str,
    extra: &[(&'static str, &str)],
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let auth = extra
        .iter()
        .find(|(k, _)| *k == "authorization")
        .map_or("", |(_, v)| *v);
    let now = punctual::api::forward_sign::now_ms();
    let signed = forwarded(CLUSTER_SECRET, FORWARDED.1, now, (method, path, auth, body));
    let mut h = Vec::from(signed);
    h.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    h
}

/// `h` as `try_request` takes headers.
fn refs<'a>(h: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    h.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// A node: its process, address, and the partitions rendezvous hashing gives it of the two.
struct Node {
    proc: Proc,
    addr: SocketAddr,
    share: BTreeSet<u32>,
}

/// Two nodes on `url`, each waited for until it holds and has loaded exactly its share and
/// sees both.
fn two_nodes(url: &str, dir: &std::path::Path) -> [Node; 2] {
    two_nodes_with(url, dir, &[])
}

/// [`two_nodes`], each started with `extra` arguments.
fn two_nodes_with(url: &str, dir: &std::path::Path, extra: &[&str]) -> [Node; 2] {
    let addrs: [SocketAddr; 2] = [0, 1].map(|_| {
        format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("an address")
    });
    let ids = addrs.map(|a| a.to_string());
    let mut nodes = [0, 1].map(|i| Node {
        proc: Proc::spawn_with(addrs[i], url, dir, &format!("node{i}"), extra),
        addr: addrs[i],
        share: owned_by(&ids[i], &ids).into_iter().collect(),
    });
    for n in &mut nodes {
        n.proc.wait_settled(n.addr, n.share.len() as u64, 2);
    }
    nodes
}

/// The node that owns (tenant, key)'s partition, and the other one.
fn owner<'a>(nodes: &'a [Node; 2], tenant: &str, key: &str) -> (&'a Node, &'a Node) {
    let p = partition_of(tenant, key);
    if nodes[0].share.contains(&p) {
        (&nodes[0], &nodes[1])
    } else {
        (&nodes[1], &nodes[0])
    }
}

/// Schedules `n` timers over 8 tenants at their owners, due 1.5 to 4.5 s out; every 5th
/// rescheduled, every 7th cancelled.
fn schedule(nodes: &[Node; 2], book: &mut Book, n: u64) {
    for i in 0..n {
        let tenant = format!("shop{}", i % 8);
        let key = format!("order-{i}");
        let at = owner(nodes, &tenant, &key).0.addr;
        let delay = 1_500 + (i * 37) % 3_000;
        book.put(at, &tenant, &key, delay, "v1");
        if i % 5 == 0 {
            book.put(at, &tenant, &key, delay + 500, "v2");
        }
        if i % 7 == 0 {
            book.cancel(at, &tenant, &key);
        }
    }
}

/// A cluster, two nodes settled on it (in a directory for their logs), and `n` timers
/// scheduled at their owners.
fn scheduled(n: u64) -> (RedisCluster, tempfile::TempDir, [Node; 2], Book) {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = two_nodes(&cluster.url(), dir.path());
    let mut book = Book::default();
    schedule(&nodes, &mut book, n);
    (cluster, dir, nodes, book)
}

#[test]
fn two_nodes_split_the_partitions_and_each_timer_fires_once_from_its_owner() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = two_nodes(&cluster.url(), dir.path());
    let shares = nodes.each_ref().map(|n| n.share.len());
    assert_eq!(shares[0] + shares[1], PARTITIONS as usize);
    assert!(
        shares.iter().all(|&s| (400..=624).contains(&s)),
        "about half each: {shares:?}"
    );
    // A request that came forwarded, for the other node's partition, is not forwarded again:
    // it is refused there, naming the partition.
    for i in 0..20 {
        let key = format!("elsewhere-{i}");
        let (_, other) = owner(&nodes, "shop0", &key);
        let path = format!("/v1/timers/shop0/{key}");
        let p = partition_of("shop0", &key);
        for (method, body) in [("PUT", &br#"{"delay_ms":1000}"#[..]), ("GET", b"")] {
            let h = as_forwarded(method, &path, &[], body);
            let r = try_request(other.addr, method, &path, &refs(&h), body).expect("answered");
            let text = String::from_utf8_lossy(&r.body);
            assert_eq!(r.status, 503, "{method} {path} at the other node: {text}");
            assert!(text.contains(&format!("partition {p} ")), "{text}");
        }
    }
    let mut book = Book::default();
    schedule(&nodes, &mut book, 400);
    let mut reader = Reader::new(&cluster);
    let streams = wait_all_fired(&mut reader, &book);
    assert_eq!(check(&book, &streams), 0, "no crash, so no repeat");
    assert_eq!(reader.pending_records(), 0, "records left after every fire");
    let fired = nodes
        .each_ref()
        .map(|n| counter(&metrics(n.addr), "punctual_timers_fired"));
    assert_eq!(
        fired[0] + fired[1],
        book.due() as u64,
        "each timer fired by one node: {fired:?}"
    );
    assert!(fired.iter().all(|&f| f > 0), "both nodes fired: {fired:?}");
    // Each node exports what it holds and what its loop did.
    for n in &nodes {
        let text = metrics(n.addr);
        let share = n.share.len() as u64;
        for (name, least) in [
            ("punctual_cluster_partitions_owned", share),
            ("punctual_cluster_partitions_loaded", share),
            ("punctual_cluster_lease_acquisitions_total", share),
            ("punctual_cluster_live_nodes", 2),
        ] {
            let v = value(&text, name);
            assert!(
                v.is_some_and(|v| v >= least),
                "{name} = {v:?}, not {least} or more"
            );
        }
    }
}

/// An unlabelled sample of `/metrics` text.
fn value(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_killed_nodes_timers_fire_from_the_survivor_none_early_none_lost() {
    let (cluster, _dir, mut nodes, book) = scheduled(300);
    let [a, b] = &mut nodes;
    let on_b = book
        .promises
        .iter()
        .filter(|((t, k), p)| !p.cancelled && b.share.contains(&partition_of(t, k)))
        .count();
    assert!(on_b > 50, "{on_b} live timers on the node to kill");
    b.proc.sigkill();
    // The survivor holds and loads every partition once the dead node's leases lapse.
    a.proc.wait_partitions(a.addr, PARTITIONS as u64);
    let mut reader = Reader::new(&cluster);
    let streams = wait_all_fired(&mut reader, &book);
    let repeats = check(&book, &streams);
    assert_eq!(reader.pending_records(), 0, "records left after every fire");
    // Late by the leases' lapse and a load, never by an order more: 30 s is absurdly late.
    let late = streams
        .values()
        .flatten()
        .map(|e| e.fired_at_us.saturating_sub(e.fire_at_us))
        .max()
        .unwrap_or(0);
    assert!(late < 30_000_000, "a timer fired {late} µs late");
    eprintln!(
        "{} timers fired ({on_b} of the killed node's), {repeats} repeated, at most {} ms late",
        book.due(),
        late / 1_000
    );
}

#[test]
fn a_node_stopped_with_sigterm_releases_its_leases_and_the_other_fires_its_timers() {
    let (cluster, _dir, mut nodes, book) = scheduled(200);
    let [a, b] = &mut nodes;
    let mut reader = Reader::new(&cluster);
    let b_id = b.addr.to_string();
    assert_eq!(reader.leases_of(&b_id).len(), b.share.len());
    let status = b.proc.sigterm();
    assert_eq!(status.code(), Some(0), "{}", b.proc.stderr_text());
    // Released, not left to lapse: right after the exit no lease key names the stopped node.
    assert_eq!(reader.leases_of(&b_id), Vec::<u32>::new());
    a.proc.wait_partitions(a.addr, PARTITIONS as u64);
    let streams = wait_all_fired(&mut reader, &book);
    check(&book, &streams);
    assert_eq!(reader.pending_records(), 0, "records left after every fire");
}

/// The bearer token of the tenant `locked`.
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// Keys of `tenant` whose partition `node` owns, `n` of them, named `{prefix}-{i}`.
fn keys_on(node: &Node, tenant: &str, prefix: &str, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|k| node.share.contains(&partition_of(tenant, k)))
        .take(n)
        .collect()
}

/// The forwards `addr` counts with `outcome`.
fn forwards(addr: SocketAddr, outcome: &str) -> u64 {
    let name = format!("punctual_cluster_forwards_total{{outcome=\"{outcome}\"}}");
    value(&metrics(addr), &name).unwrap_or(0)
}

/// GET `path` through `a` and at `b`: the answers are the same to a client (status, content
/// type, body); `a`'s.
fn get_alike(a: &Node, b: &Node, path: &str) -> api_support::Resp {
    let seen = |r: &api_support::Resp| {
        let content_type = r.header("content-type").map(str::to_owned);
        (r.status, content_type, r.body.clone())
    };
    let through_a = try_request(a.addr, "GET", path, &[], b"").expect("answered");
    let at_b = try_request(b.addr, "GET", path, &[], b"").expect("answered");
    assert_eq!(seen(&through_a), seen(&at_b), "GET {path}");
    through_a
}

#[test]
fn any_node_answers_any_key_forwarding_to_its_owner_and_batches_are_split_by_owner() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tenants.toml");
    std::fs::write(
        &config,
        format!("open_tenants = true\n[tenants.locked]\ntoken = \"{TOKEN}\"\n"),
    )
    .expect("config");
    let extra = ["--config", config.to_str().expect("a UTF-8 path")];
    let nodes = two_nodes_with(&cluster.url(), dir.path(), &extra);
    let [a, b] = &nodes;
    // PUT through A for keys B owns: answered by B, as if local, then the same through B.
    let on_b = keys_on(b, "shop1", "far", 30);
    for (i, key) in on_b.iter().enumerate() {
        let path = format!("/v1/timers/shop1/{key}");
        let body = format!(r#"{{"delay_ms":600000,"payload":{{"i":{i}}}}}"#);
        // A's routing view follows the live set at its next heartbeat after B's leases
        // settled: until then A may still answer B's partitions as its own (503). Bounded.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let r = loop {
            let r = try_request(a.addr, "PUT", &path, &[], body.as_bytes()).expect("answered");
            if r.status != 503 || std::time::Instant::now() > until {
                break r;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        assert_eq!(r.status, 201, "PUT {path} through A: {:?}", r.json());
        assert_eq!(r.json()["key"], key.as_str());
        let again = try_request(a.addr, "PUT", &path, &[], body.as_bytes()).expect("answered");
        assert_eq!(again.status, 200, "replaced: {:?}", again.json());
        let through_a = get_alike(a, b, &path);
        assert_eq!(through_a.status, 200);
        assert_eq!(through_a.json()["version"], again.json()["version"]);
        assert_eq!(through_a.json()["payload"]["i"], i);
    }
    // DELETE through B (its own) and through A (forwarded): gone for both.
    for (i, key) in on_b.iter().enumerate() {
        let path = format!("/v1/timers/shop1/{key}");
        let via = if i % 2 == 0 { b.addr } else { a.addr };
        let r = try_request(via, "DELETE", &path, &[], b"").expect("answered");
        assert_eq!(r.status, 204, "DELETE {path}: {:?}", r.json());
        assert_eq!(
            get_alike(a, b, &path).status,
            404,
            "GET {path} after DELETE"
        );
    }
    // The dead-letter routes of one key are forwarded too (A alone would answer 503).
    let dead = format!("/v1/dead/shop1/{}", on_b[0]);
    for (method, path) in [("DELETE", dead.clone()), ("POST", format!("{dead}/retry"))] {
        let r = try_request(a.addr, method, &path, &[], b"").expect("answered");
        assert_eq!(
            (r.status, r.code()),
            (404, "not_found".into()),
            "{method} {path}"
        );
    }
    // The other way too: B forwards to A.
    let on_a = keys_on(a, "shop1", "near", 5);
    for key in &on_a {
        let path = format!("/v1/timers/shop1/{key}");
        let r =
            try_request(b.addr, "PUT", &path, &[], br#"{"delay_ms":600000}"#).expect("answered");
        assert_eq!(r.status, 201, "PUT {path} through B: {:?}", r.json());
        let at_a = try_request(a.addr, "GET", &path, &[], b"").expect("answered");
        assert_eq!(at_a.json()["version"], r.json()["version"]);
    }
    // A forwarded request is answered where it arrived, never sent on.
    let sent = forwards(a.addr, "answered");
    assert!(sent >= 30 * 4, "{sent} forwards answered");
    let timed = value(
        &metrics(a.addr),
        "punctual_cluster_forward_duration_seconds_count",
    );
    assert_eq!(timed, Some(sent), "each answered forward timed");
    let path = format!("/v1/timers/shop1/{}", on_b[0]);
    let h = as_forwarded("GET", &path, &[], b"");
    let r = try_request(a.addr, "GET", &path, &refs(&h), b"").expect("answered");
    assert_eq!((r.status, r.code()), (503, "store_unavailable".into()));
    assert_eq!(forwards(a.addr, "answered"), sent, "not forwarded again");
    // Authentication: A checks it first, and B checks it again whatever the header says.
    let locked = keys_on(b, "locked", "k", 1).remove(0);
    let path = format!("/v1/timers/locked/{locked}");
    let bearer = format!("Bearer {TOKEN}");
    let token = ("authorization", bearer.as_str());
    let wrong = ("authorization", "Bearer guess");
    let put = br#"{"delay_ms":600000}"#;
    for (via, headers) in [
        (a.addr, vec![]),
        (a.addr, vec![("authorization", wrong.1.to_string())]),
        (b.addr, as_forwarded("PUT", &path, &[], put)),
        (b.addr, as_forwarded("PUT", &path, &[wrong], put)),
    ] {
        let r = try_request(via, "PUT", &path, &refs(&headers), put).expect("answered");
        assert_eq!(r.status, 401, "{headers:?}: {:?}", r.json());
    }
    let r =
        try_request(a.addr, "PUT", &path, &[token], br#"{"delay_ms":600000}"#).expect("answered");
    assert_eq!(r.status, 201, "with the token, through A: {:?}", r.json());
    let r = try_request(b.addr, "GET", &path, &[token], b"").expect("answered");
    assert_eq!(r.status, 200, "stored on B: {:?}", r.json());
    // A batch through A over both nodes: every item answered, in order, and stored on its owner.
    let keys: Vec<String> = (0..80).map(|i| format!("batch-{i}")).collect();
    let mut items: Vec<serde_json::Value> = keys
        .iter()
        .map(|k| serde_json::json!({"key": k, "delay_ms": 600000}))
        .collect();
    items.insert(
        10,
        serde_json::json!({"key": "batch-3", "delay_ms": 700000}),
    );
    items.insert(20, serde_json::json!({"key": "bad key!", "delay_ms": 1000}));
    let body = serde_json::to_vec(&serde_json::json!({ "timers": items })).expect("JSON");
    let r = try_request(a.addr, "POST", "/v1/timers/shop2", &[], &body).expect("answered");
    assert_eq!(r.status, 200, "{:?}", r.json());
    let results = r.json()["results"].as_array().cloned().expect("results");
    assert_eq!(results.len(), items.len());
    let mut versions = std::collections::HashMap::new();
    for (item, result) in items.iter().zip(&results) {
        assert_eq!(item["key"], result["key"], "in order: {result}");
        let key = item["key"].as_str().unwrap_or_default();
        let want = match key {
            "bad key!" => 400,
            "batch-3" if versions.contains_key("batch-3") => 200,
            _ => 201,
        };
        assert_eq!(result["status"], want, "{result}");
        if want != 400 {
            versions.insert(key.to_string(), result["version"].clone());
        }
    }
    let mut spread = [0, 0];
    for key in &keys {
        let (own, _) = owner(&nodes, "shop2", key);
        spread[usize::from(own.addr == b.addr)] += 1;
        let path = format!("/v1/timers/shop2/{key}");
        let r = try_request(own.addr, "GET", &path, &[], b"").expect("answered");
        assert_eq!(r.status, 200, "{key} on its owner");
        assert_eq!(r.json()["version"], versions[key], "{key}");
    }
    assert!(
        spread.iter().all(|&n| n > 10),
        "items on both nodes: {spread:?}"
    );
}

#[test]
fn forwards_to_a_killed_node_answer_a_clear_error_and_nothing_unstored_is_reported_ok() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nodes = two_nodes(&cluster.url(), dir.path());
    let on_b = keys_on(&nodes[1], "shop3", "gone", 5);
    // Warm a kept-alive connection from A to B, then kill B.
    let first = format!("/v1/timers/shop3/{}", on_b[0]);
    let r = try_request(nodes[0].addr, "PUT", &first, &[], br#"{"delay_ms":600000}"#)
        .expect("answered");
    assert_eq!(r.status, 201, "{:?}", r.json());
    nodes[1].proc.sigkill();
    let [a, b] = &nodes;
    // Until the live set drops B (a member TTL), A still routes B's partitions to it.
    let started = Instant::now();
    let path = format!("/v1/timers/shop3/{}", on_b[1]);
    let r = try_request(a.addr, "PUT", &path, &[], br#"{"delay_ms":600000}"#).expect("answered");
    let took = started.elapsed();
    assert_eq!(
        (r.status, r.code()),
        (503, "peer_unavailable".into()),
        "{:?}",
        r.json()
    );
    assert!(r.header("retry-after").is_some());
    // Bounded by the forward's deadline (5 s); 15 s is absurdly late.
    assert!(took < Duration::from_secs(15), "answered after {took:?}");
    let keys: Vec<String> = (0..40).map(|i| format!("split-{i}")).collect();
    let items: Vec<serde_json::Value> = keys
        .iter()
        .map(|k| serde_json::json!({"key": k, "delay_ms": 600000}))
        .collect();
    let body = serde_json::to_vec(&serde_json::json!({ "timers": items })).expect("JSON");
    let r = try_request(a.addr, "POST", "/v1/timers/shop3", &[], &body).expect("answered");
    assert_eq!(r.status, 200, "{:?}", r.json());
    let results = r.json()["results"].as_array().cloned().expect("results");
    assert_eq!(results.len(), keys.len());
    let mut ok = Vec::new();
    for (key, result) in keys.iter().zip(&results) {
        assert_eq!(result["key"], key.as_str(), "in order");
        if b.share.contains(&partition_of("shop3", key)) {
            assert_eq!(result["status"], 503, "{result}");
            assert_eq!(result["error"]["code"], "peer_unavailable", "{result}");
        } else {
            assert_eq!(result["status"], 201, "{result}");
            ok.push((key.clone(), result["version"].clone()));
        }
    }
    assert!(!ok.is_empty() && ok.len() < keys.len());
    // Once A holds every partition, what was reported stored is there, and what was refused
    // is not (nothing reached B after its death).
    nodes[0]
        .proc
        .wait_partitions(nodes[0].addr, PARTITIONS as u64);
    let a = &nodes[0];
    let r = try_request(a.addr, "GET", &first, &[], b"").expect("answered");
    assert_eq!(
        r.status,
        200,
        "acknowledged before the kill: {:?}",
        r.json()
    );
    for (key, version) in &ok {
        let r = try_request(a.addr, "GET", &format!("/v1/timers/shop3/{key}"), &[], b"")
            .expect("answered");
        assert_eq!((r.status, &r.json()["version"]), (200, version), "{key}");
    }
    for key in keys
        .iter()
        .filter(|k| !ok.iter().any(|(o, _)| o == *k))
        .chain([&on_b[1]])
    {
        let r = try_request(a.addr, "GET", &format!("/v1/timers/shop3/{key}"), &[], b"")
            .expect("answered");
        assert_eq!(
            r.status,
            404,
            "{key} was refused, so not stored: {:?}",
            r.json()
        );
    }
}

/// Dead letters are listed whole through either node: each node's page merged, by key, with
/// the other's asked for the same page, so paging through one node (`limit`, `after`) gives
/// every letter of the cluster once, in key order, whichever node holds it. A request that
/// came forwarded is answered from the node's own partitions alone.
#[test]
fn the_dead_letter_list_is_the_whole_cluster_s_through_either_node_page_by_page() {
    // 410 is a permanent failure: each timer becomes a dead letter at its first attempt.
    let rx = receiver::Receiver::start(|_, _| receiver::Reply::status(410));
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = cluster_serve::open_config(dir.path(), &rx.base(), "");
    let extra = config.each_ref().map(String::as_str);
    let nodes = two_nodes_with(&cluster.url(), dir.path(), &extra);
    let keys: Vec<String> = (0..40).map(|i| format!("dl-{i:02}")).collect();
    for key in &keys {
        let at = owner(&nodes, "shop", key).0.addr;
        cluster_serve::put_hook(at, "shop", key, 0, &rx.url("hook"));
    }
    let on = |n: &Node| -> Vec<String> {
        let mut k: Vec<String> = keys
            .iter()
            .filter(|k| n.share.contains(&partition_of("shop", k)))
            .cloned()
            .collect();
        k.sort();
        k
    };
    let (on_a, on_b) = (on(&nodes[0]), on(&nodes[1]));
    assert!(
        !on_a.is_empty() && !on_b.is_empty(),
        "the letters lie on both nodes"
    );
    let list = |at: SocketAddr, query: &str, headers: &[(&str, &str)]| -> Vec<String> {
        let r = try_request(at, "GET", &format!("/v1/dead/shop?{query}"), headers, b"")
            .expect("answered");
        assert_eq!(r.status, 200, "GET /v1/dead/shop?{query}: {:?}", r.json());
        r.json()["dead"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|d| d["key"].as_str().expect("a key").to_string())
            .collect()
    };
    // Each node's own letters, once every delivery has failed (bounded).
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let h = as_forwarded("GET", "/v1/dead/shop?limit=1000", &[], b"");
        let own = [&nodes[0], &nodes[1]].map(|n| list(n.addr, "limit=1000", &refs(&h)));
        if own == [on_a.clone(), on_b.clone()] {
            break;
        }
        assert!(
            Instant::now() < until,
            "dead letters never settled: {own:?}; receiver got {}",
            rx.received().len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut all = keys.clone();
    all.sort();
    for n in &nodes {
        assert_eq!(
            list(n.addr, "limit=1000", &[]),
            all,
            "one page, through {}",
            n.addr
        );
        let mut paged = Vec::new();
        let mut query = "limit=7".to_string();
        loop {
            let page = list(n.addr, &query, &[]);
            assert!(page.len() <= 7, "a page holds at most its limit");
            let Some(last) = page.last().cloned() else {
                break;
            };
            paged.extend(page);
            query = format!("limit=7&after={last}");
        }
        assert_eq!(paged, all, "pages of 7 through {}", n.addr);
    }
}
