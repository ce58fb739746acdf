//! Redis with Sentinel for failover tests: a master, one replica and three sentinels (quorum
//! 2, down-after 1 s, failover-timeout 5 s) on free loopback ports, each started from its own
//! configuration file in one temporary directory, so that a test can SIGKILL a node and start
//! it again exactly as it was, as a supervisor would. Every process is killed on drop.
//!
//! The nodes keep no RDB and no AOF: a write survives the loss of the master only through the
//! replica, which is what `--redis-wait-replicas` is about. `repl-diskless-sync-delay 0` lets
//! a returning node resynchronise at once (Redis's default waits 5 s before a full sync).
//!
//! `sentinel resolve-hostnames no` and `announce-ip 127.0.0.1`: the sentinels name every node
//! by the loopback address, which is what punctual connects to.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The master's name in the sentinels' configuration.
pub const MASTER_NAME: &str = "punctual-test";

// Free ports, never one another test was given. Every support module that starts servers
// includes the file: its claims are the kernel's, so the copies agree.
#[allow(clippy::duplicate_mod)]
#[path = "ports.rs"]
mod ports;

pub use ports::free_port;

/// One `redis-server` (or sentinel) process and the configuration file it starts from.
pub struct Node {
    pub name: String,
    pub port: u16,
    conf: PathBuf,
    log: PathBuf,
    sentinel: bool,
    child: Option<Child>,
}

impl Node {
    /// Starts the process from its configuration file and waits until it answers PING.
    pub fn start(&mut self) {
        self.start_with(&[]);
    }

    /// Starts a data node as a replica of the master on `master`: how a node that keeps
    /// nothing on disk must come back after it was lost (see the failover test).
    pub fn start_replica_of(&mut self, master: u16) {
        self.start_with(&["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
    }

    fn start_with(&mut self, args: &[String]) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let mut cmd = Command::new("redis-server");
        cmd.arg(&self.conf);
        if self.sentinel {
            cmd.arg("--sentinel");
        }
        cmd.args(args);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (is it installed?)");
        self.child = Some(child);
        let give_up = Instant::now() + Duration::from_secs(20);
        while Instant::now() < give_up {
            if self.query::<String>(&redis::cmd("PING")).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{} on port {} did not answer PING", self.name, self.port);
    }

    /// SIGKILL: no shutdown, nothing saved.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn client(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?
            .get_connection_with_timeout(Duration::from_secs(2))
    }

    /// One command on a fresh connection.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        cmd.query(&mut self.client()?)
    }

    /// The last lines of the node's log file.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A master, its replica and three sentinels watching it.
pub struct Sentinels {
    pub master: Node,
    pub replica: Node,
    pub sentinels: Vec<Node>,
    // Last: removed after every process above is dead.
    dir: tempfile::TempDir,
}

impl Sentinels {
    /// Starts everything and returns once the replica is in sync and every sentinel knows the
    /// replica and the two other sentinels (without that, no quorum can fail over).
    pub fn start() -> Sentinels {
        let dir = tempfile::tempdir().expect("temp dir");
        let (pm, pr) = (free_port(), free_port());
        let mut master = node(dir.path(), "master", pm, redis_conf(pm, None), false);
        let mut replica = node(dir.path(), "replica", pr, redis_conf(pr, Some(pm)), false);
        master.start();
        replica.start();
        wait_until(
            Duration::from_secs(30),
            "the replica's link to the master",
            || info(&replica, "replication").contains("master_link_status:up"),
        );
        let mut sentinels: Vec<Node> = (1..=3)
            .map(|i| {
                let port = free_port();
                node(
                    dir.path(),
                    &format!("sentinel{i}"),
                    port,
                    sentinel_conf(port, pm),
                    true,
                )
            })
            .collect();
        for s in &mut sentinels {
            s.start();
        }
        let set = Sentinels {
            master,
            replica,
            sentinels,
            dir,
        };
        wait_until(
            Duration::from_secs(60),
            "the sentinels to discover the replica and each other",
            || {
                set.sentinels.iter().all(|s| {
                    let m = sentinel_master(s);
                    field(&m, "num-slaves") == Some("1")
                        && field(&m, "num-other-sentinels") == Some("2")
                })
            },
        );
        set
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/<master>`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The master's port as `sentinel` names it now.
    pub fn named_by(sentinel: &Node) -> Option<u16> {
        let addr: Vec<String> = sentinel
            .query(
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(MASTER_NAME),
            )
            .ok()?;
        addr.get(1)?.parse().ok()
    }

    /// Waits until every sentinel names a master other than `old` and that server says it is
    /// a master; its port, or `None` after `within`.
    pub fn wait_switch(&self, old: u16, within: Duration) -> Option<u16> {
        let give_up = Instant::now() + within;
        while Instant::now() < give_up {
            let named: Vec<Option<u16>> = self.sentinels.iter().map(Self::named_by).collect();
            if let Some(Some(port)) = named.first() {
                let agreed = named.iter().all(|n| *n == Some(*port));
                if *port != old && agreed && role_of(*port).as_deref() == Some("master") {
                    return Some(*port);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The tails of every node's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for n in [&self.master, &self.replica]
            .into_iter()
            .chain(self.sentinels.iter())
        {
            out.push_str(&format!(
                "--- {} (:{})\n{}\n",
                n.name,
                n.port,
                n.log_tail(15)
            ));
        }
        out
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn node(dir: &Path, name: &str, port: u16, conf: Vec<String>, sentinel: bool) -> Node {
    let log = dir.join(format!("{name}.log"));
    let path = dir.join(format!("{name}.conf"));
    let mut lines = vec![
        format!("port {port}"),
        "bind 127.0.0.1".into(),
        "protected-mode no".into(),
        format!("dir {}", dir.display()),
        format!("logfile {}", log.display()),
    ];
    lines.extend(conf);
    fs::write(&path, lines.join("\n") + "\n").expect("write a config file");
    Node {
        name: name.into(),
        port,
        conf: path,
        log,
        sentinel,
        child: None,
    }
}

fn redis_conf(port: u16, replica_of: Option<u16>) -> Vec<String> {
    let mut c: Vec<String> = [
        "save \"\"",
        "appendonly no",
        "repl-diskless-sync yes",
        "repl-diskless-sync-delay 0",
        "replica-announce-ip 127.0.0.1",
    ]
    .map(String::from)
    .to_vec();
    c.push(format!("dbfilename node-{port}.rdb"));
    if let Some(m) = replica_of {
        c.push(format!("replicaof 127.0.0.1 {m}"));
    }
    c
}

fn sentinel_conf(port: u16, master: u16) -> Vec<String> {
    vec![
        "sentinel resolve-hostnames no".into(),
        "sentinel announce-ip 127.0.0.1".into(),
        format!("sentinel announce-port {port}"),
        format!("sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2"),
        format!("sentinel down-after-milliseconds {MASTER_NAME} 1000"),
        format!("sentinel failover-timeout {MASTER_NAME} 5000"),
        format!("sentinel parallel-syncs {MASTER_NAME} 1"),
    ]
}

fn info(n: &Node, section: &str) -> String {
    n.query(redis::cmd("INFO").arg(section)).unwrap_or_default()
}

/// `SENTINEL MASTER <name>` as its flat list of names and values.
fn sentinel_master(s: &Node) -> Vec<String> {
    s.query(redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME))
        .unwrap_or_default()
}

fn field<'a>(flat: &'a [String], name: &str) -> Option<&'a str> {
    flat.chunks_exact(2)
        .find(|kv| kv[0] == name)
        .map(|kv| kv[1].as_str())
}

/// The first element of `ROLE` on the server at `port`: "master", "slave", or None.
pub fn role_of(port: u16) -> Option<String> {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .ok()?
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    let role: redis::Value = redis::cmd("ROLE").query(&mut con).ok()?;
    match role {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        },
        _ => None,
    }
}

fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + within;
    while Instant::now() < give_up {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {within:?} waiting for {what}");
}
