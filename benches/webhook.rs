//! Webhook delivery figures, printed as plain lines (run: `cargo bench --bench webhook`):
//!
//! 1. throughput: timers with a callback, due over one second, delivered by 2 shards to a local
//!    keep-alive receiver: deliveries per second from the first arrival to the last;
//! 2. lateness at 1,000 deliveries/s: the receiver's clock (CLOCK_REALTIME when the request
//!    was read) minus the timer's deadline, p50/p99/p99.9/max;
//! 3. the HTTP floor: a plain `POST` loop from one hyper client (one keep-alive connection,
//!    one request at a time) to the same receiver, and the same client with 64 requests in
//!    flight: requests per second and the round trip's percentiles.
//!
//! The receiver is a minimal HTTP/1.1 server on its own glommio executor (its own thread); it
//! answers `204` with no body and notes, per request, its arrival and the body's `fire_at_us`.
//! Everything runs on this machine's cores, the receiver included.
//!
//! `PUNCTUAL_BENCH_SCALE=0.1` shrinks every count tenfold (quick runs on shared hosts).

use punctual::engine::Pinning;
use punctual::sink::webhook::settings::{tls_config, WebhookSettings};
use punctual::sink::webhook::{new_meta, RetryPolicy};
use punctual::{EngineBuilder, Handle, UtcMicros};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The service's allocator (`src/main.rs`), so the figures are the service's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn scale(n: u64) -> u64 {
    let s: f64 = std::env::var("PUNCTUAL_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    ((n as f64 * s) as u64).max(1)
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    count: AtomicU64,
    first_us: AtomicU64,
    last_us: AtomicU64,
    /// arrival − fire_at_us, µs, per request that carried one.
    lateness: Mutex<Vec<u64>>,
}

impl Seen {
    fn reset(&self) {
        self.count.store(0, Ordering::SeqCst);
        self.first_us.store(0, Ordering::SeqCst);
        self.last_us.store(0, Ordering::SeqCst);
        self.lateness.lock().map(|mut l| l.clear()).ok();
    }
}

/// Starts the receiver; its address.
fn receiver(seen: Arc<Seen>) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("bench-receiver")
        .spawn(move || async move {
            let l = glommio::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            tx.send(l.local_addr().expect("addr")).ok();
            loop {
                let Ok(s) = l.accept().await else { continue };
                let seen = seen.clone();
                glommio::spawn_local(serve(s, seen)).detach();
            }
        })
        .expect("receiver thread");
    rx.recv().expect("receiver address")
}

/// A minimal keep-alive HTTP/1.1 server loop: reads a head and its `content-length` body,
/// answers 204.
async fn serve(mut s: glommio::net::TcpStream, seen: Arc<Seen>) {
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    let _ = s.set_nodelay(true);
    let mut buf = vec![0u8; 64 * 1024];
    let mut have = 0;
    loop {
        let head_end = loop {
            if let Some(i) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut buf[have..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => have += n,
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while have < head_end + len {
            match s.read(&mut buf[have..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => have += n,
            }
        }
        let at = now_us();
        let body = &buf[head_end..head_end + len];
        if let Some(fire_at) = field(body, b"\"fire_at_us\":") {
            if let Ok(mut l) = seen.lateness.lock() {
                l.push(at.saturating_sub(fire_at));
            }
        }
        let _ = seen
            .first_us
            .compare_exchange(0, at, Ordering::SeqCst, Ordering::SeqCst);
        seen.last_us.store(at, Ordering::SeqCst);
        seen.count.fetch_add(1, Ordering::SeqCst);
        buf.copy_within(head_end + len..have, 0);
        have -= head_end + len;
        if s.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
    }
}

/// The number after `name` in `body`.
fn field(body: &[u8], name: &[u8]) -> Option<u64> {
    let at = body.windows(name.len()).position(|w| w == name)? + name.len();
    let digits: Vec<u8> = body[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

fn engine(shards: usize, addr: SocketAddr) -> punctual::Engine {
    let mut s = WebhookSettings::new(tls_config(None).expect("tls"));
    s.allow = punctual::sink::webhook::allow::AllowList::new(&[format!("http://{addr}/")], &[])
        .expect("an allow-list");
    if let Some(n) = std::env::var("PUNCTUAL_BENCH_HOST_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        s.max_in_flight_per_host = n;
    }
    EngineBuilder::new()
        .shards(shards)
        .pinning(Pinning::None)
        .spin(Duration::from_micros(50))
        .shard_capacity(2_000_000)
        .webhooks(Arc::new(s))
        .build()
        .expect("engine starts")
}

/// Schedules `n` webhook timers at `due(i)`, 1,024 in flight at a time.
fn schedule(h: &Handle, addr: SocketAddr, n: u64, due: impl Fn(u64) -> u64) {
    let url = format!("http://{addr}/hook");
    let retry = RetryPolicy {
        max_attempts: 3,
        base_delay_ms: 100,
        max_delay_ms: 1000,
    };
    let mut pending = Vec::with_capacity(1024);
    for i in 0..n {
        let at = due(i);
        let meta = new_meta(url.clone(), retry, at);
        let tenant = ["t0", "t1", "t2", "t3"][(i % 4) as usize];
        pending.push(h.schedule_with_meta(
            tenant,
            &format!("k{i}"),
            UtcMicros(at),
            b"{\"n\":1}",
            &meta,
            None,
        ));
        if pending.len() == 1024 || i + 1 == n {
            for f in pending.drain(..) {
                futures_lite::future::block_on(f).expect("scheduled");
            }
        }
    }
}

fn wait_for(seen: &Seen, n: u64, limit: Duration) -> bool {
    let give_up = Instant::now() + limit;
    while seen.count.load(Ordering::SeqCst) < n {
        if Instant::now() > give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn percentiles(v: &mut [u64]) -> String {
    if v.is_empty() {
        return "no samples".into();
    }
    v.sort_unstable();
    let p = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    format!(
        "p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs ({} samples)",
        p(0.5),
        p(0.99),
        p(0.999),
        v[v.len() - 1],
        v.len()
    )
}

fn throughput(seen: &Arc<Seen>, addr: SocketAddr) {
    let n = scale(100_000);
    let e = engine(2, addr);
    let h = e.handle();
    seen.reset();
    let start = now_us() + 2_000_000;
    // Due evenly over one second: an offered load of n per second.
    schedule(&h, addr, n, |i| start + i * 1_000_000 / n);
    let done = wait_for(seen, n, Duration::from_secs(120));
    let (first, last) = (
        seen.first_us.load(Ordering::SeqCst),
        seen.last_us.load(Ordering::SeqCst),
    );
    let secs = (last.saturating_sub(first)) as f64 / 1e6;
    let got = seen.count.load(Ordering::SeqCst);
    println!(
        "webhook throughput, 2 shards, {n} timers due over 1 s: {got} delivered in {secs:.3} s = {:.0} deliveries/s{}",
        got as f64 / secs.max(1e-9),
        if done { "" } else { " (NOT all delivered)" }
    );
    let mut late = seen.lateness.lock().map(|l| l.clone()).unwrap_or_default();
    println!("  lateness under that load: {}", percentiles(&mut late));
    let refused: u64 = h
        .store_metrics()
        .iter()
        .flat_map(|m| m.webhooks.snapshot())
        .map(|(_, d)| d.refused.load(Ordering::Relaxed))
        .sum();
    println!("  deliveries held back by the per-host cap and queued: {refused}");
    drop(e);
}

fn lateness(seen: &Arc<Seen>, addr: SocketAddr) {
    let n = scale(10_000);
    let e = engine(2, addr);
    let h = e.handle();
    seen.reset();
    let start = now_us() + 2_000_000;
    schedule(&h, addr, n, |i| start + i * 1_000);
    let done = wait_for(seen, n, Duration::from_secs(60 + n / 1_000));
    let mut late = seen.lateness.lock().map(|l| l.clone()).unwrap_or_default();
    println!(
        "webhook lateness at 1,000 deliveries/s, 2 shards, {n} timers (receiver's clock − deadline): {}{}",
        percentiles(&mut late),
        if done { "" } else { " (NOT all delivered)" }
    );
    drop(e);
}

/// A plain POST loop from one hyper client (the webhook client's own pool) to the receiver.
fn floor(seen: &Arc<Seen>, addr: SocketAddr, in_flight: usize) {
    let n = scale(100_000);
    seen.reset();
    let target = punctual::sink::webhook::settings::Target::parse(&format!("http://{addr}/floor"))
        .expect("valid")
        .0;
    let rtts = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("bench-floor")
        .spawn(move || async move {
            let pool = std::rc::Rc::new(punctual::sink::webhook::client::Pool::new(
                tls_config(None).expect("tls"),
                punctual::resolve::global(),
            ));
            let started = Instant::now();
            let per = n / in_flight as u64;
            let tasks: Vec<_> = (0..in_flight)
                .map(|_| {
                    let (pool, target) = (pool.clone(), target.clone());
                    // The receiver is on loopback: its literal address is allowed.
                    let allow = punctual::sink::webhook::allow::AllowList::new(
                        &[format!("http://{addr}/")],
                        &[],
                    )
                    .expect("an allow-list");
                    glommio::spawn_local(async move {
                        let mut rtts = Vec::with_capacity(per as usize);
                        for _ in 0..per {
                            let body = bytes::Bytes::from_static(b"{\"tenant\":\"t\",\"key\":\"k\",\"version\":1,\"attempt\":1,\"payload\":null}");
                            let req = hyper::Request::post("/floor")
                                .header("host", "bench")
                                .header("content-type", "application/json")
                                .body(http_body_util::Full::new(body))
                                .expect("request");
                            let t = Instant::now();
                            pool.send(&target, "bench", &allow, req, Duration::from_secs(5))
                                .await
                                .expect("answered");
                            rtts.push(t.elapsed().as_micros() as u64);
                        }
                        rtts
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await);
            }
            (all, started.elapsed())
        })
        .expect("floor thread")
        .join()
        .expect("floor ran");
    let (mut all, elapsed) = rtts;
    println!(
        "HTTP floor, one hyper client, {in_flight} in flight: {} POSTs in {:.3} s = {:.0} requests/s; round trip {}",
        all.len(),
        elapsed.as_secs_f64(),
        all.len() as f64 / elapsed.as_secs_f64(),
        percentiles(&mut all)
    );
}

fn main() {
    let seen = Arc::new(Seen::default());
    let addr = receiver(seen.clone());
    println!(
        "host: {} CPUs available; receiver, shards and client share them",
        punctual::engine::available_cores().len()
    );
    // `cargo bench --bench webhook -- lateness` runs only the parts named.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let run = |part: &str| only.is_empty() || only.iter().any(|o| o == part);
    if run("floor") {
        floor(&seen, addr, 1);
        floor(&seen, addr, 64);
    }
    if run("throughput") {
        throughput(&seen, addr);
    }
    if run("lateness") {
        lateness(&seen, addr);
    }
}
