//! Shared by the HTTP tests: starts the real `punctual` binary on a free port and talks to it
//! over real TCP with a tiny HTTP/1.1 client (raw sockets, so malformed requests can be sent).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `punctual serve` on the journal store under `data`, with `toml` as its config file (kept as
/// long as the server runs) and `args`.
pub struct Configured {
    pub s: Server,
    _config: tempfile::NamedTempFile,
}

impl Configured {
    pub fn journal(data: &std::path::Path, toml: &str, args: &[&str]) -> Configured {
        let mut config = tempfile::NamedTempFile::new().expect("config file");
        config.write_all(toml.as_bytes()).expect("write config");
        let all = Self::args(&config, data, args);
        let s = Server::start(&all.iter().map(String::as_str).collect::<Vec<_>>());
        Configured { s, _config: config }
    }

    fn args(
        config: &tempfile::NamedTempFile,
        data: &std::path::Path,
        args: &[&str],
    ) -> Vec<String> {
        let (cfg, dir) = (config.path().to_string_lossy(), data.to_string_lossy());
        let mut all = vec!["--config", &cfg, "--store", "journal", "--data-dir", &dir];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_string).collect()
    }

    /// Ends the server with SIGKILL and starts it again at once on the same port, config file
    /// and data directory, with `args` (those it was started with): a supervisor's restart.
    pub fn restart_after_sigkill(mut self, data: &std::path::Path, args: &[&str]) -> Configured {
        let _ = self.s.child.kill();
        let _ = self.s.child.wait();
        let all = Self::args(&self._config, data, args);
        let s = Server::start_at(
            self.s.addr,
            &all.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        Configured { s, ..self }
    }

    /// Ends the server with SIGKILL and waits for it.
    pub fn sigkill(mut self) {
        let _ = self.s.child.kill();
        let _ = self.s.child.wait();
    }
}

/// A running server; killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

// Free ports, never one another test was given. Every support module that starts servers
// includes the file: its claims are the kernel's, so the copies agree.
#[allow(clippy::duplicate_mod)]
#[path = "../support/ports.rs"]
mod ports;

pub use ports::free_port;

/// Polls `f` until it returns `Some`, or 30 s pass.
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < give_up, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port on 127.0.0.1 that refuses connections for as long as the returned socket lives:
/// bound and never listened on, so that no other test's server can take it meanwhile (a port
/// found free and let go can be, and then it answers).
pub fn refused_port() -> (socket2::Socket, u16) {
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    s.bind(&any.into()).expect("bind port 0");
    let port = s
        .local_addr()
        .expect("local addr")
        .as_socket()
        .expect("an inet address")
        .port();
    (s, port)
}

/// The store a test server runs with when its test names none: the in-memory store. These
/// tests are about HTTP; the journal (the service's default) has its own process tests
/// (`serve_journal.rs`), and a default `./punctual-data` shared by parallel tests would be
/// locked by the first of them.
fn store_args(args: &[&str]) -> &'static [&'static str] {
    let named = args.iter().any(|a| {
        a.starts_with("--store") || a.starts_with("--redis") || a.starts_with("--data-dir")
    });
    if named {
        &[]
    } else {
        &["--store", "memory"]
    }
}

/// The light settings a test server runs with, each unless its test names the flag (a bench
/// names a larger `--shard-capacity`, or the service's own pinning and spin).
fn light_args(args: &[&str]) -> Vec<&'static str> {
    [
        ("--pinning", "none"),
        ("--spin-us", "0"),
        ("--shard-capacity", "100000"),
    ]
    .into_iter()
    .filter(|(flag, _)| !args.iter().any(|a| a.starts_with(flag)))
    .flat_map(|(flag, value)| [flag, value])
    .collect()
}

impl Server {
    /// `punctual serve` on a free port, light settings for tests, plus `args`.
    pub fn start(args: &[&str]) -> Server {
        Self::start_with(args, &[])
    }

    /// Like `start`, but ready as soon as /healthz answers at all (a store that is down
    /// makes it answer 503).
    pub fn start_unhealthy(args: &[&str]) -> Server {
        Self::launch(args, &[], false)
    }

    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Server {
        Self::launch(args, env, true)
    }

    /// `punctual serve` with `args`, which must refuse to start: its exit status and stderr
    /// (waits at most 30 s).
    pub fn refused(args: &[&str]) -> (std::process::ExitStatus, String) {
        let mut child = Self::command(args, &[])
            .0
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn punctual");
        let give_up = Instant::now() + Duration::from_secs(30);
        while child.try_wait().expect("wait").is_none() {
            if Instant::now() > give_up {
                let _ = child.kill();
                panic!("punctual started where it should refuse: {args:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("output");
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `punctual serve` on `addr` (the address of a server that was killed: a restart, as a
    /// supervisor makes one), plus `args`; ready once /healthz answers 200.
    pub fn start_at(addr: SocketAddr, args: &[&str]) -> Server {
        let mut s = Self::spawn_at(addr, args);
        s.wait_ready(true);
        s
    }

    /// [`Server::start_at`], returning at once: the server may not listen yet.
    pub fn spawn_at(addr: SocketAddr, args: &[&str]) -> Server {
        let mut cmd = Self::command_at(addr, args, &[]);
        let child = cmd.spawn().expect("spawn punctual");
        Server { child, addr }
    }

    /// Waits until /healthz answers 200 (at most 30 s; an exit fails the test).
    pub fn wait_healthy(&mut self) {
        self.wait_ready(true);
    }

    fn launch(args: &[&str], env: &[(&str, &str)], healthy: bool) -> Server {
        let (mut cmd, addr) = Self::command(args, env);
        let child = cmd.spawn().expect("spawn punctual");
        let mut s = Server { child, addr };
        s.wait_ready(healthy);
        s
    }

    /// The command line of a test server on a free port, and its address.
    fn command(args: &[&str], env: &[(&str, &str)]) -> (Command, SocketAddr) {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        (Self::command_at(addr, args, env), addr)
    }

    fn command_at(addr: SocketAddr, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
        cmd.arg("serve")
            .args(["--listen", &addr.to_string()])
            .args(light_args(args))
            .args(store_args(args))
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for k in [
            "PUNCTUAL_LISTEN",
            "PUNCTUAL_SHARDS",
            "PUNCTUAL_CONFIG",
            "PUNCTUAL_SPIN_US",
            "PUNCTUAL_STORE",
            "PUNCTUAL_DATA_DIR",
            "PUNCTUAL_REDIS",
        ] {
            cmd.env_remove(k);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    fn wait_ready(&mut self, healthy: bool) {
        let give_up = Instant::now() + Duration::from_secs(30);
        while Instant::now() < give_up {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("punctual exited during start-up: {status}");
            }
            if let Ok(r) = try_request(self.addr, "GET", "/healthz", &[], b"") {
                if r.status == 200 || !healthy {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("punctual did not answer /healthz on {}", self.addr);
    }

    pub fn req(&self, method: &str, path: &str, body: &str) -> Resp {
        request(self.addr, method, path, &[], body.as_bytes())
    }

    pub fn req_h(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
        request(self.addr, method, path, headers, body.as_bytes())
    }

    pub fn json(&self, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        let r = self.req(method, path, body);
        (r.status, r.json())
    }

    /// A call with `Authorization: Bearer <token>` and `body` as JSON (none when null): the
    /// status and the JSON answer.
    pub fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let auth = format!("Bearer {token}");
        let text = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let r = self.req_h(method, path, &[("authorization", &auth)], &text);
        (r.status, r.json())
    }

    /// The sum over shards of a metric family's samples in a `/metrics` scrape (a counter by
    /// its family name, without `_total`, or with it).
    pub fn metric(&self, name: &str) -> f64 {
        let text = String::from_utf8_lossy(&self.req("GET", "/metrics", "").body).into_owned();
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .map(|r| r.strip_prefix("_total").unwrap_or(r))
                    .is_some_and(|r| r.starts_with(['{', ' ']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// A connection that `/healthz` was answered 200 on, kept open; retried for a while, as
    /// the connections of earlier requests (start-up's probes) may still hold their places
    /// under a connection cap until their close is done.
    pub fn held(&self) -> TcpStream {
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            let mut c = self.connect();
            let answered = c
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                .and_then(|()| read_response(&mut c));
            match answered {
                Ok(r) if r.status == 200 => return c,
                other if Instant::now() > give_up => panic!("no connection held: {other:?}"),
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        if self.body.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// The `error.code` of an error body.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

/// The `key` of each entry of a listing's array (`{"dead": [...]}`'s, `{"timers": [...]}`'s).
pub fn keys_of(list: &serde_json::Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l["key"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    try_request(addr, method, path, headers, body).expect("request")
}

pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let mut raw = format!("{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
    for (k, v) in headers {
        raw.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || matches!(method, "PUT" | "POST") {
        raw.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    raw.push_str("\r\n");
    let mut bytes = raw.into_bytes();
    bytes.extend_from_slice(body);
    raw_exchange(addr, &bytes)
}

/// Sends `bytes` as they are and reads one response (until the server closes).
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(bytes)?;
    read_response(&mut s)
}

/// Reads one response from `s`: head, then `content-length` bytes (or to EOF).
pub fn read_response(s: &mut TcpStream) -> std::io::Result<Resp> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a response",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = buf[head_end + 4..].to_vec();
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok());
    match len {
        Some(len) => {
            while body.len() < len {
                let n = s.read(&mut chunk)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.truncate(len);
        }
        None if status == 204 || status == 304 => {}
        None => loop {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        },
    }
    Ok(Resp {
        status,
        headers,
        body,
    })
}

/// Schedules `keys` of `tenant` 10 minutes out through `addr`, in batches of 5,000 (on a node
/// among others each item goes to its owner); each key's version. Any item refused fails the
/// test.
pub fn put_batches(
    addr: SocketAddr,
    tenant: &str,
    keys: &[String],
) -> std::collections::BTreeMap<String, u64> {
    let mut versions = std::collections::BTreeMap::new();
    for chunk in keys.chunks(5_000) {
        let items: Vec<serde_json::Value> = chunk
            .iter()
            .map(|k| serde_json::json!({"key": k, "delay_ms": 600_000}))
            .collect();
        let body = serde_json::json!({ "timers": items }).to_string();
        let path = format!("/v1/timers/{tenant}");
        let r = try_request(addr, "POST", &path, &[], body.as_bytes()).expect("answered");
        let v = r.json();
        assert_eq!(r.status, 200, "{v}");
        for item in v["results"].as_array().into_iter().flatten() {
            assert!(item["status"] == 201 || item["status"] == 200, "{item}");
            let key = item["key"].as_str().unwrap_or("").to_string();
            versions.insert(key, item["version"].as_u64().unwrap_or(0));
        }
    }
    assert_eq!(versions.len(), keys.len());
    versions
}
