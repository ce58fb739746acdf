//! Receivable on time (`cargo bench --bench queue`): how long after its deadline a fired timer
//! reaches a consumer that waits in a pull queue's receive, against the same timers delivered
//! by webhook, in the same run and through the same server.
//!
//! One `punctual serve --store memory --shards 2` (the tests' light settings, `api_support`):
//! tenant `q` has a queue, tenant `w` delivers to a local receiver (`tests/support/receiver.rs`,
//! a thread per connection, answering `204`). 10,000 timers of each, due evenly over 10 s from
//! 3 s (or twice the registrations' pace, measured on a first batch) after their registration
//! (batches of 1,000, the two tenants' due times interleaved).
//! Four consumers wait in `POST /v1/queues/q/receive` (`wait_ms` 20,000, `max` 100), each on
//! a new connection per request, and ack what they get; a message's lateness is
//! CLOCK_REALTIME when its answer was read minus its `fire_at_us`. A delivery's lateness is
//! its arrival at the receiver minus its timer's deadline. Prints p50/p99/max of each and the
//! queue's over the webhook's. Both clients and the server share the host's CPUs.
//!
//! `PUNCTUAL_BENCH_SCALE=0.1` shrinks the count (not the 10 s).

#[path = "../tests/api_support/mod.rs"]
mod api_support;
#[path = "../tests/support/receiver.rs"]
mod receiver;

use api_support::{request, try_request, Server};
use receiver::{now_us, Receiver, Reply};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SPREAD_MS: u64 = 10_000;
const LEAD_MS: u64 = 3_000;
const CONSUMERS: usize = 4;

fn scale(n: u64) -> u64 {
    let s: f64 = std::env::var("PUNCTUAL_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    ((n as f64 * s) as u64).max(10)
}

/// p50, p99 and max of `v` (µs), sorted in place.
fn percentiles(v: &mut [u64]) -> [u64; 3] {
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    [at(0.50), at(0.99), v[v.len() - 1]]
}

/// The consumers' loop: receive, note each message's lateness, ack, until `done`.
fn consume(addr: std::net::SocketAddr, done: Arc<AtomicBool>, late: Arc<Mutex<Vec<u64>>>) {
    let body = json!({"max": 100, "wait_ms": 20_000, "visibility_ms": 60_000}).to_string();
    while !done.load(Ordering::Relaxed) {
        let path = "/v1/queues/q/receive";
        let Ok(r) = try_request(addr, "POST", path, &[], body.as_bytes()) else {
            return;
        };
        let read_at = now_us();
        let v = r.json();
        let messages = v["messages"].as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            continue;
        }
        let mut receipts = Vec::with_capacity(messages.len());
        if let Ok(mut l) = late.lock() {
            for m in &messages {
                let due = m["fire_at_us"].as_u64().unwrap_or(read_at);
                l.push(read_at.saturating_sub(due));
                receipts.push(m["receipt"].clone());
            }
        }
        let ack = json!({ "receipts": receipts }).to_string();
        let _ = try_request(addr, "POST", "/v1/queues/q/ack", &[], ack.as_bytes());
    }
}

fn main() {
    let n = scale(10_000);
    let rx = Receiver::start(|_, _| Reply::status(204));
    let toml = format!(
        "callback_allow = [{:?}]\ncallback_allow_networks = [\"127.0.0.1/32\"]\n\
         [tenants.q]\nqueue = true\n[tenants.w]\n",
        rx.base()
    );
    let mut conf = tempfile::NamedTempFile::new().expect("config file");
    conf.write_all(toml.as_bytes()).expect("write config");
    let path = conf.path().to_string_lossy().into_owned();
    let s = Server::start(&["--store", "memory", "--shards", "2", "--config", &path]);
    let done = Arc::new(AtomicBool::new(false));
    let late = Arc::new(Mutex::new(Vec::with_capacity(n as usize)));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (addr, done, late) = (s.addr, done.clone(), late.clone());
            std::thread::spawn(move || consume(addr, done, late))
        })
        .collect();
    let url = rx.url("/hook");
    // A batch far in the future first: the registrations' pace sets how far ahead the first
    // deadline is, so that every timer is registered before it is due.
    let probe: Vec<Value> = (0..1000)
        .map(|i| json!({"key": format!("probe{i}"), "delay_ms": 3_600_000, "callback": {"url": url}}))
        .collect();
    let body = json!({ "timers": probe }).to_string();
    let t = Instant::now();
    let r = request(s.addr, "POST", "/v1/timers/w", &[], body.as_bytes());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let batches = 2 * n.div_ceil(1000);
    let lead_ms = LEAD_MS.max(t.elapsed().as_millis() as u64 * batches * 2);
    let start_ms = now_us() / 1000 + lead_ms;
    let registering = Instant::now();
    for first in (0..n).step_by(1000) {
        for tenant in ["q", "w"] {
            let items: Vec<Value> = (first..(first + 1000).min(n))
                .map(|i| {
                    let at = start_ms + i * SPREAD_MS / n;
                    let mut item = json!({"key": format!("k{i}"), "fire_at_ms": at});
                    if tenant == "w" {
                        item["callback"] = json!({ "url": url });
                    }
                    item
                })
                .collect();
            let body = json!({ "timers": items }).to_string();
            let path = format!("/v1/timers/{tenant}");
            let r = request(s.addr, "POST", &path, &[], body.as_bytes());
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        }
    }
    let took = registering.elapsed();
    assert!(
        took < Duration::from_millis(lead_ms),
        "registering took {took:?}, past the first deadline: run with a smaller scale"
    );
    let give_up = Instant::now() + Duration::from_millis(lead_ms + SPREAD_MS + 30_000);
    let delivered = rx.wait(give_up - Instant::now(), |r| r.len() as u64 >= n);
    while late.lock().map_or(0, |l| l.len() as u64) < n && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(50));
    }
    done.store(true, Ordering::Relaxed);
    let mut hook: Vec<u64> = delivered
        .iter()
        .map(|r| {
            r.at_us
                .saturating_sub(r.json()["fire_at_us"].as_u64().unwrap_or(r.at_us))
        })
        .collect();
    let mut queue = late.lock().map(|l| l.clone()).unwrap_or_default();
    println!(
        "receivable on time: {n} timers per path due over {} s, 2 shards, {CONSUMERS} consumers",
        SPREAD_MS / 1000
    );
    if hook.is_empty() || queue.is_empty() {
        println!(
            "incomplete: {} queued, {} delivered",
            queue.len(),
            hook.len()
        );
        return;
    }
    let (h, q) = (percentiles(&mut hook), percentiles(&mut queue));
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "webhook  n={:>6}  p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms",
        hook.len(),
        ms(h[0]),
        ms(h[1]),
        ms(h[2])
    );
    println!(
        "queue    n={:>6}  p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms",
        queue.len(),
        ms(q[0]),
        ms(q[1]),
        ms(q[2])
    );
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    println!(
        "queue / webhook: p50 {:.2}x  p99 {:.2}x  max {:.2}x",
        ratio(q[0], h[0]),
        ratio(q[1], h[1]),
        ratio(q[2], h[2])
    );
    drop(s);
    for c in consumers {
        let _ = c.join();
    }
}
