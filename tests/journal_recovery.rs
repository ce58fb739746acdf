//! The journal's recovery in the real service: `punctual serve` on a real data directory,
//! SIGKILLed and started again. A dead letter and a pending timer with the same (tenant, key)
//! both survive, in either order; an operator's slip with `CURRENT` never turns into an empty,
//! healthy server; versions only grow across restarts.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{Configured as Svc, Server};
use receiver::{Receiver, Reply};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// A journal server of 2 shards on `data` with `toml` as its config file.
fn serve(data: &Path, toml: &str) -> Svc {
    Svc::journal(data, toml, &["--shards", "2"])
}

fn dead(s: &Server, tenant: &str) -> Vec<Value> {
    let (st, body) = s.json("GET", &format!("/v1/dead/{tenant}"), "");
    assert_eq!(st, 200, "{body}");
    body["dead"].as_array().cloned().unwrap_or_default()
}

/// Polls `f` until it returns `Some`, or 20 s pass.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < give_up, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A receiver that answers 400 (a permanent failure) and a server whose tenant `t` calls it;
/// `(t, k)` made a dead letter. Its version.
fn with_dead_letter(data: &Path) -> (Receiver, String, Svc, u64) {
    let rx = Receiver::start(|_, _| Reply::status(400));
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let s = serve(data, &toml);
    let (st, r) = s.s.json(
        "PUT",
        "/v1/timers/t/k",
        &json!({"delay_ms": 10, "payload": "first", "callback": {"url": rx.url("h")}}).to_string(),
    );
    assert_eq!(st, 201, "{r}");
    let version = r["version"].as_u64().expect("version");
    eventually("a dead letter", || {
        (dead(&s.s, "t").len() == 1).then_some(())
    });
    (rx, toml, s, version)
}

fn put_far(s: &Server) -> u64 {
    let (st, r) = s.json(
        "PUT",
        "/v1/timers/t/k",
        &json!({"delay_ms": 3_600_000, "payload": "second"}).to_string(),
    );
    assert_eq!(st, 201, "a dead letter does not make the key pending: {r}");
    r["version"].as_u64().expect("version")
}

#[test]
fn discarding_a_dead_letter_keeps_the_pending_timer_of_the_same_key_across_a_crash() {
    let data = tempfile::tempdir().expect("data dir");
    let (_rx, toml, s, _) = with_dead_letter(data.path());
    let version = put_far(&s.s);
    assert_eq!(s.s.req("DELETE", "/v1/dead/t/k", "").status, 204);
    s.sigkill();
    let s = serve(data.path(), &toml);
    let (st, r) = s.s.json("GET", "/v1/timers/t/k", "");
    assert_eq!(
        st, 200,
        "the pending timer was erased by the dead letter's removal: {r}"
    );
    assert_eq!(r["version"].as_u64(), Some(version));
    assert!(
        dead(&s.s, "t").is_empty(),
        "the discarded dead letter came back"
    );
}

#[test]
fn a_new_timer_under_a_dead_letters_key_keeps_the_dead_letter_across_a_crash() {
    let data = tempfile::tempdir().expect("data dir");
    let (_rx, toml, s, dead_version) = with_dead_letter(data.path());
    let version = put_far(&s.s);
    s.sigkill();
    let s = serve(data.path(), &toml);
    let (st, r) = s.s.json("GET", "/v1/timers/t/k", "");
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["version"].as_u64(), Some(version));
    let letters = dead(&s.s, "t");
    assert_eq!(
        letters.len(),
        1,
        "the re-PUT erased the dead letter: {letters:?}"
    );
    assert_eq!(letters[0]["version"].as_u64(), Some(dead_version));
}

#[test]
fn the_fire_of_a_new_timer_under_a_dead_letters_key_keeps_the_dead_letter() {
    let data = tempfile::tempdir().expect("data dir");
    let (_rx, toml, s, dead_version) = with_dead_letter(data.path());
    let (st, r) = s.s.json(
        "PUT",
        "/v1/timers/t/k",
        &json!({"delay_ms": 10, "payload": "second"}).to_string(),
    );
    assert_eq!(st, 201, "{r}");
    eventually("the new timer fires", || {
        (s.s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    s.sigkill();
    let s = serve(data.path(), &toml);
    // The kill may come before the fire's record was written: the timer is then recovered
    // and fires again (at least once). Either way it leaves, and the dead letter stays.
    eventually("the new timer is gone after the restart", || {
        (s.s.req("GET", "/v1/timers/t/k", "").status == 404).then_some(())
    });
    let letters = dead(&s.s, "t");
    assert_eq!(
        letters.len(),
        1,
        "the fire erased the dead letter: {letters:?}"
    );
    assert_eq!(letters[0]["version"].as_u64(), Some(dead_version));
}

/// `punctual serve` on `data`, expected to refuse to start: its exit status and stderr.
fn refused(data: &Path) -> (std::process::ExitStatus, String) {
    let dir = data.to_string_lossy().into_owned();
    Server::refused(&["--store", "journal", "--data-dir", &dir, "--shards", "2"])
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("list").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn a_missing_current_refuses_the_start_deletes_nothing_and_its_fix_brings_every_timer_back() {
    let data = tempfile::tempdir().expect("data dir");
    let s = serve(data.path(), "");
    for i in 0..100 {
        let (st, r) = s.s.json(
            "PUT",
            &format!("/v1/timers/shop/k-{i}"),
            &json!({"delay_ms": 3_600_000}).to_string(),
        );
        assert_eq!(st, 201, "{r}");
    }
    let mut s = s;
    let pid = s.s.child.id() as i32;
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let _ = s.s.child.wait();
    let current = data.path().join("CURRENT");
    let text = std::fs::read_to_string(&current).expect("CURRENT");
    std::fs::remove_file(&current).expect("the operator's slip");
    let before = files(data.path());
    let (status, err) = refused(data.path());
    assert!(!status.success(), "{err}");
    for part in [
        "CURRENT",
        "is missing",
        "gen-1",
        "punctual journal check",
        "printf",
    ] {
        assert!(err.contains(part), "{part:?} not in: {err}");
    }
    assert!(err.contains(&data.path().display().to_string()), "{err}");
    let mut after = files(data.path());
    after.retain(|p| !p.ends_with("LOCK"));
    let mut kept = before.clone();
    kept.retain(|p| !p.ends_with("LOCK"));
    assert_eq!(after, kept, "the refused start changed the files");
    // What the message says to write is what was there.
    assert!(err.contains(&text.replace('\n', "\\n")), "{err}");
    std::fs::write(&current, text).expect("restore CURRENT");
    let s = serve(data.path(), "");
    for i in 0..100 {
        assert_eq!(
            s.s.req("GET", &format!("/v1/timers/shop/k-{i}"), "").status,
            200,
            "k-{i} lost"
        );
    }
}

/// libfaketime, which makes a process's CLOCK_REALTIME run at an offset.
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[test]
fn versions_only_grow_across_a_restart_with_the_clock_two_minutes_behind() {
    assert!(
        Path::new(FAKETIME).exists(),
        "this test needs libfaketime ({FAKETIME}): apt-get install faketime"
    );
    let data = tempfile::tempdir().expect("data dir");
    let s = serve(data.path(), "");
    let mut before = Vec::new();
    for i in 0..400 {
        let path = format!("/v1/timers/shop/k-{i}");
        let (st, r) =
            s.s.json("PUT", &path, &json!({"delay_ms": 3_600_000}).to_string());
        assert_eq!(st, 201, "{r}");
        before.push(r["version"].as_u64().expect("version"));
        assert_eq!(s.s.req("DELETE", &path, "").status, 204);
    }
    s.sigkill();
    // NTP corrects a fast clock, or a VM comes back from a snapshot: the restart runs behind.
    let dir = data.path().to_string_lossy().into_owned();
    let s = Server::start_with(
        &["--store", "journal", "--data-dir", &dir, "--shards", "2"],
        &[
            ("LD_PRELOAD", FAKETIME),
            ("FAKETIME", "-120s"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    let real_now_us = receiver::now_us();
    // A version names one scheduling of a key in the Idempotency-Key (tenant/key/version): a
    // new scheduling of the same key must never reuse or undercut an old one.
    for (i, &old) in before.iter().enumerate().take(100) {
        let path = format!("/v1/timers/shop/k-{i}");
        let (st, r) = s.json("PUT", &path, &json!({"delay_ms": 3_600_000}).to_string());
        assert_eq!(st, 201, "{r}");
        let fire_at = r["fire_at_us"].as_u64().expect("fire_at_us");
        assert!(
            fire_at < real_now_us + 3_600_000_000 - 60_000_000,
            "the server's clock is not behind (libfaketime not in effect): {r}"
        );
        let v = r["version"].as_u64().expect("version");
        assert!(v > old, "k-{i}: version {v} after {old} was handed out");
    }
}
