//! What webhook delivery may hold, and what happens at each bound: the real binary, real
//! receivers on real sockets. Asserted as correctness only (nothing dropped, nothing lost,
//! each bound kept); timing stays out.

mod api_support;
#[path = "support/bare.rs"]
mod bare;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{eventually, Server};
use receiver::{Receiver, Reply};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// `punctual serve` with `toml` as its config and exactly `args` (plus light test settings).
fn start(dir: &tempfile::TempDir, toml: &str, args: &[&str]) -> Server {
    let config = dir.path().join("punctual.toml");
    std::fs::write(&config, toml).expect("config");
    let mut all = bare::os(&["--pinning", "none", "--spin-us", "0", "--config"]);
    all.push(config.into());
    all.extend(bare::os(args));
    bare::serve(&[], &all)
}

fn put(s: &Server, tenant: &str, key: &str, body: Value) -> (u16, Value) {
    s.json(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &body.to_string(),
    )
}

/// `POST /v1/timers/{tenant}` with `timers`: the answer's body (asserted 200).
fn post_batch(s: &Server, tenant: &str, timers: Vec<Value>) -> Value {
    let body = json!({ "timers": timers }).to_string();
    let (st, r) = s.json("POST", &format!("/v1/timers/{tenant}"), &body);
    assert_eq!(st, 200, "{r}");
    r
}

/// Every dead letter of `tenant`, paging by `limit`.
fn all_dead(s: &Server, tenant: &str, limit: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let q = if after.is_empty() {
            format!("/v1/dead/{tenant}?limit={limit}")
        } else {
            format!("/v1/dead/{tenant}?limit={limit}&after={after}")
        };
        let (st, body) = s.json("GET", &q, "");
        assert_eq!(st, 200, "{body}");
        let page = body["dead"].as_array().cloned().unwrap_or_default();
        assert!(page.len() <= limit, "a page longer than its limit");
        let Some(last) = page.last() else {
            return all;
        };
        after = last["key"].as_str().unwrap_or_default().to_string();
        all.extend(page);
    }
}

#[test]
fn dead_letters_count_against_the_shard_capacity_and_are_never_dropped_for_room() {
    let rx = Receiver::start(|_, _| Reply::status(404));
    let dir = tempfile::tempdir().expect("temp dir");
    let s = start(
        &dir,
        &format!("callback_allow = [{:?}]\n", rx.base()),
        &[
            "--store",
            "memory",
            "--shards",
            "1",
            "--shard-capacity",
            "10",
        ],
    );
    for i in 0..10 {
        let (st, r) = put(
            &s,
            "t",
            &format!("k{i}"),
            json!({"delay_ms": 1, "callback": {"url": rx.url("h")}, "payload": {"i": i}}),
        );
        assert_eq!(st, 201, "{r}");
    }
    // A 404 is permanent: each is a dead letter at once.
    eventually("10 dead letters", || {
        (all_dead(&s, "t", 100).len() == 10).then_some(())
    });
    // The shard is full: pending timers and dead letters together.
    let (st, r) = put(&s, "t", "new", json!({"delay_ms": 60000}));
    assert_eq!(
        (st, r["error"]["code"].as_str()),
        (503, Some("capacity_exceeded")),
        "{r}"
    );
    let (st, r) = put(&s, "other", "new", json!({"delay_ms": 60000}));
    assert_eq!(
        r["error"]["code"].as_str(),
        Some("capacity_exceeded"),
        "{st} {r}"
    );
    // Nothing was dropped to make room; each letter still has its payload.
    let dead = all_dead(&s, "t", 3);
    assert_eq!(dead.len(), 10);
    for (i, d) in dead.iter().enumerate() {
        assert_eq!(d["key"], format!("k{i}"));
        assert_eq!(d["payload"]["i"], i);
    }
    // Discarding one makes room for one.
    assert_eq!(s.req("DELETE", "/v1/dead/t/k0", "").status, 204);
    let (st, r) = put(&s, "t", "new", json!({"delay_ms": 60000}));
    assert_eq!(st, 201, "{r}");
    let (st, _) = put(&s, "t", "newer", json!({"delay_ms": 60000}));
    assert_eq!(st, 503);
    // A replacement of a pending key is not a new timer: still accepted at the bound.
    let (st, r) = put(&s, "t", "new", json!({"delay_ms": 50000}));
    assert_eq!(st, 200, "{r}");
}

#[test]
fn dead_letters_page_by_key_across_shards_each_once_with_its_payload() {
    forty_dead_letters_each_listed_once(0, &[1, 7, 40]);
}

/// Letters of about 60 KiB each: a page of 40 is asked for its bodies in parts of at most
/// 1 MiB (`engine::BODIES_PER_ASK`), three across three shards; each key comes back once,
/// in order, with its own payload whole, whatever the page's limit.
#[test]
fn a_page_of_large_dead_letters_is_gathered_in_parts_each_once_with_its_payload() {
    forty_dead_letters_each_listed_once(60_000, &[40, 17, 1000]);
}

/// 40 dead letters across three shards, each with a payload padded by `pad` bytes: listed
/// page by page at each of `limits`, every key comes back once, in order, with its payload.
fn forty_dead_letters_each_listed_once(pad: usize, limits: &[usize]) {
    let rx = Receiver::start(|_, _| Reply::status(404));
    let dir = tempfile::tempdir().expect("temp dir");
    let s = start(
        &dir,
        &format!("callback_allow = [{:?}]\n", rx.base()),
        &["--store", "memory", "--shards", "3"],
    );
    let pad = |i: usize| char::from(b'a' + (i % 26) as u8).to_string().repeat(pad);
    for chunk in (0..40).collect::<Vec<usize>>().chunks(10) {
        let timers: Vec<Value> = chunk
            .iter()
            .map(|&i| json!({"key": format!("k{i:02}"), "delay_ms": 1, "callback": {"url": rx.url("h")}, "payload": {"i": i, "pad": pad(i)}}))
            .collect();
        post_batch(&s, "t", timers);
    }
    eventually("40 dead letters", || {
        (all_dead(&s, "t", 1000).len() == 40).then_some(())
    });
    for &limit in limits {
        let dead = all_dead(&s, "t", limit);
        let keys: Vec<&str> = dead.iter().filter_map(|d| d["key"].as_str()).collect();
        let want: Vec<String> = (0..40).map(|i| format!("k{i:02}")).collect();
        assert_eq!(keys, want, "limit {limit}");
        for (i, d) in dead.iter().enumerate() {
            assert_eq!(d["payload"]["i"], i, "limit {limit}");
            let padded = d["payload"]["pad"].as_str();
            assert_eq!(padded, Some(pad(i).as_str()), "limit {limit}");
        }
    }
}

/// A receiver that accepts every connection and never answers (it reads until the peer
/// closes). How many connections it holds open now.
fn never_answers() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::io::Read;
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let open = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = open.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let open = counted.clone();
            open.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while conn.read(&mut buf).is_ok_and(|n| n > 0) {}
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, open)
}

/// Every sample of `name` in a `/metrics` text: (labels, value).
fn samples(metrics: &str, name: &str) -> Vec<(String, f64)> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let labels = series.strip_prefix(name)?;
            if !(labels.is_empty() || labels.starts_with('{')) {
                return None;
            }
            Some((labels.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The documented bounds (`docs/ARCHITECTURE.md`, "Bounded queues"), for 100,000 held timers.
const TIMERS: usize = 100_000;
const PER_HOST: f64 = 4.0;
const RSS_MAX_MIB: f64 = 512.0;
const RSS_GROWTH_MAX_MIB: f64 = 24.0;

#[test]
fn a_receiver_that_never_answers_keeps_every_queue_and_the_memory_bounded() {
    let (addr, open) = never_answers();
    let base = format!("http://{addr}/");
    let dir = tempfile::tempdir().expect("temp dir");
    let s = start(
        &dir,
        &format!(
            "callback_allow = [{base:?}]\nwebhook_max_in_flight_per_host = 4\nwebhook_timeout_ms = 2000\n"
        ),
        &["--store", "memory", "--shards", "2", "--shard-capacity", "200000"],
    );
    let pid = s.child.id();
    // All due together, once they are all registered.
    let due_ms = receiver::now_us() / 1000 + 30_000;
    for batch in 0..TIMERS / 5000 {
        let timers: Vec<Value> = (0..5000)
            .map(|i| {
                json!({"key": format!("k{}", batch * 5000 + i), "fire_at_ms": due_ms,
                       "callback": {"url": format!("{base}hook")},
                       "retry": {"max_attempts": 100}})
            })
            .collect();
        let r = post_batch(&s, "t", timers);
        assert!(
            r["results"]
                .as_array()
                .is_some_and(|a| a.iter().all(|x| x["status"] == 201)),
            "a timer was refused"
        );
    }
    // Let them fire and fill the caps' queues, then watch for 15 s, in which the timers at
    // the front of the queues pass through the caps and their safety nets fire.
    let due = Duration::from_millis(due_ms.saturating_sub(receiver::now_us() / 1000));
    std::thread::sleep(due + Duration::from_secs(3));
    let rss_start = rss_mib(pid);
    let mut max_held = 0.0f64;
    let mut rss_max = rss_start;
    for _ in 0..15 {
        std::thread::sleep(Duration::from_secs(1));
        let m = String::from_utf8_lossy(&s.req("GET", "/metrics", "").body).into_owned();
        let pending: f64 = samples(&m, "punctual_timers_pending")
            .iter()
            .map(|x| x.1)
            .sum();
        assert_eq!(pending as usize, TIMERS, "a timer was lost");
        for (labels, v) in samples(&m, "punctual_webhook_in_flight") {
            assert!(
                v <= PER_HOST,
                "{labels}: {v} deliveries in flight to one host"
            );
        }
        let held: f64 = samples(&m, "punctual_webhook_held_back")
            .iter()
            .map(|x| x.1)
            .sum();
        assert!(
            held <= TIMERS as f64,
            "{held} queue entries for {TIMERS} timers"
        );
        max_held = max_held.max(held);
        for (labels, v) in samples(&m, "punctual_ring_depth") {
            assert!(v <= 65_536.0, "{labels}: ring depth {v}");
        }
        for (labels, v) in samples(&m, "punctual_store_pending_writes") {
            assert!(v <= 65_536.0, "{labels}: {v} writes waiting");
        }
        let resolver: f64 = samples(&m, "punctual_resolver_queued")
            .iter()
            .map(|x| x.1)
            .sum();
        assert!(resolver <= 256.0, "{resolver} lookups queued");
        assert!(
            open.load(std::sync::atomic::Ordering::SeqCst) <= 4 * PER_HOST as usize,
            "connections held open at the receiver: {}",
            open.load(std::sync::atomic::Ordering::SeqCst)
        );
        rss_max = rss_max.max(rss_mib(pid));
    }
    println!(
        "100k held timers: RSS {rss_start:.1} MiB after they fired, at most {rss_max:.1} MiB in 15 s; \
         queue entries at most {max_held}"
    );
    assert!(
        max_held > 0.0,
        "nothing was held back: the test did not load the caps"
    );
    assert!(rss_max <= RSS_MAX_MIB, "RSS {rss_max:.1} MiB");
    assert!(
        rss_max - rss_start <= RSS_GROWTH_MAX_MIB,
        "RSS grew {:.1} MiB while the timers waited",
        rss_max - rss_start
    );
}

/// A listener with an accept backlog of 1 that nobody accepts from yet.
fn tiny_backlog() -> std::net::TcpListener {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().expect("addr");
    s.bind(&addr.into()).expect("bind");
    s.listen(1).expect("listen");
    s.into()
}

#[test]
fn attempts_end_within_the_timeout_at_an_overflowed_accept_queue_and_leave_nothing_behind() {
    use std::io::Read;
    let listener = tiny_backlog();
    let addr = listener.local_addr().expect("addr");
    let base = format!("http://{addr}/");
    let dir = tempfile::tempdir().expect("temp dir");
    let s = start(
        &dir,
        &format!("callback_allow = [{base:?}]\nwebhook_timeout_ms = 1000\n"),
        &["--store", "memory", "--shards", "1"],
    );
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    for k in &keys {
        let (st, r) = put(
            &s,
            "t",
            k,
            json!({"delay_ms": 1, "callback": {"url": format!("{base}h")},
                   "retry": {"max_attempts": 100, "base_delay_ms": 100, "max_delay_ms": 200}}),
        );
        assert_eq!(st, 201, "{r}");
    }
    // Nobody accepts for 4 s: the queue holds 2 connections, later SYNs are dropped. Every
    // attempt must still end (time out) within its 1 s, plus the 1 s in-flight margin.
    let mut seen: std::collections::HashMap<&str, (u64, Instant)> = Default::default();
    let mut longest = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        for k in &keys {
            let (_, r) = s.json("GET", &format!("/v1/timers/t/{k}"), "");
            let attempts = r["delivery"]["attempts"].as_u64().unwrap_or(0);
            let in_flight = r["delivery"]["state"] == "in_flight";
            let e = seen.entry(k.as_str()).or_insert((attempts, Instant::now()));
            if e.0 != attempts || !in_flight {
                *e = (attempts, Instant::now());
            }
            longest = longest.max(e.1.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        longest < Duration::from_millis(3_500),
        "an attempt stayed in flight {longest:?} with a 1 s timeout"
    );
    let min_attempts = seen.values().map(|v| v.0).min().unwrap_or(0);
    assert!(
        min_attempts >= 2,
        "attempts did not end at their timeout: {seen:?}"
    );
    // Now accept: every connection punctual wrote a request on, and gave up, was reset (its
    // bytes discarded), not closed for us to read and answer as if it still waited.
    listener.set_nonblocking(true).expect("nonblocking");
    let mut carried = 0;
    let give_up = Instant::now() + Duration::from_secs(2);
    while Instant::now() < give_up {
        let Ok((mut conn, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        conn.set_nonblocking(false).expect("blocking");
        conn.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            match conn.read(&mut buf) {
                Ok(0) => break "closed",
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break "reset",
                Err(_) => break "still open",
            }
        };
        if got.starts_with(b"POST") {
            carried += 1;
            assert_eq!(end, "reset", "an abandoned attempt's connection was {end}");
        }
    }
    assert!(carried > 0, "no queued connection carried a request");
}
