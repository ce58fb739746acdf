//! An open-loop load generator for single-timer PUTs: requests go out on a fixed schedule,
//! whatever the server's answers do, and each latency is measured from the time its request
//! was *due* to go out, not from when it went out. A server that stalls is charged for every
//! request that should have been sent meanwhile (no coordinated omission, as with wrk2).
//!
//! ```sh
//! cargo run --release --example put_openloop -- --addr 127.0.0.1:7599 --rate 50000 \
//!     --connections 64 --seconds 10
//! ```
//!
//! One thread, keep-alive HTTP/1.1 connections, one request in flight per connection;
//! connection `c` sends its `k`-th request at `start + (k × connections + c) / rate`. The
//! thread sleeps in `ppoll` until the next send is due or an answer arrives (timer slack 1 ns),
//! so its own lateness is microseconds; it prints that lateness too. Keys cycle over a million
//! per connection, due in 10 minutes (nothing fires during the run), with the payload of
//! `perf/load/put.lua`. Prints percentiles of latency from the due time and of service time
//! (from the actual send), the achieved rate, non-2xx answers, and the generator's own CPU time
//! (so that a run on shared cores can tell the client's cost from the server's).

#[path = "../../benches/http/cpu.rs"]
mod cpu;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const BODY: &str = r#"{"delay_ms":600000,"payload":{"order":8812,"note":"close if unpaid"}}"#;

struct Conn {
    stream: TcpStream,
    /// When the request in flight (or the next one) is due to go out.
    due: Instant,
    /// When the request in flight went out; `None` while idle.
    sent: Option<Instant>,
    buf: Vec<u8>,
    k: u64,
}

struct Opts {
    addr: String,
    rate: f64,
    connections: usize,
    seconds: f64,
}

fn opts() -> Result<Opts, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let num = |flag: &str, default: f64| -> Result<f64, String> {
        get(flag).map_or(Ok(default), |v| {
            v.parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0)
                .ok_or(format!("{flag} wants a positive number, got {v:?}"))
        })
    };
    Ok(Opts {
        addr: get("--addr").unwrap_or_else(|| "127.0.0.1:7599".into()),
        rate: num("--rate", 50_000.0)?,
        connections: num("--connections", 64.0)? as usize,
        seconds: num("--seconds", 10.0)?,
    })
}

/// The length of the first complete HTTP/1.1 response in `buf` and whether it was a 2xx,
/// or `None` while incomplete. Answers carry Content-Length (the server never chunks them).
fn complete_response(buf: &[u8]) -> Option<(usize, bool)> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let ok = head.get(9..10) == Some("2");
    let len = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    (buf.len() >= head_end + len).then_some((head_end + len, ok))
}

fn percentiles(name: &str, v: &mut [u64]) {
    v.sort_unstable();
    let p = |q: f64| -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        v[i] as f64 / 1_000_000.0
    };
    println!(
        "{name:<28} p50 {:>8.3} ms  p90 {:>8.3}  p99 {:>8.3}  p99.9 {:>8.3}  max {:>8.3}",
        p(0.5),
        p(0.9),
        p(0.99),
        p(0.999),
        p(1.0)
    );
}

fn main() {
    let o = match opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("put_openloop: {e}");
            std::process::exit(2);
        }
    };
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let interval = Duration::from_secs_f64(o.connections as f64 / o.rate);
    let start = Instant::now() + Duration::from_millis(200);
    let end = start + Duration::from_secs_f64(o.seconds);
    let mut conns = Vec::with_capacity(o.connections);
    for c in 0..o.connections {
        let stream = match TcpStream::connect(&o.addr) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("put_openloop: connect {}: {e}", o.addr);
                std::process::exit(1);
            }
        };
        let _ = stream.set_nodelay(true);
        let _ = stream.set_nonblocking(true);
        conns.push(Conn {
            stream,
            due: start + Duration::from_secs_f64(c as f64 / o.rate),
            sent: None,
            buf: Vec::with_capacity(512),
            k: 0,
        });
    }
    let cpu_at_start = cpu::rusage_seconds(libc::RUSAGE_SELF);
    let expected = (o.rate * o.seconds) as usize;
    let (mut from_due, mut service, mut send_late) = (
        Vec::with_capacity(expected),
        Vec::with_capacity(expected),
        Vec::with_capacity(expected),
    );
    let (mut non_2xx, mut errors) = (0u64, 0u64);
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(o.connections);
    let mut which: Vec<usize> = Vec::with_capacity(o.connections);
    let mut chunk = [0u8; 4096];
    let mut req = Vec::with_capacity(512);
    loop {
        let now = Instant::now();
        let mut open = false;
        for (c, conn) in conns.iter_mut().enumerate() {
            if conn.sent.is_none() && conn.due < end {
                open = true;
                if conn.due <= now {
                    req.clear();
                    let _ = write!(
                        req,
                        "PUT /v1/timers/bench/o{c}-{} HTTP/1.1\r\nHost: punctual\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{BODY}",
                        conn.k % 1_000_000,
                        BODY.len()
                    );
                    // A request is far smaller than a socket buffer: one write takes it whole.
                    match conn.stream.write(&req) {
                        Ok(n) if n == req.len() => {
                            send_late
                                .push(now.saturating_duration_since(conn.due).as_nanos() as u64);
                            conn.sent = Some(now);
                        }
                        _ => errors += 1,
                    }
                }
            } else if conn.sent.is_some() {
                open = true;
            }
        }
        if !open {
            break;
        }
        fds.clear();
        which.clear();
        let mut next_due: Option<Instant> = None;
        for (c, conn) in conns.iter().enumerate() {
            if conn.sent.is_some() {
                fds.push(libc::pollfd {
                    fd: conn.stream.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                which.push(c);
            } else if conn.due < end {
                next_due = Some(next_due.map_or(conn.due, |d| d.min(conn.due)));
            }
        }
        let wait = next_due.map(|d| d.saturating_duration_since(Instant::now()));
        let ts = wait.map(|w| libc::timespec {
            tv_sec: w.as_secs() as libc::time_t,
            tv_nsec: w.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `fds` holds `fds.len()` initialised pollfds that live across the call;
        // `ts_ptr` is null or points at `ts`, alive until the call returns; no signal mask.
        let ready = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                ts_ptr,
                std::ptr::null(),
            )
        };
        if ready <= 0 {
            continue;
        }
        for (f, &c) in fds.iter().zip(&which) {
            if f.revents == 0 {
                continue;
            }
            let conn = &mut conns[c];
            match conn.stream.read(&mut chunk) {
                Ok(0) => {
                    eprintln!("put_openloop: the server closed connection {c}");
                    std::process::exit(1);
                }
                Ok(n) => conn.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    eprintln!("put_openloop: read on connection {c}: {e}");
                    std::process::exit(1);
                }
            }
            if let Some((len, ok)) = complete_response(&conn.buf) {
                let now = Instant::now();
                conn.buf.drain(..len);
                non_2xx += u64::from(!ok);
                from_due.push(now.saturating_duration_since(conn.due).as_nanos() as u64);
                if let Some(sent) = conn.sent.take() {
                    service.push(now.saturating_duration_since(sent).as_nanos() as u64);
                }
                conn.k += 1;
                conn.due += interval;
            }
        }
    }
    let took = end.saturating_duration_since(start).as_secs_f64();
    let cpu = cpu::rusage_seconds(libc::RUSAGE_SELF) - cpu_at_start;
    println!(
        "open loop: asked {:.0}/s over {} connections for {:.1} s: {} answers ({:.0}/s), {non_2xx} non-2xx, {errors} send errors",
        o.rate,
        o.connections,
        o.seconds,
        from_due.len(),
        from_due.len() as f64 / took
    );
    percentiles("latency from due time", &mut from_due);
    percentiles("service time (from send)", &mut service);
    percentiles("generator's own send lateness", &mut send_late);
    println!(
        "generator CPU {cpu:.2} s (user + system): {:.0}% of a core, {:.2} µs per answer",
        cpu / took * 100.0,
        cpu * 1e6 / from_due.len().max(1) as f64
    );
}
