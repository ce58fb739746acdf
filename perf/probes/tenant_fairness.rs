//! One tenant cannot slow another: the real `punctual serve` (journal store, 2 shards, fsync
//! always), tenant `calm` at a steady open-loop 500 PUT/s, measured alone and then while tenant
//! `flood` sends PUTs at 10× its `max_requests_per_s` (200/s, burst 50), in one run.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example tenant_fairness -- target/release/punctual [seconds per phase, 20]
//! ```
//!
//! calm's latency is measured from the time each request was due to go out (open loop, no
//! coordinated omission), over 4 keep-alive connections; flood uses 4 more. Prints calm's
//! p50/p99/max alone and under the flood, their ratio, every non-2xx answer per tenant, and
//! flood's admitted rate.

use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CALM_RATE: f64 = 500.0;
const FLOOD_LIMIT: u64 = 200;
const FLOOD_RATE: f64 = 2_000.0;
const CONNECTIONS: usize = 4;
const BODY: &str = r#"{"delay_ms":600000,"payload":{"order":8812}}"#;

/// A keep-alive HTTP/1.1 connection that sends PUTs and reads each status.
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> std::io::Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Conn {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    /// PUT one timer; its status.
    fn put(&mut self, path: &str) -> std::io::Result<u16> {
        let req = format!(
            "PUT {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{BODY}",
            BODY.len()
        );
        self.writer.write_all(req.as_bytes())?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status = line.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let mut len = 0usize;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 || line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body)?;
        Ok(status)
    }
}

#[derive(Default)]
struct Tally {
    lat: Option<Histogram<u64>>,
    statuses: BTreeMap<u16, u64>,
}

/// `tenant` at `rate` over CONNECTIONS open-loop connections until `stop`; latency from due.
fn drive(addr: SocketAddr, tenant: &'static str, rate: f64, stop: Arc<AtomicBool>) -> Tally {
    let tally = Arc::new(Mutex::new(Tally {
        lat: Histogram::new_with_bounds(1, 60_000_000, 3).ok(),
        ..Default::default()
    }));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let (stop, tally) = (stop.clone(), tally.clone());
            std::thread::spawn(move || {
                let Ok(mut conn) = Conn::open(addr) else {
                    return;
                };
                let period = Duration::from_secs_f64(CONNECTIONS as f64 / rate);
                let start = Instant::now() + period.mul_f64(c as f64 / CONNECTIONS as f64);
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let due = start + period.mul_f64(k as f64);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let path = format!("/v1/timers/{tenant}/c{c}-{}", k % 100_000);
                    let status = conn.put(&path).unwrap_or(0);
                    let us = due.elapsed().as_micros() as u64;
                    let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(h) = t.lat.as_mut() {
                        let _ = h.record(us.max(1));
                    }
                    *t.statuses.entry(status).or_default() += 1;
                    k += 1;
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    Arc::try_unwrap(tally)
        .ok()
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .unwrap_or_default()
}

fn phase(addr: SocketAddr, seconds: f64, flood: bool) -> (Tally, Option<Tally>) {
    let stop = Arc::new(AtomicBool::new(false));
    let calm = {
        let stop = stop.clone();
        std::thread::spawn(move || drive(addr, "calm", CALM_RATE, stop))
    };
    let flooder = flood.then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || drive(addr, "flood", FLOOD_RATE, stop))
    });
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let calm = calm.join().unwrap_or_default();
    let flood = flooder.map(|f| f.join().unwrap_or_default());
    (calm, flood)
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn start_server(bin: &str, dir: &std::path::Path, port: u16) -> std::io::Result<Child> {
    let conf = dir.join("punctual.toml");
    std::fs::write(
        &conf,
        format!(
            "[tenants.calm]\n[tenants.flood]\nmax_requests_per_s = {FLOOD_LIMIT}\nburst = 50\n"
        ),
    )?;
    Command::new(bin)
        .args(["serve", "--shards", "2", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--config")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bin = args
        .first()
        .cloned()
        .unwrap_or("target/release/punctual".into());
    let seconds: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20.0);
    let dir = std::env::temp_dir().join(format!("punctual-fairness-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(7599);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut server = match start_server(&bin, &dir, port) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot start {bin}: {e}");
            std::process::exit(2);
        }
    };
    let ready = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        TcpStream::connect(addr).is_ok()
    });
    if !ready {
        eprintln!("the server did not listen on {addr}");
        let _ = server.kill();
        std::process::exit(2);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("tenant fairness: {bin}, journal, 2 shards, {seconds} s per phase; load {load}");
    let (alone, _) = phase(addr, seconds, false);
    let (shared, flood) = phase(addr, seconds, true);
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let (Some(a), Some(s)) = (alone.lat.as_ref(), shared.lat.as_ref()) else {
        eprintln!("no latencies recorded");
        std::process::exit(1);
    };
    println!(
        "calm alone      : {} requests, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, statuses {:?}",
        a.len(),
        ms(a, 0.5),
        ms(a, 0.99),
        a.max() as f64 / 1000.0,
        alone.statuses
    );
    println!(
        "calm with flood : {} requests, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, statuses {:?}",
        s.len(),
        ms(s, 0.5),
        ms(s, 0.99),
        s.max() as f64 / 1000.0,
        shared.statuses
    );
    println!(
        "calm p99 with flood / alone: {:.2}×",
        ms(s, 0.99) / ms(a, 0.99).max(0.001)
    );
    if let Some(f) = flood {
        let admitted =
            f.statuses.get(&201).copied().unwrap_or(0) + f.statuses.get(&200).copied().unwrap_or(0);
        println!(
            "flood           : statuses {:?}, admitted {:.0}/s (limit {FLOOD_LIMIT}/s, burst 50)",
            f.statuses,
            admitted as f64 / seconds
        );
    }
    let refused = shared
        .statuses
        .iter()
        .filter(|(s, _)| !(200..300).contains(*s))
        .map(|(_, n)| n)
        .sum::<u64>();
    println!(
        "verdict: calm refused {refused} times under the flood{}",
        if refused == 0 { " (none)" } else { "" }
    );
}
