//! Tenant quotas are exact: the count of a tenant's pending timers, all shards together, is
//! what the quota compares against, whatever path a timer takes in or out (schedule, replace,
//! cancel, fire, a store that answers 503 while the timer stays, a restart).

mod api_support;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::Server;
use punctual::engine::Pinning;
use punctual::{Cancelled, EngineBuilder, Error, UtcMicros};
use redis_server::{wait_stream, RedisServer};
use std::time::Duration;

fn engine(limit: u64) -> punctual::Engine {
    EngineBuilder::new()
        .shards(2)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .quota("acme", limit)
        .build()
        .expect("engine starts")
}

#[test]
fn quota_counts_adds_replacements_cancels_and_fires_exactly() {
    let e = engine(3);
    let h = e.handle();
    let far = UtcMicros(h.now().0 + 60_000_000);
    for k in ["a", "b", "c"] {
        h.schedule("acme", k, far, b"").expect("within the quota");
    }
    let refused = h.schedule("acme", "d", far, b"");
    assert_eq!(
        refused,
        Err(Error::QuotaExceeded {
            tenant: "acme".into(),
            limit: 3
        })
    );
    // A replacement is not a new timer; another tenant has no quota.
    assert!(h.schedule("acme", "a", far, b"").expect("replace").replaced);
    h.schedule("open", "x", far, b"").expect("no quota");
    assert!(matches!(
        h.cancel("acme", "b"),
        Ok(Cancelled::Cancelled { .. })
    ));
    h.schedule("acme", "d", far, b"").expect("a slot was freed");
    // A fire frees a slot too.
    let soon = UtcMicros(h.now().0 + 10_000);
    h.schedule("acme", "c", soon, b"")
        .expect("replace c to fire soon");
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while h.get("acme", "c").expect("get").is_some() && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(5));
    }
    h.schedule("acme", "e", far, b"")
        .expect("the fire freed a slot");
    assert_eq!(h.quotas(), vec![("acme".to_string(), 3, 3)]);
}

#[test]
fn concurrent_schedules_from_many_threads_never_pass_the_quota() {
    let e = engine(500);
    let h = e.handle();
    let far = UtcMicros(h.now().0 + 60_000_000);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let h = h.clone();
            std::thread::spawn(move || {
                (0..400)
                    .filter(|i| h.schedule("acme", &format!("t{t}-{i}"), far, b"").is_ok())
                    .count()
            })
        })
        .collect();
    let accepted: usize = threads.into_iter().map(|t| t.join().unwrap_or(0)).sum();
    assert_eq!(accepted, 500);
    let pending: u64 = h.stats().iter().map(|s| s.pending).sum();
    assert_eq!(pending, 500);
    assert_eq!(h.quotas()[0].2, 500);
}

/// The store path: a PUT answered 503 after the store's ack timeout leaves its timer in
/// place, so it keeps its slot; and a restart counts the recovered timers again.
#[test]
fn quota_stays_exact_across_a_store_timeout_and_a_restart() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let conf = dir.path().join("punctual.toml");
    std::fs::write(
        &conf,
        "open_tenants = true\n[tenants.acme]\nmax_pending = 3\n",
    )
    .expect("write config");
    let conf = conf.to_string_lossy().into_owned();
    let url = redis.url();
    let args = ["--redis", &url, "--shards", "2", "--config", &conf];
    let mut s = Server::start(&args);
    let put = |s: &Server, key: &str| {
        s.json(
            "PUT",
            &format!("/v1/timers/acme/{key}"),
            r#"{"delay_ms": 600000}"#,
        )
        .0
    };
    assert_eq!(put(&s, "k1"), 201);
    assert_eq!(put(&s, "k2"), 201);
    // Redis stops answering: the PUT times out (503, not acknowledged) but the timer stays
    // in the shard and its write stays queued.
    redis.signal("STOP");
    assert_eq!(put(&s, "k3"), 503);
    redis.signal("CONT");
    // k3 exists, so the tenant is at its quota.
    let (st, body) = s.json("GET", "/v1/timers/acme/k3", "");
    assert_eq!(st, 200, "{body}");
    let (st, body) = s.json("PUT", "/v1/timers/acme/k4", r#"{"delay_ms": 600000}"#);
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (429, Some("quota_exceeded"))
    );
    // Crash and restart: the recovered timers count again.
    let _ = s.child.kill(); // SIGKILL
    let _ = s.child.wait();
    let s = Server::start(&args);
    assert_eq!(
        put(&s, "k4"),
        429,
        "recovered timers count against the quota"
    );
    assert_eq!(put(&s, "k1"), 200, "a replacement is not refused");
    assert_eq!(s.req("DELETE", "/v1/timers/acme/k1", "").status, 204);
    // Due in 2 s, so that it still holds its slot when k5 asks (a 50 ms delay could pass
    // within one fsync'd write on a slow host); its fire then gives the slot back.
    let (st, _) = s.json("PUT", "/v1/timers/acme/soon", r#"{"delay_ms": 2000}"#);
    assert_eq!(st, 201);
    assert_eq!(put(&s, "k5"), 429);
    let mut con = redis.client().expect("client");
    let fired = wait_stream(&mut con, "acme", |e| e.iter().any(|e| e.key == "soon"));
    assert!(fired.iter().any(|e| e.key == "soon"));
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    let mut status = put(&s, "k5");
    while status == 429 && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
        status = put(&s, "k5");
    }
    assert_eq!(status, 201, "the fire gave its slot back");
}

/// A tenant without a quota cannot take the room that quota'd tenants may still claim, so a
/// flood of unquota'd keys leaves a quota'd tenant served up to its quota.
#[test]
fn room_left_in_quotas_is_held_from_tenants_without_one() {
    let e = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .shard_capacity(100)
        .quota("calm", 30)
        .build()
        .expect("engine starts");
    let h = e.handle();
    let far = UtcMicros(h.now().0 + 60_000_000);
    let mut open = 0;
    while h.schedule("open", &format!("k{open}"), far, b"").is_ok() {
        open += 1;
        assert!(open <= 100, "never past the capacity");
    }
    assert_eq!(open, 70, "30 of 100 held for the quota'd tenant");
    assert_eq!(
        h.schedule("open", "one-more", far, b""),
        Err(Error::CapacityExceeded {
            shard: 0,
            capacity: 100
        })
    );
    assert!(
        h.schedule("open", "k0", far, b"")
            .expect("a replacement needs no room")
            .replaced,
        "replacing a pending key is not refused"
    );
    for k in 0..30 {
        h.schedule("calm", &format!("c{k}"), far, b"")
            .expect("the held room serves the quota'd tenant");
    }
    assert!(matches!(
        h.schedule("calm", "c30", far, b""),
        Err(Error::QuotaExceeded { .. })
    ));
    // A cancel of a quota'd timer gives its room back to the quota, not to the open tenant.
    assert!(matches!(
        h.cancel("calm", "c0"),
        Ok(Cancelled::Cancelled { .. })
    ));
    assert!(matches!(
        h.schedule("open", "one-more", far, b""),
        Err(Error::CapacityExceeded { .. })
    ));
    h.schedule("calm", "c0", far, b"")
        .expect("its own slot again");
}
