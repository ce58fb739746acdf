//! A worker that closes unpaid orders by pulling fired timers from punctual's queue.
//!
//! ```text
//! PUNCTUAL_URL=http://127.0.0.1:8080 PUNCTUAL_TOKEN=… \
//!     cargo run --example pull_worker -- shop ./orders
//! ```
//!
//! The shop puts a timer per order when the order is created (`PUT
//! /v1/timers/shop/order-8812` with `{"delay_ms": 900000, "payload": {"order": "8812"}}` and no
//! callback) and deletes it when the order is paid. The tenant has `queue = true`, so a timer
//! that fires waits in the queue until a worker receives and acknowledges it. This one
//! long-polls `POST /v1/queues/{tenant}/receive`, closes each order, acknowledges the batch,
//! nacks an order it failed to close (back in 5 s), and extends the leases of a batch that runs
//! past half of them. SIGTERM or SIGINT stops it: it receives no more, acknowledges what it
//! closed, and nacks the rest so that another worker gets them at once.
//!
//! An order is a file `<dir>/<order>` holding `unpaid`, `paid` or `closed`. Delivery is at least
//! once (a worker killed between its work and its ack, a lease that ends while the work runs), so
//! the work is idempotent and keyed by (key, version), which names one scheduling exactly once:
//!
//! 1. skip the message if `<dir>/.handled/<key>@<version>` exists (only acknowledge it);
//! 2. close the order if it is still `unpaid` (written to a temporary file, then renamed);
//! 3. record `.handled/<key>@<version>`, then acknowledge.
//!
//! A crash between 2 and 3 repeats step 2 on the next delivery, which changes nothing. A real
//! application does the same in its own database, in one transaction where it has one.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT_MS: u64 = 20_000;
const BATCH: u64 = 100;
const NACK_DELAY_MS: u64 = 5_000;

type Failure = Box<dyn std::error::Error>;

/// The queue's calls, each retried while punctual answers 503, 429 or not at all.
struct Queue {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Queue {
    fn call(&self, action: &str, body: &Value, stop: &AtomicBool) -> Result<Value, Failure> {
        let mut backoff = Duration::from_millis(100);
        loop {
            let mut req = self.agent.post(format!("{}/{action}", self.base));
            if let Some(t) = &self.token {
                req = req.header("Authorization", format!("Bearer {t}"));
            }
            let wait = match req.send_json(body) {
                Ok(mut resp) if resp.status() == 200 => return Ok(resp.body_mut().read_json()?),
                Ok(mut resp) if matches!(resp.status().as_u16(), 429 | 503) => {
                    let after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                        .map(Duration::from_secs)
                        .unwrap_or_default();
                    let text = resp.body_mut().read_to_string().unwrap_or_default();
                    eprintln!("{action}: {} {text}", resp.status());
                    backoff.max(after)
                }
                Ok(mut resp) => {
                    let text = resp.body_mut().read_to_string().unwrap_or_default();
                    return Err(format!("{action}: {} {text}", resp.status()).into());
                }
                // No answer: a receive's leases (if it made any) end by themselves; a settle
                // sent again is answered per receipt (204, or 409 once the first one landed).
                Err(e) => {
                    eprintln!("{action}: {e}");
                    backoff
                }
            };
            if action == "receive" && stop.load(Ordering::Relaxed) {
                return Ok(json!({"messages": []}));
            }
            std::thread::sleep(wait);
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    fn settle(&self, action: &str, receipts: &[String], extra: Value) -> Result<(), Failure> {
        let never = AtomicBool::new(false);
        for chunk in receipts.chunks(1000) {
            let mut body = json!({"receipts": chunk});
            if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra.clone()) {
                b.extend(e);
            }
            let answer = self.call(action, &body, &never)?;
            for r in answer["results"].as_array().into_iter().flatten() {
                if r["status"] != 204 {
                    // 409 lease_expired: the lease ended first; the message went (or goes) to
                    // a worker again, which finds it handled. Nothing is lost.
                    eprintln!("{action}: {} for one receipt", r["error"]["code"]);
                }
            }
        }
        Ok(())
    }
}

/// Steps 1-3 of the module doc. `Ok(true)` when this call did the work.
fn close_order(dir: &Path, msg: &Value) -> Result<bool, Failure> {
    let key = msg["key"].as_str().ok_or("a message without a key")?;
    let version = msg["version"]
        .as_u64()
        .ok_or("a message without a version")?;
    let order = match &msg["payload"]["order"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return Err(format!("message {key} names no order").into()),
    };
    // Key and order become file names: refuse what could name another file.
    let safe = |s: &str| !s.is_empty() && !s.starts_with('.') && !s.contains(['/', '\0']);
    if !safe(key) || !safe(&order) {
        return Err(format!("message {key}: not a file name").into());
    }
    let mark = dir.join(".handled").join(format!("{key}@{version}"));
    if mark.exists() {
        return Ok(false);
    }
    let file = dir.join(&order);
    match std::fs::read_to_string(&file) {
        Ok(s) if s.trim() == "unpaid" => {
            let tmp = dir.join(format!(".{order}.tmp"));
            std::fs::write(&tmp, "closed\n")?;
            std::fs::rename(&tmp, &file)?;
        }
        Ok(_) => {}                                              // paid or closed already
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {} // no such order
        Err(e) => return Err(e.into()),
    }
    std::fs::write(&mark, b"")?;
    Ok(true)
}

fn main() -> Result<(), Failure> {
    let mut args = std::env::args().skip(1);
    let (Some(tenant), Some(dir)) = (args.next(), args.next()) else {
        return Err("usage: pull_worker TENANT ORDERS_DIR (PUNCTUAL_URL, PUNCTUAL_TOKEN from the environment)".into());
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(dir.join(".handled"))?;
    let url = std::env::var("PUNCTUAL_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        // A long poll answers within wait_ms; the margin covers a slow answer.
        .timeout_global(Some(Duration::from_millis(WAIT_MS + 10_000)))
        .build()
        .into();
    let queue = Queue {
        agent,
        base: format!("{}/v1/queues/{tenant}", url.trim_end_matches('/')),
        token: std::env::var("PUNCTUAL_TOKEN").ok(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let visibility_ms: u64 = match std::env::var("PUNCTUAL_VISIBILITY_MS") {
        Ok(v) => v
            .parse()
            .map_err(|_| "PUNCTUAL_VISIBILITY_MS: not a number of milliseconds")?,
        Err(_) => 30_000,
    };
    println!("pulling {tenant}'s queue");
    let receive = json!({"max": BATCH, "wait_ms": WAIT_MS, "visibility_ms": visibility_ms});
    while !stop.load(Ordering::Relaxed) {
        let answer = queue.call("receive", &receive, &stop)?;
        let batch = answer["messages"].as_array().cloned().unwrap_or_default();
        let receipt = |m: &Value| m["receipt"].as_str().unwrap_or_default().to_string();
        let mut leased_at = Instant::now();
        let (mut done, mut failed, mut left) = (Vec::new(), Vec::new(), Vec::new());
        for (i, msg) in batch.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                left = batch[i..].iter().map(receipt).collect();
                break;
            }
            if leased_at.elapsed() > Duration::from_millis(visibility_ms / 2) {
                let rest: Vec<String> = batch[i..].iter().map(receipt).collect();
                queue.settle("extend", &rest, json!({"visibility_ms": visibility_ms}))?;
                leased_at = Instant::now();
            }
            let (key, version) = (&msg["key"], &msg["version"]);
            match close_order(&dir, msg) {
                Ok(true) => println!(
                    "closed {} v{version} (receive {})",
                    key.as_str().unwrap_or("?"),
                    msg["receive_count"]
                ),
                Ok(false) => println!("already handled {} v{version}", key.as_str().unwrap_or("?")),
                Err(e) => {
                    eprintln!("failed {key}: {e}");
                    failed.push(receipt(msg));
                    continue;
                }
            }
            done.push(receipt(msg));
        }
        queue.settle("ack", &done, json!({}))?;
        queue.settle("nack", &failed, json!({"delay_ms": NACK_DELAY_MS}))?;
        queue.settle("nack", &left, json!({"delay_ms": 0}))?;
    }
    println!("stopped");
    Ok(())
}
