//! Fire lateness on a shard while 16 MiB batches are posted to it: the real `punctual serve`
//! (memory store, one shard), 10,000 timers due over 1–6 s from the start (W1's shape, at a
//! tenth of its size), measured once quiet and once while a client posts 16 MiB batches of
//! 10,000 items (1.6 KiB each, replacing the same far-future keys) back to back to the same
//! shard. The figures are the server's own `punctual_fire_lateness_seconds` histogram, so a
//! percentile is reported as the bucket bound it falls under.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example batch_lateness -- target/release/punctual
//! cargo run --release --example batch_lateness -- target/release/punctual pinned
//! cargo run --release --example batch_lateness -- target/release/punctual pinned journal
//! ```
//!
//! `pinned` runs it as deployed: the shard pinned to the host's last core (`--cores`), and
//! the client that posts (with its kernel side of loopback TCP) pinned to the others, so that
//! it does not take the shard's core. `journal` runs it on the service's default store (a
//! journal in a fresh directory under the system's temporary one, `--fsync always`) instead of
//! the memory store: each batch is then also 16 MiB written and synced by the journal.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TIMERS: usize = 10_000;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One request on its own connection; the status and body.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let status = std::str::from_utf8(out.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let at = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(out.len(), |p| p + 4);
    Ok((status, out[at..].to_vec()))
}

/// (bucket bound in s, cumulative count) of shard 0's lateness histogram.
fn lateness(addr: SocketAddr) -> Vec<(f64, u64)> {
    let (_, body) = request(addr, "GET", "/metrics", b"").unwrap_or_default();
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with("punctual_fire_lateness_seconds_bucket{"))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// A counter of `/metrics`, summed over its series.
fn counter(addr: SocketAddr, name: &str) -> u64 {
    let (_, body) = request(addr, "GET", "/metrics", b"").unwrap_or_default();
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn quantile(h: &[(f64, u64)], q: f64) -> f64 {
    let total = h.last().map_or(0, |b| b.1);
    let want = (total as f64 * q).ceil() as u64;
    h.iter().find(|b| b.1 >= want).map_or(f64::NAN, |b| b.0)
}

fn run(bin: &str, loaded: bool, journal: bool, shard_core: Option<usize>, client_cores: &[usize]) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(18_080, |a| a.port());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let data = std::env::temp_dir().join(format!(
        "punctual-batch-lateness-{}-{port}",
        std::process::id()
    ));
    let store = if journal {
        vec![
            "--store".to_string(),
            "journal".into(),
            "--fsync".into(),
            "always".into(),
            "--data-dir".into(),
            data.display().to_string(),
        ]
    } else {
        vec!["--store".to_string(), "memory".into()]
    };
    let mut child = Command::new(bin)
        .args(["serve", "--listen", &addr.to_string()])
        .args(store)
        .args(["--shards", "1"])
        .args(match shard_core {
            Some(c) => vec![
                "--pinning".to_string(),
                "auto".into(),
                "--cores".into(),
                c.to_string(),
            ],
            None => vec!["--pinning".to_string(), "none".into()],
        })
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn punctual");
    let up = Instant::now();
    while request(addr, "GET", "/healthz", b"").map_or(true, |r| r.0 != 200) {
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "punctual did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let start = now_ms();
    for chunk in 0..TIMERS / 1000 {
        let items: Vec<String> = (0..1000)
            .map(|i| {
                let n = chunk * 1000 + i;
                let at = start + 1000 + (n as u64 * 5000) / TIMERS as u64;
                format!(r#"{{"key":"w{n}","fire_at_ms":{at}}}"#)
            })
            .collect();
        let body = format!(r#"{{"timers":[{}]}}"#, items.join(","));
        let _ = request(addr, "POST", "/v1/timers/w1", body.as_bytes());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let posted = Arc::new(AtomicU64::new(0));
    let poster = loaded.then(|| {
        let (stop, posted) = (stop.clone(), posted.clone());
        let client_cores = client_cores.to_vec();
        std::thread::spawn(move || {
            if !client_cores.is_empty() {
                punctual::cpus::pin_current_thread(&client_cores).expect("pin the client");
            }
            let pad = "x".repeat(1_560);
            let items: Vec<String> = (0..10_000)
                .map(|i| {
                    format!(r#"{{"key":"b{i}","delay_ms":3600000,"payload":{{"p":"{pad}"}}}}"#)
                })
                .collect();
            let body = format!(r#"{{"timers":[{}]}}"#, items.join(","));
            assert!(body.len() <= 16 << 20, "{} bytes", body.len());
            while !stop.load(Ordering::Relaxed) {
                if request(addr, "POST", "/v1/timers/bulk", body.as_bytes())
                    .is_ok_and(|r| r.0 == 200)
                {
                    posted.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    });
    let end = start + 7_000;
    std::thread::sleep(Duration::from_millis(end.saturating_sub(now_ms())));
    stop.store(true, Ordering::Relaxed);
    if let Some(p) = poster {
        let _ = p.join();
    }
    let h = lateness(addr);
    let n = h.last().map_or(0, |b| b.1);
    let stalls = counter(addr, "punctual_executor_stalls_total");
    let runnable = counter(addr, "punctual_executor_runnable_sleeps_total");
    println!(
        "{:<22} fired {n:>6}  p50 ≤ {:>8.6} s  p99 ≤ {:>8.6} s  p99.9 ≤ {:>8.6} s  max ≤ {:>8.6} s  (16 MiB batches applied: {}; executor stalls {stalls}, with the shard runnable {runnable})",
        if loaded { "16 MiB batches posted" } else { "quiet" },
        quantile(&h, 0.5),
        quantile(&h, 0.99),
        quantile(&h, 0.999),
        quantile(&h, 1.0),
        posted.load(Ordering::Relaxed),
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&data);
}

fn main() {
    let bin = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/release/punctual".into());
    let pinned = std::env::args().skip(2).any(|a| a == "pinned");
    let journal = std::env::args().skip(2).any(|a| a == "journal");
    let cores = punctual::cpus::available_cores();
    let (shard_core, client_cores) = match (pinned, cores.split_last()) {
        (true, Some((&last, rest))) if !rest.is_empty() => (Some(last), rest.to_vec()),
        (true, _) => panic!("pinned needs at least two cores"),
        (false, _) => (None, Vec::new()),
    };
    run(&bin, false, journal, shard_core, &client_cores);
    run(&bin, true, journal, shard_core, &client_cores);
}
