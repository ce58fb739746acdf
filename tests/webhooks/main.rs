//! Webhook delivery end to end: the real `punctual` binary, a real receiver on a free port
//! (`support/receiver.rs`), and for the restart a real `redis-server`. Timing is asserted only
//! as correctness bounds (never early; not absurdly late).

#[path = "../api_support/mod.rs"]
mod api_support;
#[path = "../support/receiver.rs"]
mod receiver;
#[path = "../support/redis_server.rs"]
mod redis_server;

use api_support::Server;
use punctual::sink::webhook::sign;
use receiver::{Receiver, Reply};
use serde_json::{json, Value};
use std::time::Duration;

/// A running server and the config file it reads.
struct Svc {
    s: Server,
    _config: tempfile::NamedTempFile,
}

impl std::ops::Deref for Svc {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.s
    }
}

fn config_file(toml: &str) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(toml.as_bytes()).expect("write config");
    f
}

/// `punctual serve` with `toml` as its config file, plus `args`.
fn start(toml: &str, args: &[&str]) -> Svc {
    let config = config_file(toml);
    let path = config.path().to_string_lossy().into_owned();
    let mut all = vec!["--config", path.as_str()];
    if !args.contains(&"--shards") {
        all.extend(["--shards", "2"]);
    }
    all.extend_from_slice(args);
    Svc {
        s: Server::start(&all),
        _config: config,
    }
}

fn put(s: &Server, tenant: &str, key: &str, body: Value) -> (u16, Value) {
    s.json(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &body.to_string(),
    )
}

fn dead(s: &Server, tenant: &str) -> Vec<Value> {
    let (st, body) = s.json("GET", &format!("/v1/dead/{tenant}"), "");
    assert_eq!(st, 200, "{body}");
    body["dead"].as_array().cloned().unwrap_or_default()
}

/// Polls `f` until it returns `Some`, or 20 s pass.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "never happened: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

const LONG: Duration = Duration::from_secs(20);

mod dead;
mod delivery;
mod restarts;
mod tenants;
