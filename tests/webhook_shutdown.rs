//! A stop or a crash during a webhook delivery: the real binary with its journal, a real
//! receiver, SIGTERM and SIGKILL. An attempt under way at SIGTERM finishes within the grace and
//! its outcome is recorded; an attempt cut short (a crash) never uses up the last attempt.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::Server;
use receiver::{Receiver, Reply};
use serde_json::json;
use std::time::{Duration, Instant};

/// `punctual serve` on the journal in `data`, one shard.
fn start(config: &std::path::Path, data: &std::path::Path) -> Server {
    let (config, data) = (config.to_string_lossy(), data.to_string_lossy());
    Server::start(&[
        "--config",
        &config,
        "--store",
        "journal",
        "--data-dir",
        &data,
        "--shards",
        "1",
    ])
}

fn write_config(dir: &tempfile::TempDir, rx: &Receiver, timeout_ms: u64) -> std::path::PathBuf {
    let path = dir.path().join("punctual.toml");
    let toml = format!(
        "callback_allow = [{:?}]\nwebhook_timeout_ms = {timeout_ms}\nshutdown_grace_ms = 5000\n",
        rx.base()
    );
    std::fs::write(&path, toml).expect("config");
    path
}

/// Registers `t/k`: due at once, one attempt only.
fn put_last_chance(s: &Server, rx: &Receiver) {
    let (st, r) = s.json(
        "PUT",
        "/v1/timers/t/k",
        &json!({"delay_ms": 1, "callback": {"url": rx.url("h")}, "retry": {"max_attempts": 1}})
            .to_string(),
    );
    assert_eq!(st, 201, "{r}");
}

fn dead(s: &Server) -> Vec<serde_json::Value> {
    let (st, body) = s.json("GET", "/v1/dead/t", "");
    assert_eq!(st, 200, "{body}");
    body["dead"].as_array().cloned().unwrap_or_default()
}

/// Waits (at most 30 s) for the process to exit; its status.
fn wait_exit(s: &mut Server) -> std::process::ExitStatus {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = s.child.try_wait() {
            return status;
        }
        assert!(Instant::now() < give_up, "punctual did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_lets_a_delivery_in_flight_finish_and_records_its_outcome() {
    let rx = Receiver::start(|_, _| Reply::status(200).after(Duration::from_millis(1500)));
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(&dir, &rx, 5000);
    let data = dir.path().join("data");
    let mut s = start(&config, &data);
    put_last_chance(&s, &rx);
    rx.wait(Duration::from_secs(20), |r| !r.is_empty());
    // The request is at the receiver, its answer 1.5 s away.
    // SAFETY: signalling our own child process, whose pid is live until we reap it.
    assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) }, 0);
    let status = wait_exit(&mut s);
    assert!(status.success(), "{status}");
    let s = start(&config, &data);
    let (st, r) = s.json("GET", "/v1/timers/t/k", "");
    assert_eq!(st, 404, "the delivered timer came back: {r}");
    assert!(
        dead(&s).is_empty(),
        "a delivered timer became a dead letter"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(rx.received().len(), 1, "delivered again after the restart");
}

#[test]
fn a_crash_during_the_last_attempt_does_not_use_it_up() {
    // The first request hangs (the process is killed meanwhile); later ones succeed.
    let rx = Receiver::start(|_, before| {
        if before.is_empty() {
            Reply::status(200).after(Duration::from_secs(30))
        } else {
            Reply::status(200)
        }
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(&dir, &rx, 1000);
    let data = dir.path().join("data");
    let mut s = start(&config, &data);
    put_last_chance(&s, &rx);
    rx.wait(Duration::from_secs(20), |r| !r.is_empty());
    let _ = s.child.kill(); // SIGKILL during the only attempt
    let _ = s.child.wait();
    let s = start(&config, &data);
    let got = rx.wait(Duration::from_secs(20), |r| r.len() >= 2);
    assert_eq!(got.len(), 2, "the cut attempt was not made again");
    assert_eq!(got[1].header("punctual-attempt"), Some("1"));
    assert_eq!(
        got[0].header("idempotency-key"),
        got[1].header("idempotency-key")
    );
    let give_up = Instant::now() + Duration::from_secs(20);
    while s.req("GET", "/v1/timers/t/k", "").status != 404 {
        assert!(Instant::now() < give_up, "the delivered timer never left");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        dead(&s).is_empty(),
        "a delivered timer became a dead letter"
    );
}
