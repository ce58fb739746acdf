//! The HTTP path against what is behind it, in one run (`cargo bench --bench http`, or one part:
//! `cargo bench --bench http -- batch`, `-- put`):
//!
//! 1. **batch**: 1,000-timer batches POSTed to `punctual serve --redis … --shards 2` over 4
//!    keep-alive connections, beside the store bench's registration figure measured against
//!    the same Redis in the same run, with the CPU that Redis, the server and the client spend
//!    per registration; prints the ratio HTTP / store (`http/batch.rs`);
//! 2. **put**: single-timer PUTs at the peak on 2 shards (memory store), from wrk, a keep-alive
//!    hyper client and a pipelined client, each with the server's and the client's CPU per PUT
//!    (`http/put.rs`);
//! 3. **scale**, only when named (`-- scale`): the same pipelined client against 1, 2, 4, 8
//!    and 12 shards, as many as the host's CPUs hold beside the client (`http/put.rs`).
//!
//! Everything shares the host's CPUs: every line says how loaded the host was. Figures are
//! printed, never judged pass or fail. Every wait is bounded, and the servers this bench starts
//! are killed when it returns, panics, or is interrupted (SIGINT/SIGTERM end the run early).
//! `PUNCTUAL_BENCH_SCALE=0.1` shrinks the batch rows' counts and the PUT runs' durations.

#[path = "../tests/api_support/mod.rs"]
mod api_support;
#[path = "../tests/support/redis_server.rs"]
mod redis_server;
#[path = "store/registrations.rs"]
mod registrations;

#[path = "http/batch.rs"]
mod batch;
#[path = "http/client.rs"]
mod client;
#[path = "http/cpu.rs"]
mod cpu;
#[path = "http/put.rs"]
mod put;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Raised by SIGINT or SIGTERM: the run stops at its next step and drops (kills) its servers.
static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

fn stopped() -> bool {
    STOP.get().is_some_and(|s| s.load(Ordering::Relaxed))
}

fn scale() -> f64 {
    std::env::var("PUNCTUAL_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0)
}

fn main() {
    let stop = STOP.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(signal, stop.clone()) {
            println!("signal {signal} not caught ({e}): interrupting may leave servers running");
        }
    }
    let parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a == "batch" || a == "put" || a == "scale")
        .collect();
    let wants = |p: &str| parts.is_empty() || parts.iter().any(|a| a == p);
    let named = |p: &str| parts.iter().any(|a| a == p);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "host: {cpus} CPUs shared by Redis, the server and the clients; {}",
        cpu::host_load()
    );
    if wants("batch") {
        batch::run(((200_000.0 * scale()) as u64).max(1_000));
    }
    if wants("put") && !stopped() {
        put::run((10.0 * scale()).max(1.0));
    }
    if named("scale") && !stopped() {
        put::scale((10.0 * scale()).max(1.0));
    }
}
