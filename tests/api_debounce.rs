//! Debounce against the real binary: each PUT of a key moves its deadline, never past the
//! burst's first arming plus `max_wait_ms`; the cap survives a SIGKILL and a restart on the
//! journal and on Redis; after a SIGKILL a webhook timer fires at its cap (one whose cap passed
//! while the server was down, at once) and a batch item is held to it; the fire ends the
//! burst; a batch item debounces as a PUT does; bad input is a 400 that names the field.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::{Configured, Server};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn put(s: &Server, key: &str, body: Value) -> (u16, Value) {
    s.json("PUT", &format!("/v1/timers/t/{key}"), &body.to_string())
}

fn get(s: &Server, key: &str) -> (u16, Value) {
    s.json("GET", &format!("/v1/timers/t/{key}"), "")
}

fn us(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[test]
fn the_cap_survives_a_sigkill_and_the_fire_ends_the_burst() {
    let dir = tempfile::tempdir().expect("dir");
    let args = ["--shards", "2", "--fsync", "always"];
    let s = Configured::journal(dir.path(), "", &args);
    // The burst outlasts a slow restart: the second deadline is 15 s out, the cap 16 s.
    let max_wait_ms = 16_000u64;
    let body = |delay_ms: u64, n: u64| json!({"delay_ms": delay_ms, "payload": n, "debounce": {"max_wait_ms": max_wait_ms}});
    let before = now_us();
    let (st, first) = put(&s.s, "k", body(2_000, 1));
    assert_eq!(st, 201, "{first}");
    let (_, g) = get(&s.s, "k");
    let first_at = us(&g["debounce"], "first_at_us");
    let cap = us(&g["debounce"], "cap_us");
    assert!(first_at >= before && first_at <= now_us(), "{g}");
    assert_eq!(cap, first_at + max_wait_ms * 1_000);
    assert_eq!(g["debounce"]["max_wait_ms"], max_wait_ms);
    // A second PUT moves the deadline, keeps the burst, and its payload is the latest.
    let (st, second) = put(&s.s, "k", body(15_000, 2));
    assert_eq!(st, 200, "{second}");
    assert!(us(&second, "fire_at_us") > us(&first, "fire_at_us"));
    let (_, g) = get(&s.s, "k");
    assert_eq!(
        (us(&g["debounce"], "first_at_us"), &g["payload"]),
        (first_at, &json!(2))
    );

    s.sigkill();
    let s = Configured::journal(dir.path(), "", &args);
    let (st, g) = get(&s.s, "k");
    assert_eq!(st, 200, "{g}");
    assert_eq!(us(&g["debounce"], "first_at_us"), first_at, "{g}");
    assert_eq!(us(&g["debounce"], "cap_us"), cap);
    // After the restart a PUT still cannot move the deadline past the cap.
    let (st, r) = put(&s.s, "k", body(600_000, 3));
    assert_eq!((st, us(&r, "fire_at_us")), (200, cap), "{r}");
    assert!(
        now_us() < cap,
        "the restart took the whole burst; the test proves nothing"
    );

    // It fires at the cap (never before), and that ends the burst: the next PUT starts anew.
    let give_up = Instant::now() + Duration::from_secs(30);
    while get(&s.s, "k").0 == 200 {
        assert!(Instant::now() < give_up, "never fired");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(now_us() >= cap, "fired before its cap");
    put(&s.s, "k", body(600_000, 4));
    let (_, g) = get(&s.s, "k");
    assert!(us(&g["debounce"], "first_at_us") >= cap, "{g}");
    // A PUT without debounce ends the burst too.
    put(&s.s, "k", json!({"delay_ms": 600_000}));
    let (_, g) = get(&s.s, "k");
    assert!(g.get("debounce").is_none(), "{g}");
}

#[test]
fn the_cap_survives_a_sigkill_on_redis() {
    let redis = redis_server::RedisServer::start();
    let url = redis.url();
    let args = ["--redis", url.as_str(), "--shards", "2"];
    let mut s = Server::start(&args);
    let body = json!({"delay_ms": 900_000, "debounce": {"max_wait_ms": 600_000}});
    let (st, r) = put(&s, "k", body.clone());
    assert_eq!(st, 201, "{r}");
    let (_, g) = get(&s, "k");
    let (first_at, cap) = (
        us(&g["debounce"], "first_at_us"),
        us(&g["debounce"], "cap_us"),
    );
    assert_eq!(us(&r, "fire_at_us"), cap, "the cap is the earlier: {r}");
    let _ = s.child.kill();
    let _ = s.child.wait();
    drop(s);
    let s = Server::start(&args);
    let (st, g) = get(&s, "k");
    assert_eq!(st, 200, "{g}");
    assert_eq!(
        (
            us(&g["debounce"], "first_at_us"),
            us(&g["debounce"], "cap_us")
        ),
        (first_at, cap)
    );
    let (st, r) = put(
        &s,
        "k",
        json!({"delay_ms": 900_000, "debounce": {"max_wait_ms": 600_000}}),
    );
    assert_eq!((st, us(&r, "fire_at_us")), (200, cap), "{r}");
}

#[test]
fn a_batch_item_debounces_as_a_put_does() {
    let s = Server::start(&["--shards", "2"]);
    let item = |delay_ms: u64| json!({"key": "b", "delay_ms": delay_ms, "debounce": {"max_wait_ms": 60_000}});
    let body = json!({"timers": [item(30_000), item(600_000), item(1_000)]});
    let (st, out) = s.json("POST", "/v1/timers/t", &body.to_string());
    assert_eq!(st, 200, "{out}");
    let r = out["results"].as_array().expect("results");
    let (_, g) = get(&s, "b");
    let cap = us(&g["debounce"], "cap_us");
    assert_eq!(
        us(&r[1], "fire_at_us"),
        cap,
        "the second item is held to the cap: {out}"
    );
    assert!(
        us(&r[2], "fire_at_us") < cap,
        "and the third moves it earlier: {out}"
    );
    assert_eq!(us(&g, "fire_at_us"), us(&r[2], "fire_at_us"));
}

#[test]
fn bad_debounce_is_400_naming_the_field() {
    let s = Server::start(&[]);
    for d in [
        json!({}),
        json!(null),
        json!(5),
        json!({"max_wait_ms": -1}),
        json!({"max_wait_ms": "5"}),
        json!({"max_wait_ms": 1.5}),
        json!({"max_wait_ms": 315_360_000_001u64}),
        json!({"max_wait_ms": 5, "min_wait_ms": 1}),
    ] {
        let (st, e) = put(&s, "k", json!({"delay_ms": 1, "debounce": d}));
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("invalid_field")),
            "{d}"
        );
        let message = e["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("debounce"), "{d}: {message}");
    }
    let (st, e) = put(&s, "k", json!({"debounce": {"max_wait_ms": 5}}));
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (400, Some("invalid_deadline"))
    );
    assert_eq!(get(&s, "k").0, 404);
}

#[test]
fn a_webhook_timer_held_to_its_cap_shows_the_cap_as_its_deadline() {
    let dir = tempfile::tempdir().expect("dir");
    let s = Configured::journal(
        dir.path(),
        "callback_allow = [\"http://127.0.0.1:9/\"]\n",
        &["--shards", "2"],
    );
    let body = |delay_ms: u64| {
        json!({"delay_ms": delay_ms, "callback": {"url": "http://127.0.0.1:9/hook"},
               "debounce": {"max_wait_ms": 600_000}})
    };
    put(&s.s, "w", body(300_000));
    let (st, r) = put(&s.s, "w", body(900_000));
    assert_eq!(st, 200, "{r}");
    let (_, g) = get(&s.s, "w");
    let cap = us(&g["debounce"], "cap_us");
    assert_eq!(
        (us(&r, "fire_at_us"), us(&g, "fire_at_us")),
        (cap, cap),
        "{g}"
    );
    assert_eq!(g["delivery"]["state"], "pending");
    assert_eq!(g["callback"]["url"], "http://127.0.0.1:9/hook");
}

#[test]
fn after_a_sigkill_a_debounced_webhook_fires_at_its_cap_and_a_batch_item_is_held_to_it() {
    let rx = receiver::Receiver::ok();
    let config = format!(
        "callback_allow = [{:?}]\ncallback_allow_networks = [\"127.0.0.1/32\"]\n",
        rx.base()
    );
    let dir = tempfile::tempdir().expect("dir");
    let args = ["--shards", "2", "--fsync", "always"];
    let s = Configured::journal(dir.path(), &config, &args);
    let hook = |delay_ms: u64, max_wait_ms: u64, n: u64| {
        json!({"delay_ms": delay_ms, "payload": n, "callback": {"url": rx.url("hook")},
               "debounce": {"max_wait_ms": max_wait_ms}})
    };
    // "a": a burst of two writes whose cap is still ahead after the restart.
    put(&s.s, "a", hook(2_000, 15_000, 1));
    put(&s.s, "a", hook(14_000, 15_000, 2));
    let (_, g) = get(&s.s, "a");
    let cap_a = us(&g["debounce"], "cap_us");
    // "b": due in ten minutes, but capped two seconds after its first write, a cap that
    // passes while the server is down.
    let (_, r) = put(&s.s, "b", hook(600_000, 2_000, 1));
    let (_, g) = get(&s.s, "b");
    let cap_b = us(&g["debounce"], "cap_us");
    assert_eq!(us(&r, "fire_at_us"), cap_b, "{r}");

    s.sigkill();
    while now_us() <= cap_b + 200_000 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = Configured::journal(dir.path(), &config, &args);
    // A batch item of "a" after the restart is held to the burst's cap as a PUT is.
    let body = json!({"timers": [{"key": "a", "delay_ms": 600_000, "payload": 3,
        "callback": {"url": rx.url("hook")}, "debounce": {"max_wait_ms": 15_000}}]});
    let (st, out) = s.s.json("POST", "/v1/timers/t", &body.to_string());
    assert_eq!(st, 200, "{out}");
    let item = &out["results"][0];
    assert_eq!(
        (item["status"].as_u64(), us(item, "fire_at_us")),
        (Some(200), cap_a),
        "{out}"
    );
    assert!(
        now_us() < cap_a,
        "the restart took the whole burst; the test proves nothing"
    );

    // Each fires at its cap: the deadline its delivery names, never the later one it was
    // written with; and not before it.
    let fired = |key: &str| {
        let got = rx.wait(Duration::from_secs(30), |all| {
            all.iter().any(|d| d.json()["key"] == key)
        });
        got.into_iter()
            .map(|d| d.json())
            .find(|d| d["key"] == key)
            .unwrap_or_else(|| panic!("{key} never delivered"))
    };
    let b = fired("b");
    assert_eq!(us(&b, "fire_at_us"), cap_b, "{b}");
    assert!(us(&b, "fired_at_us") >= cap_b, "{b}");
    let a = fired("a");
    assert_eq!(
        (us(&a, "fire_at_us"), &a["payload"]),
        (cap_a, &json!(3)),
        "{a}"
    );
    assert_eq!(a["version"], item["version"], "{a}");
    assert!(us(&a, "fired_at_us") >= cap_a, "fired before its cap: {a}");
}

#[test]
fn a_condition_is_checked_before_the_burst_and_a_refusal_leaves_it() {
    let s = Server::start(&["--shards", "2"]);
    let body = |delay_ms: u64, cond: Value| {
        let mut b = json!({"delay_ms": delay_ms, "debounce": {"max_wait_ms": 600_000}});
        if let (Some(b), Some(c)) = (b.as_object_mut(), cond.as_object()) {
            b.extend(c.clone());
        }
        b
    };
    let (st, r) = put(&s, "k", body(300_000, json!({"if": "absent"})));
    assert_eq!(st, 201, "{r}");
    let v = us(&r, "version");
    let (_, g) = get(&s, "k");
    let burst = g["debounce"].clone();
    // Refused: nothing moves, the burst included.
    let (st, e) = put(&s, "k", body(1_000, json!({"if": "absent"})));
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("exists")),
        "{e}"
    );
    let (st, e) = put(&s, "k", body(1_000, json!({"if_version": v + 1})));
    assert_eq!(st, 409, "{e}");
    let (_, g) = get(&s, "k");
    assert_eq!((us(&g, "version"), &g["debounce"]), (v, &burst), "{g}");
    // Applied by its version: the same burst, held to its cap.
    let (st, r) = put(&s, "k", body(900_000, json!({"if_version": v})));
    assert_eq!(
        (st, us(&r, "fire_at_us")),
        (200, us(&burst, "cap_us")),
        "{r}"
    );
    let (_, g) = get(&s, "k");
    assert_eq!(g["debounce"], burst, "{g}");
}

/// Clients writing the key at once: enough that a write is always on its way while the
/// journal commits.
const WRITERS: usize = 8;

/// PUTs each client writes before it reads their answers.
const PIPELINED: usize = 32;

/// A key written without pause keeps the cap's promise on the journal: each burst fires about
/// at its cap although the PUTs of the next keep coming, never before it, and the last PUT's
/// payload is delivered. (Before, each new PUT replaced the due timer with a version not yet
/// durable, and the key fired only once the writes stopped.)
#[test]
fn a_key_written_without_pause_fires_at_each_cap_on_the_journal() {
    let rx = receiver::Receiver::ok();
    let config = format!(
        "callback_allow = [{:?}]\ncallback_allow_networks = [\"127.0.0.1/32\"]\n",
        rx.base()
    );
    let dir = tempfile::tempdir().expect("dir");
    let s = Configured::journal(dir.path(), &config, &["--shards", "1", "--fsync", "always"]);
    let n = std::sync::atomic::AtomicU64::new(0);
    let end = Instant::now() + Duration::from_secs(4);
    std::thread::scope(|sc| {
        for _ in 0..WRITERS {
            sc.spawn(|| {
                while Instant::now() < end {
                    // Pipelined: a burst of PUTs written at once on a connection that the
                    // last one closes, then their answers.
                    let mut out = Vec::new();
                    for k in 0..PIPELINED {
                        let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let body = json!({"delay_ms": 60_000, "payload": i,
                            "callback": {"url": rx.url("hook")},
                            "debounce": {"max_wait_ms": 500}})
                        .to_string();
                        let close = if k + 1 == PIPELINED {
                            "close"
                        } else {
                            "keep-alive"
                        };
                        out.extend_from_slice(
                            format!(
                                "PUT /v1/timers/t/k HTTP/1.1\r\nhost: x\r\n\
                                 connection: {close}\r\n\
                                 content-type: application/json\r\n\
                                 content-length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        );
                    }
                    let mut c = s.s.connect();
                    std::io::Write::write_all(&mut c, &out).expect("write");
                    let mut answers = String::new();
                    std::io::Read::read_to_string(&mut c, &mut answers).expect("answers");
                    let ok = ["HTTP/1.1 200", "HTTP/1.1 201", "HTTP/1.1 503"]
                        .iter()
                        .map(|st| answers.matches(st).count())
                        .sum::<usize>();
                    assert_eq!(ok, PIPELINED, "{answers}");
                }
            });
        }
    });
    // The last write, after all the others were answered.
    let last = "last";
    let body = json!({"delay_ms": 60_000, "payload": last,
        "callback": {"url": rx.url("hook")}, "debounce": {"max_wait_ms": 500}});
    let (st, r) = put(&s.s, "k", body);
    assert!([200, 201].contains(&st), "{st} {r}");
    let got = rx.wait(Duration::from_secs(10), |all| {
        all.iter().any(|d| d.json()["payload"] == json!(last))
    });
    let fires: Vec<Value> = got.iter().map(|d| d.json()).collect();
    assert!(
        fires.iter().any(|d| d["payload"] == json!(last)),
        "the last PUT was not delivered: {} fires",
        fires.len()
    );
    eprintln!("{} PUTs, {} fires", n.into_inner(), fires.len());
    let late: Vec<u64> = fires
        .iter()
        .map(|d| {
            let (at, due) = (us(d, "fired_at_us"), us(d, "fire_at_us"));
            assert!(at >= due, "fired before its cap: {d}");
            at - due
        })
        .collect();
    assert!(
        fires.len() >= 5,
        "{} fires in 4 s of writes with a 500 ms cap (late by µs: {late:?})",
        fires.len()
    );
    // The last burst may end with the writes, at its deadline a minute on; it has not, here.
    assert!(
        late.iter().all(|&l| l < 1_000_000),
        "a burst fired more than 1 s after its cap: late by µs {late:?}"
    );
}
