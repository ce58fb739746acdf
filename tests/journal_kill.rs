//! The journal's promise that an answer is durable, held by the real binary across SIGKILL:
//! `punctual serve` on the journal takes PUTs (timers due in seconds, with a webhook, and
//! timers due in an hour) and pairs of DELETEs of one key from two connections, is killed,
//! and is restarted on the same port and data directory. Every timer answered 201 is pending
//! there with its version or delivered with it, every key a DELETE answered 200 or 404 is
//! gone, and a DELETE's 404, the one a retried DELETE gets, is never answered before the
//! cancel it reports is on disk: the kill comes the moment one arrives while the other
//! DELETE of its pair is still unanswered.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{read_response, try_request, Server};
use receiver::{Receiver, Reply};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the clients were answered before the kill.
#[derive(Default)]
struct Answered {
    /// Timers due in seconds, with a webhook: key → the version answered 201.
    soon: HashMap<String, u64>,
    /// Timers due in an hour: key → the version answered 201.
    later: HashMap<String, u64>,
    /// Keys a DELETE was sent for, answered or not.
    delete_sent: HashSet<String>,
    /// Keys a DELETE was answered 200 or 404 for: the cancel is durable.
    deleted: HashSet<String>,
}

type Shared = Arc<Mutex<Answered>>;

fn with<T>(a: &Shared, f: impl FnOnce(&mut Answered) -> T) -> T {
    f(&mut a.lock().unwrap_or_else(|p| p.into_inner()))
}

/// A PUT; the version answered 201, if it was.
fn put(addr: SocketAddr, key: &str, body: &str) -> Option<u64> {
    let r = try_request(
        addr,
        "PUT",
        &format!("/v1/timers/shop/{key}"),
        &[],
        body.as_bytes(),
    );
    let r = r.ok().filter(|r| r.status == 201)?;
    r.json()["version"].as_u64()
}

/// A DELETE sent, its answer not read yet.
fn send_delete(addr: SocketAddr, key: &str) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let req =
        format!("DELETE /v1/timers/shop/{key} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes())?;
    Ok(s)
}

/// The status a DELETE sent on `s` is answered with (`None`: no answer, the server died).
fn status_of(s: Option<TcpStream>) -> Option<u16> {
    read_response(&mut s?).ok().map(|r| r.status)
}

/// One writer's load until `stop`: a timer due in 2 s with a webhook, one due in an hour,
/// and every third of those deleted by a pair of DELETEs on two connections at once.
fn writer(addr: SocketAddr, hook: String, w: usize, answered: Shared, stop: Arc<AtomicBool>) {
    let soon = format!(r#"{{"delay_ms": 2000, "payload": 1, "callback": {{"url": "{hook}"}}}}"#);
    let later = r#"{"delay_ms": 3600000, "payload": 2}"#;
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("s-{w}-{n}");
        if let Some(v) = put(addr, &key, &soon) {
            with(&answered, |a| a.soon.insert(key, v));
        }
        let key = format!("l-{w}-{n}");
        if let Some(v) = put(addr, &key, later) {
            with(&answered, |a| a.later.insert(key.clone(), v));
            if n % 3 == 0 {
                with(&answered, |a| a.delete_sent.insert(key.clone()));
                let (first, second) = (send_delete(addr, &key).ok(), send_delete(addr, &key).ok());
                let got = [status_of(first), status_of(second)];
                if got.iter().any(|s| matches!(s, Some(200 | 404))) {
                    with(&answered, |a| a.deleted.insert(key));
                }
            }
        }
    }
}

/// Pairs of DELETEs of one key, each pair's first sent before its second, until one is
/// answered 404 while its pair's first is unanswered: the moment a 404 answered from memory
/// before the first's cancel is durable would be lost. The key so answered, once the server
/// was killed there (`None`: no pair ended so in `tries`; killed anyway).
fn kill_at_a_retried_deletes_404(
    s: &mut Server,
    answered: &Shared,
    tries: usize,
) -> Option<String> {
    let addr = s.addr;
    let mut caught = None;
    for i in 0..tries {
        let key = format!("probe-{i}");
        if put(addr, &key, r#"{"delay_ms": 3600000}"#).is_none() {
            continue;
        }
        with(answered, |a| a.delete_sent.insert(key.clone()));
        let (Ok(first), Ok(second)) = (send_delete(addr, &key), send_delete(addr, &key)) else {
            continue;
        };
        if status_of(Some(second)) == Some(404) {
            s.child.kill().expect("SIGKILL");
            caught = Some(key);
            break;
        }
        if status_of(Some(first)) == Some(404) {
            with(answered, |a| a.deleted.insert(key));
        }
    }
    if caught.is_none() {
        s.child.kill().expect("SIGKILL");
    }
    let _ = s.child.wait();
    caught
}

#[test]
fn every_answer_given_before_a_sigkill_holds_after_a_restart_on_the_same_port() {
    let rx = Receiver::start(|_, _| Reply::status(200));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("punctual.toml");
    std::fs::write(&config, format!("callback_allow = [{:?}]\n", rx.base())).expect("config");
    let data = dir.path().join("data");
    let (config, data) = (
        config.to_str().expect("utf-8"),
        data.to_str().expect("utf-8"),
    );
    let args = [
        "--config",
        config,
        "--store",
        "journal",
        "--data-dir",
        data,
        "--shards",
        "2",
    ];
    let mut first = Server::start(&args);
    let addr = first.addr;
    let answered = Shared::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (answered, stop, hook) = (answered.clone(), stop.clone(), rx.url("hook"));
            std::thread::spawn(move || writer(addr, hook, w, answered, stop))
        })
        .collect();
    // The kill comes in the middle of the load, once some of each kind was answered.
    let give_up = Instant::now() + Duration::from_secs(60);
    while with(&answered, |a| a.soon.len() < 200 || a.deleted.len() < 50)
        && Instant::now() < give_up
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let probed = kill_at_a_retried_deletes_404(&mut first, &answered, 500);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let a = std::mem::take(&mut *answered.lock().expect("lock"));
    assert!(
        a.soon.len() >= 50 && a.deleted.len() >= 10,
        "the load was real: {} soon, {} deleted",
        a.soon.len(),
        a.deleted.len()
    );

    let second = Server::start_at(addr, &args);
    if let Some(key) = &probed {
        let r = second.req("GET", &format!("/v1/timers/shop/{key}"), "");
        assert_eq!(
            r.status, 404,
            "{key}'s DELETE was answered 404, and it came back"
        );
    }
    for key in &a.deleted {
        let r = second.req("GET", &format!("/v1/timers/shop/{key}"), "");
        assert_eq!(
            r.status, 404,
            "{key} was deleted (answered 200 or 404) and came back"
        );
    }
    for (key, v) in a.later.iter().filter(|(k, _)| !a.delete_sent.contains(*k)) {
        let (status, body) = second.json("GET", &format!("/v1/timers/shop/{key}"), "");
        assert_eq!(status, 200, "{key} was answered 201 and is lost");
        assert_eq!(
            body["version"].as_u64(),
            Some(*v),
            "{key}'s version changed"
        );
    }
    // Each timer due in seconds is delivered with its version, by either server.
    let delivered = |got: &[receiver::Received]| -> HashSet<(String, u64)> {
        got.iter()
            .map(|r| r.json())
            .filter_map(|b| Some((b["key"].as_str()?.to_string(), b["version"].as_u64()?)))
            .collect()
    };
    let owed: HashSet<(String, u64)> = a.soon.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let got = rx.wait(Duration::from_secs(60), |got| {
        owed.is_subset(&delivered(got))
    });
    let missing: Vec<_> = owed.difference(&delivered(&got)).cloned().collect();
    assert!(
        missing.is_empty(),
        "{} of {} timers answered 201 were never delivered, e.g. {:?}",
        missing.len(),
        owed.len(),
        &missing[..missing.len().min(5)]
    );
    for r in &got {
        let b = r.json();
        let (due, at) = (b["fire_at_us"].as_u64(), b["fired_at_us"].as_u64());
        assert!(
            matches!((due, at), (Some(d), Some(t)) if d <= t),
            "delivered early: {b}"
        );
    }
    eprintln!(
        "answered before the kill: {} soon, {} later, {} deleted; the kill came at a retried DELETE's 404: {}",
        a.soon.len(),
        a.later.len(),
        a.deleted.len(),
        probed.is_some()
    );
}
