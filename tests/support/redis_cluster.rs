//! A real Redis Cluster for tests: six `redis-server --cluster-enabled yes` processes on free
//! loopback ports (three masters, one replica each, as `redis-cli --cluster create
//! --cluster-replicas 1` pairs them), each started from its own configuration file in one
//! temporary directory and killed (SIGKILL) on drop. Nothing here reaches a server that this
//! harness did not start.
//!
//! `cluster-node-timeout 1000`: a killed master is marked failed and its replica promoted
//! within a few seconds. `cluster-replica-validity-factor 0`: a replica may always fail over,
//! however long its link was down (the tests kill masters on purpose). The nodes keep no RDB
//! and no AOF; `repl-diskless-sync-delay 0` lets a replica resynchronise at once.
//!
//! Every wait here is bounded and panics with what it waited for and the nodes' log tails.
#![allow(dead_code)]

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the cluster may take to form, fail over or finish a reshard before a test fails.
const FORM_WITHIN: Duration = Duration::from_secs(40);

/// Ports a cluster node may take: 20,000–22,767, whose bus ports (+10,000: 30,000–32,767)
/// lie below Linux's ephemeral range too, so no outgoing connection takes either meanwhile.
/// A free port from the ephemeral range could be handed out twice (two nodes on one port,
/// and a cluster that never forms), and one above 55,535 has no bus port at all.
const CLUSTER_PORTS: std::ops::Range<u16> = 20_000..22_768;

/// A port for a cluster node: in [`CLUSTER_PORTS`], free with its bus port right now, and
/// never one this process handed out before.
pub fn cluster_port() -> u16 {
    static HANDED: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed = HANDED.lock().unwrap_or_else(|e| e.into_inner());
    let span = u32::from(CLUSTER_PORTS.end - CLUSTER_PORTS.start);
    // Test binaries of one run start at different places, so two never race for a port.
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for i in 0..span {
        let port = CLUSTER_PORTS.start + ((seed.wrapping_add(i.wrapping_mul(7_919))) % span) as u16;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if !handed.contains(&port) && free(port) && free(port + 10_000) {
            handed.push(port);
            return port;
        }
    }
    panic!("no free cluster port left in {CLUSTER_PORTS:?}");
}

/// One cluster node: its port, configuration file, log and process.
pub struct ClusterNode {
    pub port: u16,
    conf: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl ClusterNode {
    /// Starts the process from its configuration file (its `nodes.conf` keeps its identity
    /// and its view of the cluster across a restart) and waits until it answers PING.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "node :{} already runs", self.port);
        let child = Command::new("redis-server")
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (is it installed?)");
        self.child = Some(child);
        wait_until(
            Duration::from_secs(20),
            "a started node to answer PING",
            || self.query::<String>(&redis::cmd("PING")).is_ok(),
        );
    }

    /// SIGKILL: no shutdown, nothing saved.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// One command on a fresh connection; asked again (up to three times in all) after an
    /// I/O error, such as a read that a signal interrupted (the test's executors take signals).
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let once = || {
            let mut con = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?
                .get_connection_with_timeout(Duration::from_secs(2))?;
            con.set_read_timeout(Some(Duration::from_secs(5)))?;
            cmd.query(&mut con)
        };
        let mut tries = 1;
        loop {
            match once() {
                Err(e) if e.is_io_error() && tries < 3 => tries += 1,
                other => return other,
            }
        }
    }

    /// The node's id in the cluster.
    pub fn id(&self) -> String {
        self.query(redis::cmd("CLUSTER").arg("MYID"))
            .expect("CLUSTER MYID")
    }

    fn info(&self) -> String {
        self.query(redis::cmd("CLUSTER").arg("INFO"))
            .unwrap_or_default()
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Six nodes: three masters with one replica each.
pub struct RedisCluster {
    pub nodes: Vec<ClusterNode>,
    // After the nodes: removed after every process above is dead.
    dir: tempfile::TempDir,
    // Last: the next cluster of this test binary starts once this one is gone.
    _turn: std::sync::MutexGuard<'static, ()>,
}

/// One cluster at a time per test binary: six `redis-server`s per test, with the tests of a
/// binary run in parallel on a small host, left nodes unanswered for 20 s, and ports picked
/// free by one test could be taken by another's nodes before they bound them.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl RedisCluster {
    /// Starts six nodes, creates the cluster and returns once every node says
    /// `cluster_state:ok`, knows all six, and every master has its replica in sync.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(&[])
    }

    /// [`RedisCluster::start`] with `extra` lines at the end of every node's configuration
    /// file (a later line overrides an earlier one).
    pub fn start_with(extra: &[&str]) -> RedisCluster {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes: Vec<ClusterNode> = (0..6)
            .map(|_| node(dir.path(), cluster_port(), extra))
            .collect();
        for n in &mut nodes {
            n.start();
        }
        let cluster = RedisCluster {
            nodes,
            dir,
            _turn: turn,
        };
        let mut create = Command::new("redis-cli");
        create.args(["--cluster", "create"]);
        for n in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        cluster.run_cli(create, "redis-cli --cluster create");
        cluster.wait_healthy("the new cluster to be ok with every replica in sync");
        cluster
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/`: three seeds, as an
    /// operator would give them.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..3]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}/", seeds.join(","))
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on :{port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut ClusterNode {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on :{port}"))
    }

    /// The port of the master that serves `slot`, as the first running node sees it now.
    pub fn master_of(&self, slot: u16) -> u16 {
        self.slots()
            .into_iter()
            .find(|(range, _)| range.contains(&slot))
            .map(|(_, port)| port)
            .unwrap_or_else(|| panic!("no master serves slot {slot}\n{}", self.logs()))
    }

    /// Each slot range and its master's port, from `CLUSTER SLOTS` on a running node.
    pub fn slots(&self) -> Vec<(std::ops::RangeInclusive<u16>, u16)> {
        let reply: redis::Value = self
            .running_node()
            .query(redis::cmd("CLUSTER").arg("SLOTS"))
            .expect("CLUSTER SLOTS");
        let redis::Value::Array(ranges) = reply else {
            panic!("CLUSTER SLOTS answered {reply:?}");
        };
        ranges
            .iter()
            .filter_map(|r| match r {
                redis::Value::Array(parts) => match &parts[..] {
                    [redis::Value::Int(a), redis::Value::Int(b), redis::Value::Array(m), ..] => {
                        let port = match m.get(1) {
                            Some(redis::Value::Int(p)) => *p as u16,
                            _ => return None,
                        };
                        Some((*a as u16..=*b as u16, port))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    /// The masters' ports, in the order of their first slot.
    pub fn masters(&self) -> Vec<u16> {
        let mut ranges = self.slots();
        ranges.sort_by_key(|(r, _)| *r.start());
        let mut out = Vec::new();
        for (_, port) in ranges {
            if !out.contains(&port) {
                out.push(port);
            }
        }
        out
    }

    /// SIGKILLs the master on `port` and waits until its replica was promoted: every running
    /// node reports `cluster_state:ok` and none names `port` as a master of any slot. Returns
    /// the promoted replica's port.
    pub fn kill_master(&mut self, port: u16) -> u16 {
        let slots: Vec<_> = self
            .slots()
            .into_iter()
            .filter(|(_, p)| *p == port)
            .collect();
        let (first, _) = slots
            .first()
            .expect("the node is a master of some slots")
            .clone();
        self.node_mut(port).kill();
        let what = format!("a replica of :{port} to take over its slots");
        wait_until_or(
            FORM_WITHIN,
            &what,
            || self.logs(),
            || {
                let ok = self
                    .nodes
                    .iter()
                    .filter(|n| n.running())
                    .all(|n| n.info().contains("cluster_state:ok"));
                ok && self.slots().iter().all(|(_, p)| *p != port)
            },
        );
        self.master_of(*first.start())
    }

    /// SIGKILLs every node that is not a master: writes then find no replica to confirm them.
    pub fn kill_replicas(&mut self) {
        let masters = self.masters();
        for n in self.nodes.iter_mut().filter(|n| !masters.contains(&n.port)) {
            n.kill();
        }
    }

    /// Starts a killed node again from its configuration: it rejoins as a replica of the
    /// master that replaced it. Returns once the cluster is healthy again.
    pub fn restart(&mut self, port: u16) {
        self.node_mut(port).start();
        self.wait_healthy("a restarted node to rejoin and its master to have its replica again");
    }

    /// Starts `redis-cli --cluster reshard` moving `slots` slots from the master on `from` to
    /// the one on `to`, and returns at once: the reshard runs while the test writes.
    /// [`Reshard::finish`] waits for it.
    pub fn reshard(&self, from: u16, to: u16, slots: u32) -> Reshard {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["--cluster", "reshard", &format!("127.0.0.1:{from}")])
            .args(["--cluster-from", &self.node(from).id()])
            .args(["--cluster-to", &self.node(to).id()])
            .args(["--cluster-slots", &slots.to_string()])
            .args(["--cluster-pipeline", "10", "--cluster-yes"]);
        self.spawn_cli(cmd, "reshard")
    }

    /// Starts a `redis-cli` command with its output in a log file of its own (a pipe that
    /// nobody reads would stall it once full: a reshard prints a line per slot).
    fn spawn_cli(&self, mut cmd: Command, name: &str) -> Reshard {
        let log = self.dir.path().join(format!("redis-cli-{name}.log"));
        let out = fs::File::create(&log).expect("a log file");
        let err = out.try_clone().expect("a log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("redis-cli starts (is it installed?)");
        Reshard {
            child: Some(child),
            log,
        }
    }

    /// Runs a `redis-cli` command to its end within [`FORM_WITHIN`]; panics with its output
    /// if it fails or takes longer.
    fn run_cli(&self, cmd: Command, what: &str) {
        let mut r = self.spawn_cli(cmd, "create");
        if let Err(e) = r.finish_within(FORM_WITHIN) {
            panic!("{what}: {e}\n{}", self.logs());
        }
    }

    /// Waits until every running node says `cluster_state:ok` and knows every node, and every
    /// master has as many replicas in sync as there are running nodes to be its replicas.
    pub fn wait_healthy(&self, what: &str) {
        let running = self.nodes.iter().filter(|n| n.running()).count();
        wait_until_or(
            FORM_WITHIN,
            what,
            || self.logs(),
            || {
                let views_ok = self.nodes.iter().filter(|n| n.running()).all(|n| {
                    let info = n.info();
                    info.contains("cluster_state:ok")
                        && info.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
                });
                if !views_ok {
                    return false;
                }
                let masters = self.masters();
                let in_sync: usize = masters
                    .iter()
                    .map(|&m| {
                        let repl: String = self
                            .node(m)
                            .query(redis::cmd("INFO").arg("replication"))
                            .unwrap_or_default();
                        repl.lines().filter(|l| l.contains("state=online")).count()
                    })
                    .sum();
                masters.len() == 3 && in_sync == running - 3
            },
        );
    }

    fn running_node(&self) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|n| n.running())
            .expect("a running node")
    }

    /// The tails of every node's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            out.push_str(&format!("--- :{}\n{}\n", n.port, n.log_tail(12)));
        }
        out
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A `redis-cli --cluster` command running in the background; killed on drop.
pub struct Reshard {
    child: Option<Child>,
    log: PathBuf,
}

impl Reshard {
    /// Waits for the command to end, within `within`; its output if it failed.
    pub fn finish_within(&mut self, within: Duration) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let give_up = Instant::now() + within;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => return Err(format!("{status}\n{}", self.log_tail())),
                Ok(None) if Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "still running after {within:?}\n{}",
                        self.log_tail()
                    ));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(20)..].join("\n")
    }

    /// Whether the command has ended (successfully or not).
    pub fn done(&mut self) -> bool {
        match &mut self.child {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// [`Reshard::finish_within`] with the harness's bound, panicking on failure.
    pub fn finish(&mut self) {
        if let Err(e) = self.finish_within(FORM_WITHIN) {
            panic!("redis-cli --cluster reshard: {e}");
        }
    }
}

impl Drop for Reshard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn node(dir: &Path, port: u16, extra: &[&str]) -> ClusterNode {
    let conf = dir.join(format!("node-{port}.conf"));
    let log = dir.join(format!("node-{port}.log"));
    let lines = [
        format!("port {port}"),
        "bind 127.0.0.1".into(),
        "protected-mode no".into(),
        format!("dir {}", dir.display()),
        format!("logfile {}", log.display()),
        "cluster-enabled yes".into(),
        format!("cluster-config-file nodes-{port}.conf"),
        "cluster-node-timeout 1000".into(),
        "cluster-replica-validity-factor 0".into(),
        "cluster-allow-replica-migration no".into(),
        "save \"\"".into(),
        "appendonly no".into(),
        format!("dbfilename dump-{port}.rdb"),
        "repl-diskless-sync yes".into(),
        "repl-diskless-sync-delay 0".into(),
    ];
    let lines: Vec<String> = lines
        .into_iter()
        .chain(extra.iter().map(|l| l.to_string()))
        .collect();
    fs::write(&conf, lines.join("\n") + "\n").expect("write a config file");
    ClusterNode {
        port,
        conf,
        log,
        child: None,
    }
}

/// Runs `fut` on a fresh glommio executor on this thread: where a test runs the cluster client.
pub fn on_executor<T>(fut: impl std::future::Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor")
        .run(fut)
}

fn wait_until(within: Duration, what: &str, done: impl FnMut() -> bool) {
    wait_until_or(within, what, String::new, done);
}

/// Polls `done` until it holds; after `within`, panics naming `what` with `context()`.
fn wait_until_or(
    within: Duration,
    what: &str,
    context: impl Fn() -> String,
    mut done: impl FnMut() -> bool,
) {
    let give_up = Instant::now() + within;
    while Instant::now() < give_up {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "timed out after {within:?} waiting for {what}\n{}",
        context()
    );
}
