//! A webhook receiver for punctual's deliveries, in plain std Rust: it verifies
//! `Punctual-Signature` against any of its secrets (comma-separated: during a key roll the new
//! and the old one), refuses timestamps more than 5 minutes from now, and processes each
//! delivery once even though punctual delivers at least once: a retry after a timeout, or a
//! repeat after a crash, carries the same (tenant, key, version) in its signed body. It
//! de-duplicates on that, never on the unsigned `Idempotency-Key` header.
//!
//! ```sh
//! PUNCTUAL_WEBHOOK_SECRET=new-secret-…,old-secret-… cargo run --example webhook_receiver -- 127.0.0.1:9000
//! ```
//!
//! Answers: 204 when processed (or already processed), 401 when the signature does not
//! verify (permanent for punctual: the timer becomes a dead letter), 400 for a body that is
//! not a delivery. A real receiver keeps its processed keys in its database, in the same
//! transaction as the work the delivery triggers; the set here is only in memory.

use punctual::sink::webhook::sign;
use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// Signatures older or newer than this are refused (replays of old deliveries).
const TOLERANCE_S: u64 = 300;

/// Keys remembered for de-duplication (the oldest are forgotten first).
const REMEMBERED: usize = 100_000;

#[derive(Default)]
struct Seen {
    keys: HashSet<String>,
    order: VecDeque<String>,
}

impl Seen {
    /// True the first time `key` is seen.
    fn first(&mut self, key: &str) -> bool {
        if self.keys.contains(key) {
            return false;
        }
        if self.order.len() == REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
        self.keys.insert(key.to_string());
        self.order.push_back(key.to_string());
        true
    }
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".into());
    let secret = std::env::var("PUNCTUAL_WEBHOOK_SECRET").unwrap_or_default();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let listener = TcpListener::bind(&addr)?;
    println!("listening on {addr}");
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let (secret, seen) = (secret.clone(), seen.clone());
        std::thread::spawn(move || {
            let secrets: Vec<&[u8]> = secret
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::as_bytes)
                .collect();
            let _ = serve(conn, &secrets, &seen);
        });
    }
    Ok(())
}

/// One keep-alive connection: requests until the peer closes.
fn serve(conn: TcpStream, secrets: &[&[u8]], seen: &Mutex<Seen>) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len.min(1 << 20)];
        reader.read_exact(&mut body)?;
        let status = handle(secrets, seen, header("punctual-signature"), &body);
        write!(out, "HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n")?;
    }
}

/// The status to answer one delivery with.
fn handle(secrets: &[&[u8]], seen: &Mutex<Seen>, signature: Option<&str>, body: &[u8]) -> u16 {
    if !secrets.is_empty() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let ok = signature.is_some_and(|s| {
            secrets
                .iter()
                .any(|secret| sign::verify(secret, s, body, now, TOLERANCE_S).is_ok())
        });
        if !ok {
            return 401;
        }
    }
    let Ok(delivery) = serde_json::from_slice::<serde_json::Value>(body) else {
        return 400;
    };
    // The signed (tenant, key, version) names one scheduling; the header is not signed.
    let (Some(tenant), Some(k), Some(version)) = (
        delivery["tenant"].as_str(),
        delivery["key"].as_str(),
        delivery["version"].as_u64(),
    ) else {
        return 400;
    };
    let key = format!("{tenant}/{k}/{version}");
    let first = seen.lock().map(|mut s| s.first(&key)).unwrap_or(true);
    if first {
        println!(
            "timer {}/{} (version {}) fired at {} µs, attempt {}: {}",
            delivery["tenant"],
            delivery["key"],
            delivery["version"],
            delivery["fired_at_us"],
            delivery["attempt"],
            delivery["payload"]
        );
    } else {
        println!("repeat of {key}: already processed");
    }
    204
}
