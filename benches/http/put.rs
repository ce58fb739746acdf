//! Single-timer PUTs at the peak, closed loop, against `punctual serve --store memory
//! --shards 2` with the service's own pinning and spin (the settings of `perf/load/run.sh`,
//! whose wrk figure is the one to beat). One server; each client runs for the same time on
//! fresh keys (a connection's keys cycle over a million, so each PUT inserts):
//!
//! - **wrk** `-t2 -c64` with `perf/load/put.lua`, when wrk is installed: the earlier figure's
//!   client, measured again in this run;
//! - **hyper, keep-alive**: 64 connections, one request in flight each, on 2 or 1 client
//!   threads;
//! - **pipelined**: `depth` requests in flight per connection (HTTP/1.1 pipelining, which
//!   hyper's server answers in order).
//!
//! Each line gives the server's and the client's CPU per PUT, from `/proc/<pid>/stat` (wrk's
//! from `getrusage(RUSAGE_CHILDREN)`), so the client's cost is not read as the server's.

use super::api_support::Server;
use super::client::{pipelined, Counts, KeepAlive};
use super::cpu::{self, Meter};
use bytes::Bytes;
use http_body_util::Full;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The acceptance target, PUTs per second on 2 shards.
const TARGET: f64 = 100_000.0;

/// The body of `perf/load/put.lua`: due in 10 minutes, nothing fires during the run.
fn body() -> Bytes {
    let v = serde_json::json!({"delay_ms": 600_000, "payload": {"order": 8812, "note": "close if unpaid"}});
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

/// `serve --store memory --shards N` with the service's own pinning and spin, room for every
/// PUT of a run.
fn serve(shards: usize) -> Server {
    Server::start(&[
        "--store",
        "memory",
        "--shards",
        &shards.to_string(),
        "--pinning",
        "auto",
        "--spin-us",
        "100",
        "--shard-capacity",
        "10000000",
    ])
}

pub fn run(seconds: f64) {
    let server = serve(2);
    println!(
        "== single PUTs: serve --store memory --shards 2 (pinning auto, spin 100 µs), {seconds:.0} s per client; {}",
        cpu::host_load()
    );
    let (pid, addr) = (server.child.id(), server.addr);
    let dur = Duration::from_secs_f64(seconds);
    wrk(&server, pid, dur);
    for threads in [2, 1] {
        if super::stopped() {
            return;
        }
        let name = format!("hyper keep-alive, 64 connections, {threads} client thread(s)");
        let meter = Meter::start(&[("server", pid), ("client", std::process::id())]);
        let counts = clients(threads, 64 / threads, move |t, c| {
            keep_alive(addr, format!("h{threads}-{t}-{c}"), dur)
        });
        report(&name, counts, meter);
    }
    for (conns, depth) in [(8, 16), (64, 4)] {
        if super::stopped() {
            return;
        }
        let name = format!("pipelined, {conns} connections × {depth} in flight, 1 client thread");
        let meter = Meter::start(&[("server", pid), ("client", std::process::id())]);
        let counts = pipelined_clients(addr, 1, conns, depth, dur);
        report(&name, counts, meter);
    }
    println!("host after the PUTs: {}", cpu::host_load());
}

/// Shard scaling (`cargo bench --bench http -- scale`): for each shard count, a fresh
/// `serve --store memory --shards N` with the service's pinning and spin, and the same
/// pipelined client every time (`CLIENT_THREADS` threads × 32 connections × 4 in flight), so
/// that only the server changes from row to row. Shard counts above one that the host's CPUs
/// cannot hold apart from the client's threads are skipped: a shard sharing its core with the
/// client measures the client.
pub fn scale(seconds: f64) {
    const CLIENT_THREADS: usize = 4;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dur = Duration::from_secs_f64(seconds);
    println!(
        "== shard scaling: serve --store memory --shards N (pinning auto, spin 100 µs), pipelined client {CLIENT_THREADS} threads × 32 connections × 4, {seconds:.0} s each; {}",
        cpu::host_load()
    );
    let mut one = None;
    for shards in [1usize, 2, 4, 8, 12] {
        if super::stopped() {
            return;
        }
        if shards > 1 && shards + CLIENT_THREADS > cpus {
            println!("  {shards} shards: skipped, {cpus} CPUs cannot hold them and the client's {CLIENT_THREADS} threads apart");
            continue;
        }
        if shards + CLIENT_THREADS > cpus {
            println!("  (the shard shares the host's {cpus} CPUs with the client's {CLIENT_THREADS} threads: this row measures both)");
        }
        let server = serve(shards);
        let meter = Meter::start(&[
            ("server", server.child.id()),
            ("client", std::process::id()),
        ]);
        let (counts, secs) = pipelined_clients(server.addr, CLIENT_THREADS, 32, 4, dur);
        let used = meter.stop();
        let rate = counts.ok as f64 / secs;
        let base = *one.get_or_insert(rate);
        println!(
            "  {shards:>2} shards {rate:>10.0} PUT/s ({} non-2xx), {:.2}x one shard's, {:.2} per shard; {}",
            counts.other,
            rate / base,
            rate / base / shards as f64,
            used.line(counts.ok, "PUT")
        );
    }
    println!("host after the scaling: {}", cpu::host_load());
}

/// `threads` client threads, each with `conns` pipelined connections of `depth` requests in
/// flight, sending PUTs of fresh keys until `dur` has passed.
fn pipelined_clients(
    addr: SocketAddr,
    threads: usize,
    conns: usize,
    depth: usize,
    dur: Duration,
) -> (Counts, f64) {
    let end = Instant::now() + dur;
    let body = body();
    clients(threads, conns, move |t, c| {
        let body = body.clone();
        async move {
            pipelined(addr, depth, end, |k| {
                let mut req = format!(
                    "PUT /v1/timers/bench/p{conns}-{t}-{c}-{} HTTP/1.1\r\nhost: punctual\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    k % 1_000_000,
                    body.len()
                )
                .into_bytes();
                req.extend_from_slice(&body);
                req
            })
            .await
        }
    })
}

/// Runs `per_thread` connection tasks (`task(thread, connection)`) on each of `threads`
/// glommio threads; sums their counts. A failed task is reported and counted as nothing.
fn clients<F, Fut>(threads: usize, per_thread: usize, task: F) -> (Counts, f64)
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Counts, String>> + 'static,
{
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .filter_map(|t| {
            let task = task.clone();
            glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
                .name("bench-client")
                .spawn(move || async move {
                    let tasks: Vec<_> = (0..per_thread)
                        .map(|c| glommio::spawn_local(task(t, c)))
                        .collect();
                    let mut sum = Counts::default();
                    for t in tasks {
                        match t.await {
                            Ok(c) => {
                                sum.ok += c.ok;
                                sum.other += c.other;
                            }
                            Err(e) => println!("  a client connection failed: {e}"),
                        }
                    }
                    sum
                })
                .map_err(|e| println!("  client thread did not start: {e}"))
                .ok()
        })
        .collect();
    let mut sum = Counts::default();
    for h in handles {
        if let Ok(c) = h.join() {
            sum.ok += c.ok;
            sum.other += c.other;
        }
    }
    (sum, started.elapsed().as_secs_f64())
}

/// One keep-alive connection sending PUTs back to back until `dur` has passed.
async fn keep_alive(addr: SocketAddr, prefix: String, dur: Duration) -> Result<Counts, String> {
    let end = Instant::now() + dur;
    let mut conn = KeepAlive::connect(addr).await?;
    let body = body();
    let mut counts = Counts::default();
    let mut k = 0u64;
    while Instant::now() < end {
        let req = hyper::Request::put(format!("/v1/timers/bench/{prefix}-{}", k % 1_000_000))
            .header("host", "punctual")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .map_err(|e| e.to_string())?;
        let (status, _) = conn.send(req).await?;
        if (200..300).contains(&status) {
            counts.ok += 1;
        } else {
            counts.other += 1;
        }
        k += 1;
    }
    Ok(counts)
}

fn report(name: &str, (counts, secs): (Counts, f64), meter: Meter) {
    let used = meter.stop();
    let rate = counts.ok as f64 / secs;
    println!(
        "  {name:<62} {rate:>9.0} PUT/s ({} non-2xx; target ≥ {TARGET:.0}: {}); {}",
        counts.other,
        if rate >= TARGET { "met" } else { "missed" },
        used.line(counts.ok, "PUT")
    );
}

/// `wrk -t2 -c64 -s perf/load/put.lua`, when installed; killed if it overruns by 30 s.
fn wrk(server: &Server, pid: u32, dur: Duration) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/perf/load/put.lua");
    let secs = format!("{}s", dur.as_secs().max(1));
    let before = cpu::rusage_seconds(libc::RUSAGE_CHILDREN);
    let meter = Meter::start(&[("server", pid)]);
    let child = Command::new("wrk")
        .args(["-t2", "-c64", "-d", &secs, "-s", script])
        .arg(format!("http://{}", server.addr))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            println!("  wrk did not run ({e}); apt-get install -y wrk for the in-run baseline");
            return;
        }
    };
    let give_up = Instant::now() + dur + Duration::from_secs(30);
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output();
    let used = meter.stop();
    let client = cpu::rusage_seconds(libc::RUSAGE_CHILDREN) - before;
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let rate: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    let puts = (rate * used.wall) as u64;
    println!(
        "  {:<62} {rate:>9.0} PUT/s; {}, client (wrk) {:.2} µs/PUT ({:.0}% of a core)",
        "wrk -t2 -c64 (perf/load/put.lua)",
        used.line(puts, "PUT"),
        client * 1e6 / puts.max(1) as f64,
        client / used.wall * 100.0
    );
}
