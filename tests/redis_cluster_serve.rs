//! `punctual serve --redis redis+cluster://…` end to end: the real binary over real TCP, its
//! store on a real Redis Cluster (three masters with a replica each). Timers are scheduled,
//! rescheduled and cancelled over HTTP across many tenants and partitions; the fired streams
//! are read back from the masters that serve them. The rule under test: every acknowledged
//! timer fires with the version and deadline it was acknowledged with, never before its
//! deadline, a cancelled or replaced one never does, through a SIGKILL of the process and a
//! restart on the same port, and through a live `redis-cli --cluster reshard`. Nothing asserts
//! a duration; every wait is bounded.

mod api_support;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::{free_port, try_request};
use punctual::partition::{partition_of, PARTITIONS};
use punctual::store::redis::cluster::slot::{partition_slot, slot_of};
use punctual::store::redis::layout;
use redis_cluster::RedisCluster;
use redis_server::{try_read_stream, StreamEntry};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `punctual serve` process on a Redis Cluster, its stderr in a file.
struct Proc {
    child: Child,
    stderr: PathBuf,
}

impl Proc {
    fn spawn(addr: SocketAddr, url: &str, dir: &Path, name: &str) -> Proc {
        let stderr = dir.join(format!("{name}.stderr"));
        let file = std::fs::File::create(&stderr).expect("stderr file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
        cmd.arg("serve")
            .args(["--listen", &addr.to_string()])
            .args(["--redis", url, "--advertise", &addr.to_string()])
            .args(["--shards", "2", "--pinning", "none", "--spin-us", "0"])
            .args(["--shard-capacity", "100000"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(file);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("PUNCTUAL_")) {
            cmd.env_remove(k);
        }
        Proc {
            child: cmd.spawn().expect("spawn punctual"),
            stderr,
        }
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for `/healthz` 200 (the store recovered every partition); panics with stderr
    /// after an exit or 30 s.
    fn wait_healthy(&mut self, addr: SocketAddr) {
        let give_up = Instant::now() + Duration::from_secs(30);
        while Instant::now() < give_up {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("punctual exited ({status}): {}", self.stderr_text());
            }
            if try_request(addr, "GET", "/healthz", &[], b"").is_ok_and(|r| r.status == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no /healthz 200 in 30 s: {}", self.stderr_text());
    }

    fn sigkill(&mut self) {
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
struct Promise {
    version: u64,
    fire_at_us: u64,
    cancelled: bool,
    /// Versions acknowledged before and then replaced before their deadline: never to fire.
    replaced: Vec<u64>,
}

/// The timers acknowledged so far, by (tenant, key).
#[derive(Default)]
struct Book {
    promises: BTreeMap<(String, String), Promise>,
}

impl Book {
    /// PUTs a timer; panics unless it is acknowledged (200 or 201).
    fn put(&mut self, addr: SocketAddr, tenant: &str, key: &str, delay_ms: u64, payload: &str) {
        let body = format!(r#"{{"delay_ms":{delay_ms},"payload":"{payload}"}}"#);
        let path = format!("/v1/timers/{tenant}/{key}");
        let r = try_request(addr, "PUT", &path, &[], body.as_bytes()).expect("PUT answered");
        assert!(
            matches!(r.status, 200 | 201),
            "PUT {path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
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
    }

    /// DELETEs a pending timer; panics unless it is acknowledged (204).
    fn cancel(&mut self, addr: SocketAddr, tenant: &str, key: &str) {
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

    fn tenants(&self) -> BTreeSet<String> {
        self.promises.keys().map(|(t, _)| t.clone()).collect()
    }

    fn due(&self) -> usize {
        self.promises.values().filter(|p| !p.cancelled).count()
    }
}

/// Connections to the cluster's nodes by port, for reading what punctual wrote.
struct Reader<'a> {
    cluster: &'a RedisCluster,
    cons: HashMap<u16, redis::Connection>,
}

impl<'a> Reader<'a> {
    fn new(cluster: &'a RedisCluster) -> Reader<'a> {
        Reader {
            cluster,
            cons: HashMap::new(),
        }
    }

    /// A connection to the master that serves `slot` now.
    fn master(&mut self, slot: u16) -> &mut redis::Connection {
        let port = self.cluster.master_of(slot);
        self.cons.entry(port).or_insert_with(|| {
            redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                .expect("a connection to a master")
        })
    }

    /// Every entry of every tenant's fired stream, each read at its slot's master.
    fn streams(&mut self, tenants: &BTreeSet<String>) -> BTreeMap<String, Vec<StreamEntry>> {
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

    /// Fields left in all 1,024 partitions' pending hashes, each asked at its slot's master.
    fn pending_records(&mut self) -> u64 {
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

fn count(streams: &BTreeMap<String, Vec<StreamEntry>>) -> usize {
    streams.values().map(Vec::len).sum()
}

/// Every promise kept: each live timer has an entry with its acknowledged version and
/// deadline, fired no earlier; nothing else has one. Returns the duplicate entries (the same
/// version twice: at least once across a SIGKILL).
fn check(book: &Book, streams: &BTreeMap<String, Vec<StreamEntry>>) -> usize {
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
fn wait_all_fired(reader: &mut Reader<'_>, book: &Book) -> BTreeMap<String, Vec<StreamEntry>> {
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

#[test]
fn acknowledged_timers_fire_once_as_promised_through_a_sigkill_and_a_restart() {
    let cluster = RedisCluster::start();
    let url = cluster.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut p = Proc::spawn(addr, &url, dir.path(), "first");
    p.wait_healthy(addr);
    let mut reader = Reader::new(&cluster);

    // 12 tenants × 60 keys, deadlines 1.5–4.5 s out; every 5th rescheduled 0.5 s later with a
    // new payload, every 7th cancelled.
    let mut book = Book::default();
    for t in 0..12u64 {
        let tenant = format!("shop{t}");
        for i in 0..60u64 {
            let key = format!("order-{i}");
            let delay = 1_500 + (i * 37 + t * 101) % 3_000;
            book.put(addr, &tenant, &key, delay, "v1");
            if i % 5 == 0 {
                book.put(addr, &tenant, &key, delay + 500, "v2");
            }
            if i % 7 == 0 {
                book.cancel(addr, &tenant, &key);
            }
        }
    }
    let partitions: BTreeSet<u32> = book
        .promises
        .keys()
        .map(|(t, k)| partition_of(t, k))
        .collect();
    assert!(partitions.len() > 300, "{} partitions", partitions.len());
    // A pending record lies at the master of its partition's slot.
    let (id, promise) = book
        .promises
        .iter()
        .rev()
        .find(|(_, p)| !p.cancelled)
        .expect("a live timer");
    let part = partition_of(&id.0, &id.1);
    let record: Option<String> = redis::cmd("HGET")
        .arg(layout::timers_key(part))
        .arg(layout::field(&id.0, &id.1))
        .query(reader.master(partition_slot(part)))
        .expect("HGET");
    let record = record.unwrap_or_default();
    assert!(
        record.starts_with(&format!("{} {} ", promise.version, promise.fire_at_us)),
        "{id:?} at its slot's master: {record:?}"
    );

    // SIGKILL once the first timers fired and while others are pending; restart at once on
    // the same port.
    let give_up = Instant::now() + Duration::from_secs(20);
    let tenants = book.tenants();
    let fired_at_kill = loop {
        let n = count(&reader.streams(&tenants));
        if n > 0 || Instant::now() > give_up {
            break n;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    p.sigkill();
    assert!(
        fired_at_kill > 0 && fired_at_kill < book.due(),
        "killed with {fired_at_kill} of {} fired",
        book.due()
    );
    let mut p = Proc::spawn(addr, &url, dir.path(), "second");
    p.wait_healthy(addr);

    // The restarted process takes new timers, cancels and replacements too.
    for i in 0..60u64 {
        let key = format!("after-{i}");
        book.put(addr, "late", &key, 200 + i * 13, "v1");
        if i % 4 == 0 {
            book.put(addr, "late", &key, 400 + i * 13, "v2");
        }
        if i % 9 == 0 {
            book.cancel(addr, "late", &key);
        }
    }

    let streams = wait_all_fired(&mut reader, &book);
    let duplicates = check(&book, &streams);
    assert_eq!(reader.pending_records(), 0, "records left after every fire");
    // At least once: a fire cut between its stream entry and its record's removal repeats,
    // with the same version (checked above).
    eprintln!(
        "{} timers fired ({} fired before the SIGKILL), {} cancelled, {duplicates} repeated; stderr:\n{}",
        book.due(),
        fired_at_kill,
        book.promises.len() - book.due(),
        p.stderr_text()
    );
}

/// `/metrics` text.
fn metrics(addr: SocketAddr) -> String {
    try_request(addr, "GET", "/metrics", &[], b"")
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .unwrap_or_default()
}

/// The sum over shards of a per-shard counter in `/metrics`.
fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.starts_with(&format!("{name}_total{{")) || l.starts_with(&format!("{name}{{"))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[test]
fn timers_scheduled_while_slots_are_resharded_all_fire_as_promised() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut p = Proc::spawn(addr, &cluster.url(), dir.path(), "reshard");
    p.wait_healthy(addr);
    let masters = cluster.masters();
    let mut reshard = cluster.reshard(masters[0], masters[1], 1_000);
    let mut book = Book::default();
    let mut i = 0u64;
    let started = Instant::now();
    // Timers on every partition while the slots move (and at least 600 of them).
    while !reshard.done() || i < 600 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the reshard outlasted the test"
        );
        let tenant = format!("t{}", i % 16);
        let key = format!("k{i}");
        if i % 11 == 0 {
            // Far enough out that the cancel comes first, however slow a write is meanwhile.
            book.put(addr, &tenant, &key, 60_000, "v1");
            book.cancel(addr, &tenant, &key);
        } else {
            book.put(addr, &tenant, &key, 100 + (i * 53) % 1_500, "v1");
        }
        i += 1;
    }
    reshard.finish();
    let mut reader = Reader::new(&cluster);
    let streams = wait_all_fired(&mut reader, &book);
    let duplicates = check(&book, &streams);
    assert_eq!(duplicates, 0, "no crash, so no repeat");
    assert_eq!(reader.pending_records(), 0, "records left after every fire");
    let text = metrics(addr);
    let redirects = counter(&text, "punctual_store_cluster_moved")
        + counter(&text, "punctual_store_cluster_asked");
    assert!(
        redirects > 0,
        "writes to moving slots were redirected:\n{}",
        text.lines()
            .filter(|l| l.contains("cluster"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "{} timers while 1,000 slots moved; {redirects} redirects followed",
        book.due()
    );
}
