//! A restart keeps the journal's promise while it recovers: `punctual serve` is restarted
//! after a SIGKILL on a journal of many timers, and clients send GETs, DELETEs and PUTs of
//! keys it holds from the moment it listens. A shard holds the requests that arrive while it
//! loads its timers and applies them in order once its table is whole, or refuses those that
//! waited past the store's ack timeout (503): no answer may come from a table loaded in part
//! (a GET or DELETE answered 404, a PUT answered 201 "new" for a key that is pending).
//!
//! With paging on, a start takes the timers due within the horizon first and fires them while
//! it pages the rest: a timer that falls due then fires before the start ends, on time, once,
//! and the requests still wait for the whole start.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;
use api_support::{read_response, request, try_request, Configured, Server};
use receiver::{now_us, Receiver};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Timers the journal holds at the restart: enough that loading them takes a while.
const TIMERS: usize = 200_000;
const BATCH: usize = 10_000;
/// Requests each client sends during the recovery, at most.
const PER_CLIENT: usize = 300;

/// Writes `TIMERS` timers due in an hour, in batches: their versions, by index.
fn fill(addr: &SocketAddr) -> Vec<u64> {
    let mut versions = Vec::with_capacity(TIMERS);
    for b in 0..TIMERS / BATCH {
        let items: Vec<String> = (b * BATCH..(b + 1) * BATCH)
            .map(|i| format!(r#"{{"key": "k-{i}", "delay_ms": 3600000}}"#))
            .collect();
        let body = format!(r#"{{"timers": [{}]}}"#, items.join(","));
        let r = request(*addr, "POST", "/v1/timers/shop", &[], body.as_bytes());
        assert_eq!(r.status, 200, "batch {b}");
        for item in r.json()["results"].as_array().expect("results") {
            assert_eq!(item["status"].as_u64(), Some(201), "{item}");
            versions.push(item["version"].as_u64().expect("version"));
        }
    }
    versions
}

/// What a request of `method` on a key pending under `version` was answered, judged: `None`
/// when the answer is one a whole table gives (or a refusal), else why not.
fn judge(method: &str, version: u64, status: u16, body: &serde_json::Value) -> Option<String> {
    let answered = body["version"].as_u64();
    let fine = match (method, status) {
        (_, 503) => true,
        ("GET", 200) => answered == Some(version),
        ("DELETE", 204) => true,
        ("PUT", 200) => answered.is_some_and(|v| v > version),
        _ => false,
    };
    (!fine).then(|| format!("{method} answered {status} {body} for a key pending under {version}"))
}

/// Requests of `method` on keys the journal holds, each on a connection of its own, sent
/// without waiting for their answers until /healthz says 200 (at most `PER_CLIENT`), from the
/// keys written last (the last a replay loads) back; then every answer read and judged. The
/// requests sent, and what was wrong.
fn during_recovery(
    addr: SocketAddr,
    method: &str,
    c: usize,
    versions: &[u64],
    healthy: &AtomicBool,
) -> (usize, Vec<String>) {
    let body = if method == "PUT" {
        r#"{"delay_ms": 3600000}"#
    } else {
        ""
    };
    let mut sent = Vec::new();
    let mut i = TIMERS - 1 - c;
    while !healthy.load(Ordering::Acquire) && sent.len() < PER_CLIENT {
        let req = format!(
            "{method} /v1/timers/shop/k-{i} HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let Ok(mut s) = TcpStream::connect(addr) else {
            // Not listening yet.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        if s.write_all(req.as_bytes()).is_ok() {
            sent.push((i, s));
            i -= 3;
        }
    }
    let mut wrong = Vec::new();
    for (i, s) in &mut sent {
        let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
        match read_response(s) {
            Ok(r) => {
                let json = serde_json::from_slice(&r.body).unwrap_or_default();
                wrong.extend(judge(method, versions[*i], r.status, &json));
            }
            Err(e) => wrong.push(format!("{method} k-{i}: no answer: {e}")),
        }
    }
    (sent.len(), wrong)
}

/// Every request is answered: none of the connections made from the moment the restart
/// listens (nor those made while the killed process was dying: they are refused, and the
/// client retries) is reset.
#[test]
fn requests_while_the_journal_recovers_are_held_or_refused_never_answered_from_a_partial_table() {
    requests_during_a_restart(&[]);
}

/// The same with paging on: the timers, due in an hour, are all paged at the start's second
/// walk, which the requests wait for.
#[test]
fn requests_while_a_paged_journal_recovers_are_held_or_refused_never_answered_from_a_partial_table()
{
    requests_during_a_restart(&["--page-horizon-s", "60"]);
}

fn requests_during_a_restart(extra: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8");
    let args = ["--store", "journal", "--data-dir", data, "--shards", "1"];
    let args = [&args[..], &["--shard-capacity", "400000"], extra].concat();
    let mut first = Server::start(&args);
    let versions = Arc::new(fill(&first.addr));
    first.child.kill().expect("SIGKILL");
    let _ = first.child.wait();

    let mut second = Server::spawn_at(first.addr, &args);
    let (addr, started) = (second.addr, Instant::now());
    let healthy = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = ["GET", "DELETE", "PUT"]
        .into_iter()
        .enumerate()
        .map(|(c, method)| {
            let (versions, healthy) = (versions.clone(), healthy.clone());
            std::thread::spawn(move || during_recovery(addr, method, c, &versions, &healthy))
        })
        .collect();
    second.wait_healthy();
    healthy.store(true, Ordering::Release);
    let recovery = started.elapsed();
    let (mut early, mut wrong) = (0, Vec::new());
    for c in clients {
        let (sent, w) = c.join().expect("client");
        early += sent;
        wrong.extend(w);
    }
    assert!(
        wrong.is_empty(),
        "{} answers from a table loaded in part, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(
        early > 0,
        "no request was sent during the recovery ({recovery:?})"
    );
    eprintln!(
        "{early} requests sent during the recovery of {TIMERS} timers ({recovery:?} from the spawn to /healthz 200), every answer whole"
    );
}

/// Probe timers with a webhook, due 100 ms apart from 3 s after they are written.
const PROBES: u64 = 200;

/// A restart on a journal of `TIMERS` paged timers (due in an hour, beyond a 60 s horizon)
/// and `PROBES` probes due within the horizon: the probes that fall due while the start pages
/// the rest fire then, before `/healthz` says the start is over, none before its deadline and
/// each once; the paged timers are all still there afterwards.
#[test]
fn timers_due_during_a_paged_start_fire_before_it_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let rx = Receiver::ok();
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let args = [
        "--shards",
        "1",
        "--shard-capacity",
        "400000",
        "--page-horizon-s",
        "60",
    ];
    let first = Configured::journal(&data, &toml, &args);
    let versions = fill(&first.s.addr);
    let at = now_us() / 1_000 + 3_000;
    let probes: Vec<String> = (0..PROBES)
        .map(|i| {
            let url = format!("{}probe", rx.base());
            format!(
                r#"{{"key": "probe-{i}", "fire_at_ms": {}, "callback": {{"url": "{url}"}}}}"#,
                at + i * 100
            )
        })
        .collect();
    let body = format!(r#"{{"timers": [{}]}}"#, probes.join(","));
    let r = request(
        first.s.addr,
        "POST",
        "/v1/timers/shop",
        &[],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let addr = first.s.addr;
    let spawned = now_us();
    let second = first.respawn_after_sigkill(&data, &args);
    // The last moment /healthz was asked and answered 503: the start was not over then.
    let mut loading_at = spawned;
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < give_up, "the start did not end in 60 s");
        let asked = now_us();
        match try_request(addr, "GET", "/healthz", &[], b"") {
            Ok(r) if r.status == 200 => break,
            Ok(_) => loading_at = asked,
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let last_due = (at + (PROBES - 1) * 100) * 1_000;
    while now_us() < last_due + 2_000_000 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut fired = std::collections::BTreeMap::<String, Vec<u64>>::new();
    for d in rx.received() {
        let b = d.json();
        let due = b["fire_at_us"].as_u64().expect("fire_at_us");
        assert!(d.at_us >= due, "delivered before its deadline: {b}");
        let key = b["key"].as_str().expect("key").to_string();
        fired.entry(key).or_default().push(d.at_us);
    }
    let twice: Vec<_> = fired.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(twice.is_empty(), "fired more than once: {twice:?}");
    assert_eq!(fired.len() as u64, PROBES, "every probe fired");
    let during = fired.values().filter(|at| at[0] < loading_at).count();
    assert!(
        loading_at > spawned + 1_000_000 && during > 0,
        "no probe fired while the start paged the rest ({} ms of start seen loading, {during} fired in it)",
        (loading_at - spawned) / 1_000
    );
    for i in (0..TIMERS).step_by(TIMERS / 10) {
        let r = request(addr, "GET", &format!("/v1/timers/shop/k-{i}"), &[], b"");
        assert_eq!(r.status, 200, "k-{i}");
        assert_eq!(r.json()["version"].as_u64(), Some(versions[i]), "k-{i}");
    }
    drop(second);
    eprintln!(
        "{during} of {PROBES} probes fired while the start ({} ms seen loading) paged {TIMERS} timers",
        (loading_at - spawned) / 1_000
    );
}
