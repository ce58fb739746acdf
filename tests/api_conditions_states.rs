//! Each condition (`"if": "absent"`, `"if_version"` on a PUT, `?if_version` on a DELETE, of the
//! key's own version and of another) against every state a key can be in, on the real binary,
//! with the journal store and with Redis: absent (never scheduled, and fired and done),
//! pending (in the wheel, and on the journal paged beyond `--page-horizon-s`), in flight to a
//! webhook (a real receiver holding the request), retrying (the receiver answers 500) and a
//! dead letter. One key per pair, so that each answer is checked against a key nothing else
//! touched, with what it left behind, and the conflicts' counters at the end (docs/API.md,
//! "Conditional writes").

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::{eventually, Configured, Server};
use receiver::{Receiver, Reply};
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Absent,
    Fired,
    Pending,
    Paged,
    InFlight,
    Retrying,
    Dead,
}

const STATES: [State; 7] = [
    State::Absent,
    State::Fired,
    State::Pending,
    State::Paged,
    State::InFlight,
    State::Retrying,
    State::Dead,
];

#[derive(Clone, Copy, Debug)]
enum Probe {
    IfAbsent,
    PutOwnVersion,
    PutOtherVersion,
    DeleteOwnVersion,
    DeleteOtherVersion,
}

const PROBES: [Probe; 5] = [
    Probe::IfAbsent,
    Probe::PutOwnVersion,
    Probe::PutOtherVersion,
    Probe::DeleteOwnVersion,
    Probe::DeleteOtherVersion,
];

impl State {
    /// Whether a timer is pending under the key, for the conditions.
    fn pending(self) -> bool {
        matches!(
            self,
            State::Pending | State::Paged | State::InFlight | State::Retrying
        )
    }

    /// The delivery state `GET` shows while the key is in this state.
    fn delivery(self) -> Option<&'static str> {
        match self {
            State::InFlight => Some("in_flight"),
            State::Retrying => Some("retrying"),
            _ => None,
        }
    }
}

/// The key's own version and deadline once it is in its state (0 where it never had one).
#[derive(Clone, Copy, Debug)]
struct Armed {
    version: u64,
    fire_at_us: u64,
}

fn key(state: State, probe: Probe) -> String {
    format!("{state:?}-{probe:?}").to_lowercase()
}

fn get(s: &Server, key: &str) -> (u16, Value) {
    s.json("GET", &format!("/v1/timers/t/{key}"), "")
}

fn dead_keys(s: &Server) -> Vec<String> {
    let (_, d) = s.json("GET", "/v1/dead/t", "");
    api_support::keys_of(&d["dead"])
}

/// Puts the key into `state`, answering its version and deadline.
fn arm(s: &Server, rx: &Receiver, state: State, key: &str) -> Armed {
    let hook = |path: &str, attempts: u64| {
        json!({"delay_ms": 0, "callback": {"url": rx.url(path)},
               "retry": {"max_attempts": attempts, "base_delay_ms": 60_000, "max_delay_ms": 60_000}})
    };
    let body = match state {
        State::Absent => {
            return Armed {
                version: 1,
                fire_at_us: 0,
            }
        }
        State::Fired => json!({"delay_ms": 0}),
        // Within the horizon (600 s): in the wheel. Beyond it: paged.
        State::Pending => json!({"delay_ms": 300_000}),
        State::Paged => json!({"delay_ms": 3_600_000}),
        State::InFlight => hook("hold", 3),
        State::Retrying => hook("fail", 3),
        State::Dead => hook("dead", 1),
    };
    let (st, r) = s.json("PUT", &format!("/v1/timers/t/{key}"), &body.to_string());
    assert_eq!(st, 201, "{state:?}: {r}");
    Armed {
        version: r["version"].as_u64().expect("version"),
        fire_at_us: r["fire_at_us"].as_u64().expect("fire_at_us"),
    }
}

/// Waits until every key of `state` is in it.
fn settle(s: &Server, state: State) {
    eventually(&format!("{state:?}"), || {
        let all = PROBES.iter().all(|&p| {
            let (st, g) = get(s, &key(state, p));
            match state {
                State::Absent | State::Fired => st == 404,
                State::Dead => st == 404 && dead_keys(s).contains(&key(state, p)),
                _ => st == 200 && g["delivery"]["state"].as_str() == state.delivery(),
            }
        });
        let paged = state != State::Paged || s.metric("punctual_page_timers") == 5.0;
        (all && paged).then_some(())
    });
}

/// Applies `probe` to the key and checks its answer and what it left.
fn check(s: &Server, state: State, probe: Probe, armed: Armed) {
    let k = key(state, probe);
    let at = format!("{state:?} × {probe:?}");
    let (own, other) = (armed.version, armed.version + 1);
    let put = |cond: Value| {
        let mut body = json!({"delay_ms": 60_000, "payload": "probe"});
        if let (Some(b), Some(c)) = (body.as_object_mut(), cond.as_object()) {
            b.extend(c.clone());
        }
        s.json("PUT", &format!("/v1/timers/t/{k}"), &body.to_string())
    };
    let delete = |v: u64| {
        let r = s.req("DELETE", &format!("/v1/timers/t/{k}?if_version={v}"), "");
        let body = if r.body.is_empty() {
            Value::Null
        } else {
            r.json()
        };
        (r.status, body)
    };
    let (st, answer) = match probe {
        Probe::IfAbsent => put(json!({"if": "absent"})),
        Probe::PutOwnVersion => put(json!({"if_version": own})),
        Probe::PutOtherVersion => put(json!({"if_version": other})),
        Probe::DeleteOwnVersion => delete(own),
        Probe::DeleteOtherVersion => delete(other),
    };
    let code = answer["error"]["code"].as_str().unwrap_or("");
    let (after, g) = get(s, &k);
    let untouched = || {
        assert_eq!(after, 200, "{at}: {g}");
        assert_eq!(g["version"].as_u64(), Some(own), "{at}: {g}");
        assert_ne!(g["payload"], "probe", "{at}: {g}");
        assert_eq!(
            g["delivery"]["state"].as_str(),
            state.delivery(),
            "{at}: {g}"
        );
    };
    match (state.pending(), probe) {
        (false, Probe::IfAbsent) => {
            assert_eq!(st, 201, "{at}: {answer}");
            assert_eq!((after, &g["payload"]), (200, &json!("probe")), "{at}: {g}");
        }
        (false, Probe::PutOwnVersion | Probe::PutOtherVersion) => {
            assert_eq!((st, code), (404, "not_found"), "{at}: {answer}");
            assert_eq!(after, 404, "{at}: a refused write made a timer: {g}");
        }
        (false, _) => {
            assert_eq!((st, code), (404, "not_found"), "{at}: {answer}");
            assert_eq!(after, 404, "{at}: {g}");
        }
        (true, Probe::IfAbsent) => {
            assert_eq!((st, code), (409, "exists"), "{at}: {answer}");
            assert_eq!(answer["error"]["version"].as_u64(), Some(own), "{at}");
            assert_eq!(
                answer["error"]["fire_at_us"].as_u64(),
                Some(armed.fire_at_us),
                "{at}: the timer's own deadline"
            );
            untouched();
        }
        (true, Probe::PutOwnVersion) => {
            assert_eq!(st, 200, "{at}: {answer}");
            let new = answer["version"].as_u64().expect("version");
            assert!(new > own, "{at}: {answer}");
            assert_eq!(g["version"].as_u64(), Some(new), "{at}: {g}");
            assert_eq!(g["payload"], "probe", "{at}: {g}");
            assert!(g.get("delivery").is_none(), "{at}: its delivery ended: {g}");
        }
        (true, Probe::PutOtherVersion | Probe::DeleteOtherVersion) => {
            assert_eq!((st, code), (409, "version_mismatch"), "{at}: {answer}");
            assert_eq!(answer["error"]["version"].as_u64(), Some(own), "{at}");
            untouched();
        }
        (true, Probe::DeleteOwnVersion) => {
            assert_eq!(st, 204, "{at}: {answer}");
            assert_eq!(after, 404, "{at}: {g}");
        }
    }
}

/// A receiver that holds `/hold` well past the probes (the timers stay in flight while they
/// run) and answers everything else 500, and the configuration that lets the server call it.
fn receiver() -> (Receiver, String) {
    let rx = Receiver::start(|r, _| match r.path.as_str() {
        "/hold" => Reply::status(200).after(Duration::from_secs(60)),
        _ => Reply::status(500),
    });
    let config = format!(
        "callback_allow = [{:?}]\ncallback_allow_networks = [\"127.0.0.1/32\"]\nwebhook_timeout_ms = 120000\n",
        rx.base()
    );
    (rx, config)
}

/// Every probe against every one of `states`, then the letters and the counters.
fn every_probe(s: &Server, rx: &Receiver, states: &[State]) {
    let mut armed = Vec::new();
    for &state in states {
        for probe in PROBES {
            armed.push((state, probe, arm(s, rx, state, &key(state, probe))));
        }
    }
    for &state in states {
        settle(s, state);
    }
    for &(state, probe, a) in &armed {
        check(s, state, probe, a);
    }

    // A dead letter is not touched by any condition: every one is still there.
    let letters = dead_keys(s);
    for probe in PROBES {
        assert!(
            letters.contains(&key(State::Dead, probe)),
            "{probe:?}: {letters:?}"
        );
    }
    // Nor does a plain DELETE of its key: the letter goes only through /v1/dead.
    let k = key(State::Dead, Probe::DeleteOwnVersion);
    assert_eq!(
        s.req("DELETE", &format!("/v1/timers/t/{k}"), "").status,
        404
    );
    assert!(dead_keys(s).contains(&k), "{k}");
    // Refusals counted: `exists` once per pending state, `version_mismatch` twice (a PUT and
    // a DELETE), and `not_pending` for each `if_version` PUT that found nothing.
    let pending = states.iter().filter(|s| s.pending()).count() as f64;
    let not = states.len() as f64 - pending;
    assert_eq!(s.metric("punctual_conflicts_exists"), pending);
    assert_eq!(
        s.metric("punctual_conflicts_version_mismatch"),
        2.0 * pending
    );
    assert_eq!(s.metric("punctual_conflicts_not_pending"), 2.0 * not);
}

#[test]
fn each_condition_against_every_state_of_a_key() {
    let (rx, config) = receiver();
    let dir = tempfile::tempdir().expect("dir");
    let args = ["--shards", "2", "--page-horizon-s", "600"];
    let server = Configured::journal(dir.path(), &config, &args);
    every_probe(&server.s, &rx, &STATES);
}

#[test]
fn each_condition_against_every_state_of_a_key_on_redis() {
    let (rx, config) = receiver();
    let redis = redis_server::RedisServer::start();
    let mut file = tempfile::NamedTempFile::new().expect("config file");
    std::io::Write::write_all(&mut file, config.as_bytes()).expect("write config");
    let (path, url) = (file.path().to_string_lossy().into_owned(), redis.url());
    let s = Server::start(&["--config", &path, "--redis", &url, "--shards", "2"]);
    // No paging on Redis: every other state.
    let states: Vec<State> = STATES.into_iter().filter(|&s| s != State::Paged).collect();
    every_probe(&s, &rx, &states);
}
