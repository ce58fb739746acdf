//! Recurring schedules on the Redis store, through the real binary and a real redis-server:
//! each occurrence arrives in the tenant's stream once (one version, one sequence, the
//! sequences without a gap), never before its nominal instant; a SIGKILL and a restart on the
//! same port neither lose nor double one, and the missed ones fire under the catch-up policy;
//! a pause, a delete and the `max_schedules` count hold across a restart, from what Redis
//! holds; and a Sentinel failover neither loses nor doubles one.

mod api_support;
#[path = "support/occurrences.rs"]
mod occurrences;
#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/sentinel.rs"]
mod sentinel;

use api_support::Server;
use occurrences::{now_us, occurrences, once_each, Occurrence};
use redis_server::{read_stream, wait_stream, RedisServer};
use sentinel::Sentinels;
use std::time::Duration;

/// Polls the stream until schedule `name` has an occurrence after `past_us` (30 s at most).
fn wait_past(con: &mut redis::Connection, name: &str, past_us: u64) -> Vec<Occurrence> {
    let entries = wait_stream(con, "shop", |e| {
        occurrences(e, name)
            .iter()
            .any(|o| o.occurrence_us > past_us)
    });
    occurrences(&entries, name)
}

/// Ends the server with SIGKILL, leaves it down for `down`, starts it again on the same port.
fn restart_after_sigkill(mut s: Server, args: &[&str], down: Duration) -> Server {
    s.child.kill().expect("SIGKILL");
    let _ = s.child.wait();
    std::thread::sleep(down);
    Server::start_at(s.addr, args)
}

#[test]
fn a_schedule_on_redis_fires_each_occurrence_once_on_time_across_a_sigkill() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = ["--redis", &url, "--shards", "2"];
    let first = Server::start(&args);
    let body = r#"{"every_ms": 1000, "catch_up": {"policy": "all", "window_ms": 60000},
                   "payload": {"job": "tick"}}"#;
    let (status, put) = first.json("PUT", "/v1/schedules/shop/tick", body);
    assert_eq!(status, 201, "{put}");
    assert_eq!(put["sequence"], 0);
    let (status, got) = first.json("GET", "/v1/schedules/shop/tick?next=3", "");
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["next"].as_array().map(Vec::len), Some(3), "{got}");
    assert_eq!(got["definition"]["payload"]["job"], "tick");

    let mut con = redis.client().expect("redis client");
    let entries = wait_stream(&mut con, "shop", |e| occurrences(e, "tick").len() >= 3);
    let before = once_each(&occurrences(&entries, "tick"));
    assert!(before.len() >= 3, "{before:?}");
    let p: serde_json::Value = serde_json::from_str(&entries[0].payload).expect("payload is JSON");
    assert_eq!(p["payload"]["job"], "tick", "{p}");

    // Down for about three occurrences; the restart catches them up (`all`), then goes on.
    let killed_us = now_us();
    let second = restart_after_sigkill(first, &args, Duration::from_millis(3_200));
    let seq = once_each(&wait_past(&mut con, "tick", now_us() + 2_000_000));
    for w in seq.windows(2) {
        assert_eq!(
            w[1].occurrence_us - w[0].occurrence_us,
            1_000_000,
            "an occurrence is missing between {:?} and {:?}",
            w[0],
            w[1]
        );
    }
    // The restart's first fire spends every occurrence since the kill: those more than a
    // second before it (give or take a pass) were missed, and fire caught up, each once.
    let after_kill: Vec<&Occurrence> = seq.iter().filter(|o| o.occurrence_us > killed_us).collect();
    let fire0 = after_kill.iter().map(|o| o.fired_at_us).min().unwrap_or(0);
    let missed: Vec<&&Occurrence> = after_kill
        .iter()
        .filter(|o| o.occurrence_us + 1_300_000 < fire0)
        .collect();
    assert!(
        missed.len() >= 2 && missed.iter().all(|o| o.caught_up),
        "the occurrences missed while down fire, each once, caught up: {seq:#?}"
    );
    let (_, got) = second.json("GET", "/v1/schedules/shop/tick", "");
    assert!(
        got["sequence"].as_u64() >= seq.last().map(|o| o.sequence),
        "{got}"
    );
    // The schedule's own timers are not the tenant's timers.
    let (status, listed) = second.json("GET", "/v1/timers/shop", "");
    assert_eq!(status, 200);
    assert_eq!(
        listed["timers"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
    let (status, listed) = second.json("GET", "/v1/schedules/shop", "");
    assert_eq!(status, 200);
    assert_eq!(listed["schedules"][0]["key"], "tick", "{listed}");
    assert_eq!(
        listed["schedules"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
}

#[test]
fn pause_delete_and_the_quota_on_redis_hold_across_sigkills() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = ["--redis", &url, "--shards", "2", "--max-schedules", "2"];
    let s = Server::start(&args);
    let every = r#"{"every_ms": 1000}"#;
    let cron = r#"{"cron": "* * * * * *", "time_zone": "Asia/Kolkata"}"#;
    assert_eq!(s.json("PUT", "/v1/schedules/shop/sec", cron).0, 201);
    assert_eq!(s.json("PUT", "/v1/schedules/shop/beat", every).0, 201);
    let (status, refused) = s.json("PUT", "/v1/schedules/shop/third", every);
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["error"]["code"], "quota_exceeded", "{refused}");
    let (status, replaced) = s.json("PUT", "/v1/schedules/shop/sec", cron);
    assert_eq!(status, 200, "a replacement passes the quota: {replaced}");
    let mut con = redis.client().expect("redis client");
    wait_past(&mut con, "sec", now_us() + 1_000_000);

    // Paused, then killed: the pause and the count are what Redis holds.
    let (status, paused) = s.json("POST", "/v1/schedules/shop/sec/pause", "");
    assert_eq!(
        (status, &paused["paused"]),
        (200, &serde_json::json!(true)),
        "{paused}"
    );
    let paused_us = now_us();
    let s = restart_after_sigkill(s, &args, Duration::ZERO);
    let (status, got) = s.json("GET", "/v1/schedules/shop/sec", "");
    assert_eq!(
        (status, &got["paused"]),
        (200, &serde_json::json!(true)),
        "{got}"
    );
    let (_, listed) = s.json("GET", "/v1/schedules/shop", "");
    let keys: Vec<&str> = listed["schedules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["key"].as_str())
        .collect();
    assert_eq!(keys, ["beat", "sec"], "{listed}");
    assert_eq!(listed["schedules"][1]["paused"], true, "{listed}");
    assert_eq!(s.json("PUT", "/v1/schedules/shop/third", every).0, 429);
    std::thread::sleep(Duration::from_millis(2_500));
    let during = occurrences(&read_stream(&mut con, "shop"), "sec");
    assert!(
        during.iter().all(|o| o.occurrence_us <= paused_us),
        "fired while paused: {during:#?}"
    );

    // Resumed: `latest` (the default) fires at most one of those missed, then goes on.
    let (status, resumed) = s.json("POST", "/v1/schedules/shop/sec/resume", "");
    assert_eq!(
        (status, &resumed["paused"]),
        (200, &serde_json::json!(false)),
        "{resumed}"
    );
    let resumed_us = now_us();
    let sec = once_each(&wait_past(&mut con, "sec", resumed_us + 1_000_000));
    let caught = sec
        .iter()
        .filter(|o| o.occurrence_us > paused_us && o.occurrence_us <= resumed_us)
        .count();
    assert!(caught <= 1, "latest catches up one at most: {sec:#?}");

    // Deleted: 204, a slot frees, nothing due after the answer fires, before or after a kill.
    assert_eq!(s.req("DELETE", "/v1/schedules/shop/beat", "").status, 204);
    let deleted_us = now_us();
    assert_eq!(s.json("PUT", "/v1/schedules/shop/third", every).0, 201);
    let s = restart_after_sigkill(s, &args, Duration::ZERO);
    assert_eq!(s.req("GET", "/v1/schedules/shop/beat", "").status, 404);
    assert_eq!(s.req("DELETE", "/v1/schedules/shop/beat", "").status, 404);
    assert_eq!(s.json("PUT", "/v1/schedules/shop/fourth", every).0, 429);
    let entries = wait_stream(&mut con, "shop", |e| {
        occurrences(e, "third")
            .iter()
            .any(|o| o.occurrence_us > deleted_us + 2_500_000)
    });
    let beat = once_each(&occurrences(&entries, "beat"));
    assert!(
        beat.iter().all(|o| o.occurrence_us <= deleted_us),
        "fired after its DELETE: {beat:#?}"
    );
    once_each(&occurrences(&entries, "sec"));
    once_each(&occurrences(&entries, "third"));
}

/// Sentinel with `--redis-wait-replicas 1`: the master is SIGKILLed while a schedule fires
/// every second; after the switch the schedule goes on from the cursor the replica holds, and
/// the new master's stream holds each occurrence once, under one version, none early.
#[test]
fn a_schedule_goes_on_across_a_sentinel_failover_each_occurrence_once() {
    let mut redis = Sentinels::start();
    let old = redis.master.port;
    let url = redis.url();
    let s = Server::start(&[
        "--redis",
        &url,
        "--redis-wait-replicas",
        "1",
        "--shards",
        "2",
    ]);
    let every = r#"{"every_ms": 1000, "catch_up": {"policy": "all", "window_ms": 120000}}"#;
    let (status, put) = s.json("PUT", "/v1/schedules/shop/tick", every);
    assert_eq!(status, 201, "{put}");
    let mut con = redis.master.client().expect("master");
    wait_past(&mut con, "tick", now_us() + 2_000_000);

    redis.master.kill();
    let new = redis
        .wait_switch(old, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no failover within 30 s of the kill\n{}", redis.logs()));
    assert_eq!(new, redis.replica.port, "the replica is the new master");
    redis.master.start_replica_of(new);
    let mut con = redis.replica.client().expect("the new master");
    let seq = once_each(&wait_past(&mut con, "tick", now_us() + 3_000_000));
    for w in seq.windows(2) {
        assert_eq!(
            w[1].occurrence_us - w[0].occurrence_us,
            1_000_000,
            "{seq:#?}"
        );
    }
    let (status, got) = s.json("GET", "/v1/schedules/shop/tick", "");
    assert_eq!(status, 200, "{got}");
    assert!(
        got["sequence"].as_u64() >= seq.last().map(|o| o.sequence),
        "{got}"
    );
}
