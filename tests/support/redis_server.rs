//! A real `redis-server` for tests: its own free port and temporary directory, append-only
//! file fsynced on every write (so a SIGKILL loses nothing Redis acknowledged), killed with
//! SIGKILL on drop. `kill` and `start` let a test take it down and bring it back on the same
//! port and data.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    fsync: &'static str,
}

// Free ports, never one another test was given. Every support module that starts servers
// includes the file: its claims are the kernel's, so the copies agree.
#[allow(clippy::duplicate_mod)]
#[path = "ports.rs"]
mod ports;

pub use ports::free_port;

impl RedisServer {
    /// Starts a server and waits until it answers PING.
    pub fn start() -> RedisServer {
        RedisServer::start_with_fsync("always")
    }

    /// Starts a server whose append-only file is fsynced by `policy` (`always`, `everysec`,
    /// `no`): benches compare with redis-benchmark under the policy an operator would pick.
    pub fn start_with_fsync(policy: &'static str) -> RedisServer {
        let mut s = RedisServer::stopped(free_port());
        s.fsync = policy;
        s.start_again();
        s
    }

    /// A server on `port` that is not running yet (`start_again` starts it).
    pub fn stopped(port: u16) -> RedisServer {
        RedisServer {
            port,
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
            fsync: "always",
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts (or restarts) the server on the same port and directory.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .arg("--dir")
            .arg(self.dir.path())
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                self.fsync,
            ])
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (is it installed?)");
        self.child = Some(child);
        let give_up = Instant::now() + Duration::from_secs(20);
        while Instant::now() < give_up {
            if let Ok(mut c) = self.client() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not answer", self.port);
    }

    /// SIGKILL: no shutdown, no final save; the AOF holds what was acknowledged.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGSTOP (`"STOP"`) or SIGCONT (`"CONT"`): a Redis that stops answering without
    /// closing its connections, as a hung or swapped-out server does.
    pub fn signal(&self, which: &str) {
        let sig = match which {
            "STOP" => libc::SIGSTOP,
            "CONT" => libc::SIGCONT,
            other => panic!("unsupported signal {other}"),
        };
        let pid = self.child.as_ref().expect("running").id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid; it touches no memory.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill -{which} {pid}");
    }

    /// The server's process id while it runs (benches read its CPU time from `/proc`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn client(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One entry of a fired stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEntry {
    pub id_ms: u64,
    pub key: String,
    pub version: u64,
    pub fire_at_us: u64,
    pub fired_at_us: u64,
    pub payload: String,
}

/// Every entry of `punctual:fired:{tenant}`, oldest first.
pub fn read_stream(con: &mut redis::Connection, tenant: &str) -> Vec<StreamEntry> {
    try_read_stream(con, tenant).expect("XRANGE")
}

/// `read_stream`, with the connection's error returned rather than a panic: a reader that
/// races a Sentinel failover sees its connection closed (the promoted replica drops its
/// normal clients so that they rediscover the master) and connects again.
pub fn try_read_stream(
    con: &mut redis::Connection,
    tenant: &str,
) -> redis::RedisResult<Vec<StreamEntry>> {
    let v: redis::Value = redis::cmd("XRANGE")
        .arg(format!("punctual:fired:{{{tenant}}}"))
        .arg("-")
        .arg("+")
        .query(con)?;
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    };
    let mut out = Vec::new();
    if let redis::Value::Array(entries) = v {
        for e in entries {
            let redis::Value::Array(parts) = e else {
                continue;
            };
            let [id, redis::Value::Array(fields)] = &parts[..] else {
                continue;
            };
            let id = text(id);
            let id_ms = id
                .split('-')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let mut entry = StreamEntry {
                id_ms,
                key: String::new(),
                version: 0,
                fire_at_us: 0,
                fired_at_us: 0,
                payload: String::new(),
            };
            for kv in fields.chunks_exact(2) {
                let value = text(&kv[1]);
                match text(&kv[0]).as_str() {
                    "key" => entry.key = value,
                    "version" => entry.version = value.parse().unwrap_or(0),
                    "fire_at_us" => entry.fire_at_us = value.parse().unwrap_or(0),
                    "fired_at_us" => entry.fired_at_us = value.parse().unwrap_or(0),
                    "payload" => entry.payload = value,
                    _ => {}
                }
            }
            out.push(entry);
        }
    }
    Ok(out)
}

/// Polls `read_stream` until `done` holds for what it returns, or 30 s pass.
pub fn wait_stream(
    con: &mut redis::Connection,
    tenant: &str,
    done: impl Fn(&[StreamEntry]) -> bool,
) -> Vec<StreamEntry> {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let entries = read_stream(con, tenant);
        if done(&entries) || Instant::now() > give_up {
            return entries;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}
