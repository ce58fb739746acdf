//! A consumer blocked in `XREAD BLOCK` on every tenant's stream, as an application would
//! read it: when each entry reached it, by its own clock.

use crate::churn;
use crate::redis_server::RedisServer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A consumer blocked in `XREAD BLOCK` on every tenant's stream, noting when each entry
/// reached it.
pub struct Consumer {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<i64>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Consumer {
    pub fn start(redis: &RedisServer, tenants: &[String]) -> Consumer {
        let mut con = redis.client().expect("consumer's redis client");
        let streams: Vec<String> = tenants
            .iter()
            .map(|t| format!("punctual:fired:{{{t}}}"))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, v) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            let mut ids: Vec<String> = vec!["0-0".into(); streams.len()];
            while !s.load(Ordering::Acquire) {
                let reply: redis::Value = match redis::cmd("XREAD")
                    .arg("COUNT")
                    .arg(10_000)
                    .arg("BLOCK")
                    .arg(100)
                    .arg("STREAMS")
                    .arg(&streams)
                    .arg(&ids)
                    .query(&mut con)
                {
                    Ok(r) => r,
                    Err(e) => panic!("XREAD failed: {e}"),
                };
                let received = churn::now_us() as i64;
                let mut got = v.lock().expect("consumer lock");
                for (stream, entries) in xread_entries(reply) {
                    let Some(i) = streams.iter().position(|s| *s == stream) else {
                        continue;
                    };
                    for (id, fire_at_us) in entries {
                        got.push(received - fire_at_us as i64);
                        ids[i] = id;
                    }
                }
            }
        });
        Consumer { stop, seen, thread }
    }

    /// Waits (a few seconds at most) until `entries` have been received, stops, and returns
    /// the lateness of each, sorted.
    pub fn finish(self, entries: usize) -> Vec<i64> {
        let give_up = Instant::now() + Duration::from_secs(5);
        while self.seen.lock().expect("consumer lock").len() < entries && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop.store(true, Ordering::Release);
        if self.thread.join().is_err() {
            eprintln!("the XREAD consumer failed; its figures are partial");
        }
        let mut v = std::mem::take(&mut *self.seen.lock().expect("consumer lock"));
        v.sort_unstable();
        v
    }
}

/// (stream, [(entry id, fire_at_us)]) from an `XREAD` reply (RESP2 arrays or RESP3 map).
fn xread_entries(reply: redis::Value) -> Vec<(String, Vec<(String, u64)>)> {
    use redis::Value;
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        _ => String::new(),
    };
    let per_stream: Vec<(Value, Value)> = match reply {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut pair) if pair.len() == 2 => {
                    let entries = pair.pop()?;
                    Some((pair.pop()?, entries))
                }
                _ => None,
            })
            .collect(),
        Value::Map(pairs) => pairs,
        _ => Vec::new(),
    };
    per_stream
        .into_iter()
        .map(|(name, entries)| {
            let Value::Array(entries) = entries else {
                return (text(&name), Vec::new());
            };
            let list = entries
                .iter()
                .filter_map(|e| {
                    let Value::Array(parts) = e else { return None };
                    let [id, Value::Array(fields)] = &parts[..] else {
                        return None;
                    };
                    let fire_at = fields
                        .chunks_exact(2)
                        .find(|kv| text(&kv[0]) == "fire_at_us")
                        .and_then(|kv| text(&kv[1]).parse().ok())?;
                    Some((text(id), fire_at))
                })
                .collect();
            (text(&name), list)
        })
        .collect()
}
