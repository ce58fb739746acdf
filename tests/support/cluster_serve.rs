//! A `punctual serve` process on a real Redis Cluster, and what the tests check against: the
//! timers acknowledged over HTTP (`Book`), the fired streams and pending records read back at
//! the masters that serve them (`Reader`), and the check that every promise was kept.

#![allow(dead_code)] // each test binary uses its own part of this

use super::api_support::{free_port, try_request};
use super::redis_cluster::RedisCluster;
use super::redis_server::{try_read_stream, StreamEntry};
use punctual::partition::PARTITIONS;
use punctual::store::redis::cluster::slot::{partition_slot, slot_of};
use punctual::store::redis::layout;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The cluster secret every node a test starts is given.
pub const CLUSTER_SECRET: &str = "the-test-cluster-secret-0123456789abcdef";

/// A free local address, as a node's id and advertised address.
pub fn node_addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address")
}

/// How many partitions `me` owns among `all` by rendezvous hashing.
pub fn share(me: SocketAddr, all: &[SocketAddr]) -> u64 {
    let ids: Vec<String> = all.iter().map(ToString::to_string).collect();
    punctual::nodes::rendezvous::owned_by(&me.to_string(), &ids).len() as u64
}

/// A `punctual serve` process on a Redis Cluster, its stderr in a file.
pub struct Proc {
    child: Child,
    stderr: PathBuf,
}

impl Proc {
    pub fn spawn(addr: SocketAddr, url: &str, dir: &Path, name: &str) -> Proc {
        Proc::spawn_with(addr, url, dir, name, &[])
    }

    /// [`Proc::spawn`] with `extra` arguments after the usual ones.
    pub fn spawn_with(addr: SocketAddr, url: &str, dir: &Path, name: &str, extra: &[&str]) -> Proc {
        Proc::spawn_env(addr, url, dir, name, extra, &[])
    }

    /// [`Proc::spawn_with`] with `envs` set in the process's environment.
    pub fn spawn_env(
        addr: SocketAddr,
        url: &str,
        dir: &Path,
        name: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Proc {
        let stderr = dir.join(format!("{name}.stderr"));
        let file = std::fs::File::create(&stderr).expect("stderr file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
        cmd.arg("serve")
            .args(["--listen", &addr.to_string()])
            .args(["--redis", url, "--advertise", &addr.to_string()])
            .args(["--shards", "2", "--pinning", "none", "--spin-us", "0"])
            .args(["--shard-capacity", "100000"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(file);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("PUNCTUAL_")) {
            cmd.env_remove(k);
        }
        // Every node of a test's cluster shares one secret (a flag in `extra` overrides it).
        cmd.env("PUNCTUAL_CLUSTER_SECRET", CLUSTER_SECRET);
        cmd.envs(envs.iter().copied());
        Proc {
            child: cmd.spawn().expect("spawn punctual"),
            stderr,
        }
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for `/healthz` 200 with every partition loaded (a node alone holds them all);
    /// panics with stderr after an exit or 30 s.
    pub fn wait_healthy(&mut self, addr: SocketAddr) {
        self.wait_partitions(addr, PARTITIONS as u64);
    }

    /// Waits for `/healthz` 200 with exactly `want` partitions loaded (a node's share); panics
    /// with stderr after an exit or 30 s.
    pub fn wait_partitions(&mut self, addr: SocketAddr, want: u64) {
        let give_up = Instant::now() + Duration::from_secs(30);
        let mut last = None;
        while Instant::now() < give_up {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("punctual exited ({status}): {}", self.stderr_text());
            }
            if let Ok(r) = try_request(addr, "GET", "/healthz", &[], b"") {
                last = r.json()["partitions"].as_u64();
                if r.status == 200 && last == Some(want) {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "no /healthz 200 with {want} partitions in 30 s (last: {last:?}): {}",
            self.stderr_text()
        );
    }

    /// Waits until the node at `addr` holds and has loaded exactly `share` partitions and sees
    /// `live` nodes, all in one `/metrics` read: a node still loading everything it took alone
    /// passes through `share` loaded on its way up, but holds more, and a node that holds its
    /// share may still route by an older view. Panics after 30 s.
    pub fn wait_settled(&mut self, addr: SocketAddr, share: u64, live: u64) {
        self.wait_partitions(addr, share);
        let give_up = Instant::now() + Duration::from_secs(30);
        let mut seen = [0; 3];
        while Instant::now() < give_up {
            let text = metrics(addr);
            seen = [
                "punctual_cluster_partitions_owned",
                "punctual_cluster_partitions_loaded",
                "punctual_cluster_live_nodes",
            ]
            .map(|name| sample(&text, name));
            if seen == [share, share, live] {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "{addr}: [owned, loaded, live] {seen:?}, not [{share}, {share}, {live}] after 30 s: {}",
            self.stderr_text()
        );
    }

    /// SIGTERM, and the exit status; panics if it has not exited 30 s later.
    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let give_up = Instant::now() + Duration::from_secs(30);
        while Instant::now() < give_up {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("still running 30 s after SIGTERM: {}", self.stderr_text());
    }

    /// The process's id, for signals a test sends itself (`SIGSTOP`, `SIGCONT`).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn sigkill(&mut self) {
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

/// What a timer was last acknowledged as: to fire with this version and deadline, or
/// cancelled before its deadline (never to fire).
#[derive(Clone, Debug)]
pub struct Promise {
    pub version: u64,
    pub fire_at_us: u64,
    pub cancelled: bool,
    /// Versions acknowledged before and then replaced before their deadline: never to fire.
    pub replaced: Vec<u64>,
}

/// The timers acknowledged so far, by (tenant, key).
#[derive(Default)]
pub struct Book {
    pub promises: BTreeMap<(String, String), Promise>,
}

impl Book {
    /// PUTs a timer; panics unless it is acknowledged (200 or 201).
    pub fn put(&mut self, addr: SocketAddr, tenant: &str, key: &str, delay_ms: u64, payload: &str) {
        if let Err(answer) = self.try_put(addr, tenant, key, delay_ms, payload) {
            panic!("PUT /v1/timers/{tenant}/{key}: {answer}");
        }
    }

    /// PUTs a timer and books it if it is acknowledged (200 or 201); else answers the status
    /// and body (0: no answer).
    pub fn try_put(
        &mut self,
        addr: SocketAddr,
        tenant: &str,
        key: &str,
        delay_ms: u64,
        payload: &str,
    ) -> Result<(), String> {
        let body = format!(r#"{{"delay_ms":{delay_ms},"payload":"{payload}"}}"#);
        let path = format!("/v1/timers/{tenant}/{key}");
        let r =
            try_request(addr, "PUT", &path, &[], body.as_bytes()).map_err(|e| format!("0 {e}"))?;
        if !matches!(r.status, 200 | 201) {
            return Err(format!("{} {}", r.status, String::from_utf8_lossy(&r.body)));
        }
        let j = r.json();
        let (Some(version), Some(fire_at_us)) = (j["version"].as_u64(), j["fire_at_us"].as_u64())
        else {
            panic!("PUT {path} answered {j}");
        };
        let id = (tenant.to_owned(), key.to_owned());
        let replaced = match self.promises.get(&id) {
            Some(old) if !old.cancelled => {
                let mut r = old.replaced.clone();
                r.push(old.version);
                r
            }
            _ => Vec::new(),
        };
        self.promises.insert(
            id,
            Promise {
                version,
                fire_at_us,
                cancelled: false,
                replaced,
            },
        );
        Ok(())
    }

    /// DELETEs a pending timer; panics unless it is acknowledged (204).
    pub fn cancel(&mut self, addr: SocketAddr, tenant: &str, key: &str) {
        let path = format!("/v1/timers/{tenant}/{key}");
        let r = try_request(addr, "DELETE", &path, &[], b"").expect("DELETE answered");
        assert_eq!(
            r.status,
            204,
            "DELETE {path}: {:?}",
            String::from_utf8_lossy(&r.body)
        );
        if let Some(p) = self.promises.get_mut(&(tenant.to_owned(), key.to_owned())) {
            p.cancelled = true;
        }
    }

    pub fn tenants(&self) -> BTreeSet<String> {
        self.promises.keys().map(|(t, _)| t.clone()).collect()
    }

    pub fn due(&self) -> usize {
        self.promises.values().filter(|p| !p.cancelled).count()
    }
}

/// Connections to the cluster's nodes by port, for reading what punctual wrote.
pub struct Reader<'a> {
    cluster: &'a RedisCluster,
    cons: HashMap<u16, redis::Connection>,
}

impl<'a> Reader<'a> {
    pub fn new(cluster: &'a RedisCluster) -> Reader<'a> {
        Reader {
            cluster,
            cons: HashMap::new(),
        }
    }

    /// A connection to the master that serves `slot` now.
    pub fn master(&mut self, slot: u16) -> &mut redis::Connection {
        let port = self.cluster.master_of(slot);
        self.cons.entry(port).or_insert_with(|| {
            redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                .expect("a connection to a master")
        })
    }

    /// Every entry of every tenant's fired stream, each read at its slot's master.
    pub fn streams(&mut self, tenants: &BTreeSet<String>) -> BTreeMap<String, Vec<StreamEntry>> {
        let mut out = BTreeMap::new();
        for t in tenants {
            let key = format!("punctual:fired:{{{t}}}");
            let entries = match try_read_stream(self.master(slot_of(key.as_bytes())), t) {
                Ok(e) => e,
                Err(_) => {
                    // A connection a reshard or a restart closed: read again on a new one.
                    self.cons.clear();
                    try_read_stream(self.master(slot_of(key.as_bytes())), t).expect("XRANGE")
                }
            };
            out.insert(t.clone(), entries);
        }
        out
    }

    /// The partitions whose lease key names `node` as its holder now.
    pub fn leases_of(&mut self, node: &str) -> Vec<u32> {
        let prefix = format!("{node}/");
        (0..PARTITIONS)
            .filter(|&p| {
                let v: Option<String> = redis::cmd("GET")
                    .arg(layout::lease_key(p))
                    .query(self.master(partition_slot(p)))
                    .expect("GET");
                v.is_some_and(|v| v.starts_with(&prefix))
            })
            .collect()
    }

    /// Fields left in all 1,024 partitions' pending hashes, each asked at its slot's master.
    pub fn pending_records(&mut self) -> u64 {
        (0..PARTITIONS)
            .map(|p| {
                let n: u64 = redis::cmd("HLEN")
                    .arg(layout::timers_key(p))
                    .query(self.master(partition_slot(p)))
                    .expect("HLEN");
                n
            })
            .sum()
    }
}

pub fn count(streams: &BTreeMap<String, Vec<StreamEntry>>) -> usize {
    streams.values().map(Vec::len).sum()
}

/// Every promise kept: each live timer has an entry with its acknowledged version and
/// deadline, fired no earlier; nothing else has one. Returns the duplicate entries (the same
/// version twice: at least once across a SIGKILL).
pub fn check(book: &Book, streams: &BTreeMap<String, Vec<StreamEntry>>) -> usize {
    let mut seen: HashMap<(String, String), Vec<&StreamEntry>> = HashMap::new();
    for (t, entries) in streams {
        for e in entries {
            seen.entry((t.clone(), e.key.clone())).or_default().push(e);
        }
    }
    let mut duplicates = 0;
    for (id, p) in &book.promises {
        let got = seen.remove(id).unwrap_or_default();
        if p.cancelled {
            // A cancel acknowledged before the deadline: nothing fires.
            assert!(got.is_empty(), "{id:?} was cancelled yet fired: {got:?}");
            continue;
        }
        assert!(!got.is_empty(), "{id:?} acknowledged as {p:?} never fired");
        for e in &got {
            assert_eq!(
                (e.version, e.fire_at_us),
                (p.version, p.fire_at_us),
                "{id:?}: an entry of another version or deadline (replaced: {:?})",
                p.replaced
            );
            assert!(e.fired_at_us >= e.fire_at_us, "{id:?} fired early: {e:?}");
        }
        duplicates += got.len() - 1;
    }
    assert!(
        seen.is_empty(),
        "entries of timers never scheduled: {seen:?}"
    );
    duplicates
}

/// Polls until every live timer's entry is there and no record is left pending, or 40 s.
pub fn wait_all_fired(reader: &mut Reader<'_>, book: &Book) -> BTreeMap<String, Vec<StreamEntry>> {
    let give_up = Instant::now() + Duration::from_secs(40);
    let tenants = book.tenants();
    loop {
        let streams = reader.streams(&tenants);
        let fired: BTreeSet<(String, String)> = streams
            .iter()
            .flat_map(|(t, es)| es.iter().map(move |e| (t.clone(), e.key.clone())))
            .collect();
        let all = book
            .promises
            .iter()
            .filter(|(_, p)| !p.cancelled)
            .all(|(id, _)| fired.contains(id));
        if (all && reader.pending_records() == 0) || Instant::now() > give_up {
            return streams;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A configuration file in `dir` that opens every tenant and allows callbacks under
/// `allow` (a receiver's base URL), with `more` top-level lines; the arguments that give it
/// to `serve`.
pub fn open_config(dir: &Path, allow: &str, more: &str) -> [String; 2] {
    let config = dir.join("tenants.toml");
    std::fs::write(
        &config,
        format!("{more}open_tenants = true\ncallback_allow = [{allow:?}]\n"),
    )
    .expect("config");
    ["--config".to_owned(), config.to_string_lossy().into_owned()]
}

/// A Redis Cluster started for the test, a temporary directory, and in it [`open_config`]'s
/// file (its arguments for `serve`).
pub fn cluster_with_config(
    allow: &str,
    more: &str,
) -> (RedisCluster, tempfile::TempDir, [String; 2]) {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = open_config(dir.path(), allow, more);
    (cluster, dir, config)
}

/// PUTs a webhook timer of `tenant` calling `url`, due in `delay_ms`; its answer's body.
/// Panics unless answered 201.
pub fn put_hook(
    at: SocketAddr,
    tenant: &str,
    key: &str,
    delay_ms: u64,
    url: &str,
) -> serde_json::Value {
    let body = format!(r#"{{"delay_ms":{delay_ms},"callback":{{"url":"{url}"}}}}"#);
    let path = format!("/v1/timers/{tenant}/{key}");
    let r = try_request(at, "PUT", &path, &[], body.as_bytes()).expect("PUT answered");
    assert_eq!(r.status, 201, "PUT {path}: {:?}", r.json());
    r.json()
}

/// `/metrics` text.
pub fn metrics(addr: SocketAddr) -> String {
    try_request(addr, "GET", "/metrics", &[], b"")
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .unwrap_or_default()
}

/// An unlabelled sample of `/metrics` text (0 when absent).
pub fn sample(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// The sum over shards of a per-shard counter in `/metrics`.
pub fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.starts_with(&format!("{name}_total{{")) || l.starts_with(&format!("{name}{{"))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The headers of a request forwarded by the node `from`, signed with `secret` at `t_ms`
/// (`punctual::api::forward_sign`), for a caller that sent `auth` (empty: none).
pub fn forwarded(
    secret: &str,
    from: &str,
    t_ms: u64,
    (method, path, auth, body): (&str, &str, &str, &[u8]),
) -> [(&'static str, String); 2] {
    use punctual::api::forward_sign::{signature, Head, FORWARDED, SIGNATURE};
    let head = Head {
        method,
        path,
        node: from.as_bytes(),
        auth: auth.as_bytes(),
        t_ms,
        nonce: &punctual::api::forward_sign::nonce(),
    };
    let s = signature(secret.as_bytes(), &head, body);
    [(FORWARDED, from.to_owned()), (SIGNATURE, s)]
}

/// A tenants file in `dir` that gives the tenant `shop` the token `token`: its path.
pub fn shop_config(dir: &Path, token: &str) -> String {
    let config = dir.join("tenants.toml");
    std::fs::write(&config, format!("[tenants.shop]\ntoken = \"{token}\"\n")).expect("config");
    config.to_string_lossy().into_owned()
}

/// Lists `id` in the cluster's membership as alive for an hour, with the record `json`, as a
/// hand with write access to Redis could (and moves the counter the nodes watch).
pub fn list_member(cluster: &RedisCluster, id: &str, json: &str) {
    let mut reader = Reader::new(cluster);
    let con = reader.master(slot_of(layout::MEMBERS_KEY.as_bytes()));
    let (secs, _): (u64, u64) = redis::cmd("TIME").query(con).expect("TIME");
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(layout::MEMBERS_KEY)
        .arg((secs + 3_600) * 1_000)
        .arg(id)
        .ignore()
        .cmd("HSET")
        .arg(layout::MEMBER_RECORDS_KEY)
        .arg(id)
        .arg(json)
        .ignore()
        .cmd("INCR")
        .arg(layout::MEMBERS_VERSION_KEY)
        .ignore()
        .query(con)
        .expect("the record written");
}

/// `PUT /v1/timers/shop/k-{i}` (ten minutes ahead) at `addr` for `i` in `0..n`, with `auth`:
/// each key and its answer.
pub fn put_keys(addr: SocketAddr, auth: &str, n: usize) -> Vec<(String, super::api_support::Resp)> {
    (0..n)
        .map(|i| {
            let key = format!("k-{i}");
            let path = format!("/v1/timers/shop/{key}");
            let body = br#"{"delay_ms":600000}"#;
            let r = try_request(addr, "PUT", &path, &[("authorization", auth)], body);
            (key, r.expect("PUT answered"))
        })
        .collect()
}

/// A Redis Cluster and one healthy node on it that serves the tenant `shop` (token `token`),
/// `extra` arguments after its tenants file: the cluster, the node's folder, address and
/// process.
pub fn shop_node(
    token: &str,
    extra: &[&str],
) -> (RedisCluster, tempfile::TempDir, SocketAddr, Proc) {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = shop_config(dir.path(), token);
    let a = node_addr();
    let args: Vec<&str> = ["--config", config.as_str()]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let mut node = Proc::spawn_with(a, &cluster.url(), dir.path(), "a", &args);
    node.wait_healthy(a);
    (cluster, dir, a, node)
}
