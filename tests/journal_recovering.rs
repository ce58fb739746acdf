//! A restart keeps the journal's promise while it recovers: `punctual serve` is restarted
//! after a SIGKILL on a journal of many timers, and clients send GETs, DELETEs and PUTs of
//! keys it holds from the moment it listens. A shard holds the requests that arrive while it
//! loads its timers and applies them in order once its table is whole, or refuses those that
//! waited past the store's ack timeout (503): no answer may come from a table loaded in part
//! (a GET or DELETE answered 404, a PUT answered 201 "new" for a key that is pending).
//! The same holds with paging on, where a start pages the timers due beyond the horizon as it
//! loads them.

mod api_support;
use api_support::{read_response, request, Server};
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

/// The same with paging on: the timers, due in an hour, are all paged as the start loads them.
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
