//! Coming back after a crash: `kill -9` of `punctual serve` while clients hold connections
//! open, then an immediate restart on the same address, must serve again; and an address that
//! another live process really listens on must still be refused, once the bind-retry window
//! is over, with a message that names the address and what to check; and of several
//! started on one port at once, exactly one serves it.
//!
//! These tests spawn the binary themselves (not `api_support::Server`) because a restart must
//! reuse the same port.

mod api_support;
use api_support::{free_port, read_response, request, try_request};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const RESTARTS: usize = 20;

/// A `punctual serve` process whose stderr goes to a file, so it can be shown when it fails.
struct Proc {
    child: Child,
    stderr: PathBuf,
}

impl Proc {
    fn spawn(addr: SocketAddr, extra: &[&str], dir: &Path, name: &str) -> Proc {
        let stderr = dir.join(format!("{name}.stderr"));
        let file = std::fs::File::create(&stderr).expect("stderr file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
        cmd.arg("serve")
            .args(["--listen", &addr.to_string()])
            .args(["--shards", "2", "--pinning", "none", "--spin-us", "0"])
            .args(["--shard-capacity", "100000"])
            .args(["--data-dir".as_ref(), dir.join("data").as_os_str()])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(file);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("PUNCTUAL_")) {
            cmd.env_remove(k);
        }
        let child = cmd.spawn().expect("spawn punctual");
        Proc { child, stderr }
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until `/healthz` answers 200; an exit or 30 s of silence is an error that carries
    /// the process's stderr.
    fn wait_healthy(&mut self, addr: SocketAddr) -> Result<Duration, String> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited ({status}): {}", self.stderr_text()));
            }
            if let Ok(r) = try_request(addr, "GET", "/healthz", &[], b"") {
                if r.status == 200 {
                    return Ok(start.elapsed());
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(format!("no /healthz 200 in 30 s: {}", self.stderr_text()))
    }

    /// Waits for the process to exit by itself, up to `limit`; kills it past that.
    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    fn sigkill(&mut self) {
        // Child::kill sends SIGKILL; wait reaps it, as a supervisor would before restarting.
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a crash leaves behind: keep-alive connections that each had a request answered, and
/// one connection with a request whose body was only half sent.
fn hold_connections(addr: SocketAddr) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(20))).ok();
        c.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .expect("write");
        let r = read_response(&mut c).expect("keep-alive answer");
        assert_eq!(r.status, 200);
        assert_ne!(r.header("connection"), Some("close"));
        held.push(c);
    }
    let mut half = TcpStream::connect(addr).expect("connect");
    half.write_all(
        b"PUT /v1/timers/t/half HTTP/1.1\r\nhost: x\r\ncontent-length: 19\r\n\r\n{\"delay",
    )
    .expect("write half a request");
    held.push(half);
    held
}

fn round_trip(addr: SocketAddr, key: &str) {
    let path = format!("/v1/timers/t/{key}");
    let put = request(addr, "PUT", &path, &[], br#"{"delay_ms":600000}"#);
    assert_eq!(put.status, 201, "PUT {path}: {:?}", put);
    let get = request(addr, "GET", &path, &[], b"");
    assert_eq!(get.status, 200, "GET {path}: {:?}", get);
}

#[test]
fn restart_after_sigkill_with_open_connections_serves_again_every_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut server = Proc::spawn(addr, &[], dir.path(), "start");
    server.wait_healthy(addr).expect("first start");
    let all = Instant::now();
    let mut slowest = Duration::ZERO;
    for round in 0..RESTARTS {
        let held = hold_connections(addr);
        server.sigkill();
        let restarted = Instant::now();
        server = Proc::spawn(addr, &[], dir.path(), &format!("restart-{round}"));
        if let Err(e) = server.wait_healthy(addr) {
            panic!("restart {round} of {RESTARTS} on {addr} failed: {e}");
        }
        slowest = slowest.max(restarted.elapsed());
        round_trip(addr, &format!("round-{round}"));
        drop(held);
    }
    eprintln!(
        "{RESTARTS} kill -9 + restarts in {:?} (slowest restart to /healthz 200: {slowest:?})",
        all.elapsed()
    );
}

/// Once a killed server is reaped, nothing accepts on its address: a client that connects
/// between the crash and the restart is refused (and may retry), never accepted into a dead
/// process's backlog, whose connections are all reset when that socket finally closes. Each
/// round kills a server that was serving (its shards accepting), then connects at once.
#[test]
fn a_killed_server_accepts_no_connection_once_reaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    for round in 0..5 {
        let mut server = Proc::spawn(addr, &[], dir.path(), &format!("kill-{round}"));
        server.wait_healthy(addr).expect("start");
        round_trip(addr, &format!("before-kill-{round}"));
        server.sigkill();
        let accepted = TcpStream::connect(addr);
        assert!(
            accepted.is_err(),
            "round {round}: a connection to {addr} was accepted after its server was killed \
             and reaped; its reset is only a matter of time"
        );
    }
}

#[test]
fn a_port_held_by_a_live_listener_is_refused_after_the_retry_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A plain listener, as any other program would hold the port: no SO_REUSEPORT.
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = holder.local_addr().expect("addr");
    let start = Instant::now();
    let mut p = Proc::spawn(addr, &["--bind-retry-ms", "300"], dir.path(), "refused");
    let status = p
        .wait_exit(Duration::from_secs(20))
        .expect("punctual gave up within 20 s");
    let took = start.elapsed();
    let err = p.stderr_text();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(took >= Duration::from_millis(300), "gave up after {took:?}");
    assert!(err.contains(&addr.to_string()), "names the address: {err}");
    assert!(err.contains("300 ms"), "says how long it tried: {err}");
    let told = err.matches("take a moment to close").count();
    assert_eq!(told, 1, "one line says why it waits: {err}");
    assert!(
        err.contains(&format!("ss -ltnp 'sport = :{}'", addr.port())),
        "says what to check: {err}"
    );
}

/// Three punctuals started at once on one port, each with its own data directory: one serves
/// it, and the others give up after their retry window, naming the address, instead of
/// sharing the port through SO_REUSEPORT.
#[test]
fn of_three_started_at_once_on_one_port_one_serves() {
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut procs: Vec<Proc> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Proc::spawn(
                addr,
                &["--bind-retry-ms", "300"],
                d.path(),
                &format!("p{i}"),
            )
        })
        .collect();
    // The two that lose give up once their 300 ms of retries are over.
    let start = Instant::now();
    let mut exited = vec![None; procs.len()];
    while exited.iter().filter(|e| e.is_some()).count() < 2
        && start.elapsed() < Duration::from_secs(20)
    {
        for (p, e) in procs.iter_mut().zip(&mut exited) {
            if e.is_none() {
                *e = p.child.try_wait().ok().flatten();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for (p, e) in procs.iter().zip(&exited) {
        if let Some(status) = e {
            let err = p.stderr_text();
            assert_eq!(status.code(), Some(1), "{err}");
            assert!(err.contains(&addr.to_string()), "names the address: {err}");
        }
    }
    let refused = exited.iter().filter(|e| e.is_some()).count();
    assert_eq!(refused, 2, "exactly one of the three serves {addr}");
    let (serving, _) = procs
        .iter_mut()
        .zip(&exited)
        .find(|(_, e)| e.is_none())
        .expect("the one left running");
    serving.wait_healthy(addr).expect("it serves");
    round_trip(addr, "the-one");
}
