//! The Redis Cluster client against a real cluster (three masters with a replica each,
//! started and killed by each test): slots as the server computes them, routing, `ASK` and
//! `MOVED`, a live `redis-cli --cluster reshard` under load, and a master SIGKILLed under
//! load. The rule under test: every write is answered and lands exactly once. Nothing asserts
//! a duration; every wait is bounded.

#[path = "support/redis_cluster.rs"]
mod redis_cluster;

use punctual::store::redis::cluster::slot::{partition_slot, slot_of};
use punctual::store::redis::cluster::{
    parse_url, ClusterClient, ClusterConfig, ClusterError, Routed, Sent,
};
use punctual::store::redis::layout;
use redis::Value;
use redis_cluster::{on_executor, RedisCluster};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

fn config(cluster: &RedisCluster) -> ClusterConfig {
    let mut cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    // Room for a failover and a replica's resync on a busy machine.
    cfg.retry_for = Duration::from_secs(40);
    cfg
}

fn bulk(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// `GET` of every key, through a fresh client.
fn read_all(cfg: ClusterConfig, keys: Vec<String>) -> Vec<Option<String>> {
    on_executor(async move {
        let mut client = ClusterClient::connect(cfg).await.expect("a slot map");
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(1_000) {
            let gets: Vec<Routed> = chunk
                .iter()
                .map(|k| Routed::new(k, redis::cmd("GET").arg(k).clone()))
                .collect();
            let replies = client.pipeline(&gets).await.expect("every GET answered");
            out.extend(replies.iter().map(bulk));
        }
        out
    })
}

#[test]
fn slots_match_the_server_and_each_write_lands_on_its_slot_master() {
    let cluster = RedisCluster::start();
    let seed = cluster.node(cluster.masters()[0]);
    for p in 0..punctual::partition::PARTITIONS {
        let key = layout::timers_key(p);
        let theirs: u16 = seed
            .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(&key))
            .expect("CLUSTER KEYSLOT");
        assert_eq!(partition_slot(p), theirs, "{key}");
    }
    for key in ["plain", "a{b}c", "a{}b", "{{x}}", "{", "}{", "żółw{ł}"] {
        let theirs: u16 = seed
            .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .expect("CLUSTER KEYSLOT");
        assert_eq!(slot_of(key.as_bytes()), theirs, "{key}");
    }

    let keys: Vec<String> = (0..300).map(|i| format!("routed:{i}")).collect();
    let stats = on_executor({
        let (cfg, keys) = (config(&cluster), keys.clone());
        async move {
            let mut client = ClusterClient::connect(cfg).await.expect("a slot map");
            assert_eq!(client.map().served(), 16_384);
            let sets: Vec<Routed> = keys
                .iter()
                .map(|k| Routed::new(k, redis::cmd("SET").arg(k).arg(k).clone()))
                .collect();
            let replies = client.pipeline(&sets).await.expect("every SET answered");
            assert!(replies.iter().all(|r| *r == Value::Okay), "{replies:?}");
            client.stats()
        }
    });
    assert_eq!(stats.moved + stats.asked, 0, "a fresh map routes directly");
    for k in &keys {
        // Asked at the master the server names for the key's slot, without redirects.
        let master = cluster.node(cluster.master_of(slot_of(k.as_bytes())));
        let v: Option<String> = master.query(redis::cmd("GET").arg(k)).expect("GET");
        assert_eq!(v.as_deref(), Some(k.as_str()));
    }
}

#[test]
fn ask_is_followed_once_and_moved_updates_the_map() {
    let cluster = RedisCluster::start();
    let key = "asked:{tag}";
    let slot = slot_of(key.as_bytes());
    let from = cluster.master_of(slot);
    let to = *cluster
        .masters()
        .iter()
        .find(|&&m| m != from)
        .expect("another master");
    let (from_id, to_id) = (cluster.node(from).id(), cluster.node(to).id());
    let setslot = |port: u16, state: &str, id: &str| {
        let _: () = cluster
            .node(port)
            .query(
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id),
            )
            .unwrap_or_else(|e| panic!("SETSLOT {slot} {state} on :{port}: {e}"));
    };
    // The slot half-migrated: the source answers ASK for a key it does not hold.
    setslot(to, "IMPORTING", &from_id);
    setslot(from, "MIGRATING", &to_id);

    let cfg = config(&cluster);
    on_executor(async {
        let mut client = ClusterClient::connect(cfg).await.expect("a slot map");
        let incr = || Routed::new(key, redis::cmd("INCR").arg(key).clone());
        let first = client.query(incr()).await.expect("INCR answered");
        assert_eq!(first, Value::Int(1));
        let stats = client.stats();
        assert_eq!((stats.asked, stats.moved), (1, 0), "{stats:?}");
        assert_eq!(
            client.map().master_of(slot).map(|m| m.port),
            Some(from),
            "ASK leaves the map as it is"
        );
        let held = asking_get(to, key);
        assert_eq!(held, Some(1), "the write went to the importing node");

        // The migration completes; this client's map still names the source, which now
        // answers MOVED.
        for port in [to, from] {
            setslot(port, "NODE", &to_id);
        }
        let second = client.query(incr()).await.expect("INCR answered");
        assert_eq!(second, Value::Int(2), "each INCR applied exactly once");
        let stats = client.stats();
        assert_eq!((stats.asked, stats.moved), (1, 1), "{stats:?}");
        assert_eq!(client.map().master_of(slot).map(|m| m.port), Some(to));
    });
}

/// `GET key` at the node on `port` after `ASKING` on the same connection (a node importing
/// the key's slot answers only so); asked again after an I/O error, as the harness does.
fn asking_get(port: u16, key: &str) -> Option<i64> {
    let once = || -> redis::RedisResult<Option<i64>> {
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
            .get_connection_with_timeout(Duration::from_secs(2))?;
        let _: () = redis::cmd("ASKING").query(&mut con)?;
        redis::cmd("GET").arg(key).query(&mut con)
    };
    let mut tries = 1;
    loop {
        match once() {
            Err(e) if e.is_io_error() && tries < 3 => tries += 1,
            other => return other.expect("GET after ASKING"),
        }
    }
}

/// What a writer thread did: keys written (each acknowledged), and the client's counters.
struct Written {
    keys: Vec<String>,
    stats: punctual::store::redis::cluster::ClusterStats,
}

/// Writes batches of `batch` keys (`make(key_index)` builds each write and names its key) on
/// its own executor, counting batches in `batches`, until `stop` is set and `after` more
/// batches were written. Every reply must satisfy `ok`.
fn writer(
    cfg: ClusterConfig,
    batch: usize,
    after: u64,
    make: fn(usize) -> (String, redis::Cmd),
    ok: fn(&Value) -> bool,
    batches: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> mpsc::Receiver<Result<Written, String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let result = on_executor(async move {
            let mut client = ClusterClient::connect(cfg)
                .await
                .map_err(|e| e.to_string())?;
            let mut keys = Vec::new();
            let mut stopped_at = None;
            loop {
                let done = batches.load(Ordering::SeqCst);
                if stopped_at.is_none() && stop.load(Ordering::SeqCst) {
                    stopped_at = Some(done);
                }
                if stopped_at.is_some_and(|at| done >= at + after) {
                    break;
                }
                let writes: Vec<(String, redis::Cmd)> =
                    (keys.len()..keys.len() + batch).map(make).collect();
                let routed: Vec<Routed> = writes
                    .iter()
                    .map(|(k, c)| Routed::new(k, c.clone()))
                    .collect();
                let replies = client
                    .pipeline(&routed)
                    .await
                    .map_err(|e| format!("after {} keys: {e}", keys.len()))?;
                if let Some(bad) = replies.iter().find(|r| !ok(r)) {
                    return Err(format!("after {} keys, a reply {bad:?}", keys.len()));
                }
                keys.extend(writes.into_iter().map(|(k, _)| k));
                batches.fetch_add(1, Ordering::SeqCst);
                glommio::timer::sleep(Duration::from_millis(2)).await;
            }
            Ok(Written {
                keys,
                stats: client.stats(),
            })
        });
        let _ = tx.send(result);
    });
    rx
}

/// Waits (bounded) until the writer has done `n` batches.
fn wait_batches(batches: &AtomicU64, n: u64, what: &str) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while batches.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < give_up, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn writes_land_exactly_once_while_slots_are_resharded_under_load() {
    let cluster = RedisCluster::start();
    let masters = cluster.masters();
    let (batches, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    // INCR is not idempotent: a write applied twice reads 2, a lost one reads nothing.
    let results = writer(
        config(&cluster),
        100,
        20,
        |i| {
            let k = format!("incr:{i}");
            (k.clone(), redis::cmd("INCR").arg(k).clone())
        },
        |r| *r == Value::Int(1),
        batches.clone(),
        stop.clone(),
    );
    wait_batches(&batches, 5, "the writer to start");
    let before = batches.load(Ordering::SeqCst);
    let mut reshard = cluster.reshard(masters[0], masters[1], 1_000);
    reshard.finish();
    let during = batches.load(Ordering::SeqCst) - before;
    stop.store(true, Ordering::SeqCst);
    let written = results
        .recv_timeout(Duration::from_secs(90))
        .expect("the writer ends")
        .unwrap_or_else(|e| panic!("the writer failed: {e}\n{}", cluster.logs()));
    assert!(during > 0, "no batch was written while the reshard ran");
    assert!(
        written.stats.moved > 0,
        "no write met a moved slot: {:?}",
        written.stats
    );
    let values = read_all(config(&cluster), written.keys.clone());
    let wrong: Vec<(&String, &Option<String>)> = written
        .keys
        .iter()
        .zip(&values)
        .filter(|(_, v)| v.as_deref() != Some("1"))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} keys not written exactly once, e.g. {:?}; {:?}",
        wrong.len(),
        written.keys.len(),
        &wrong[..wrong.len().min(5)],
        written.stats
    );
    eprintln!(
        "{} keys, {} batches during the reshard, {:?}",
        written.keys.len(),
        during,
        written.stats
    );
}

#[test]
fn writes_confirmed_by_a_replica_survive_a_master_killed_and_its_replica_promoted() {
    let mut cluster = RedisCluster::start();
    let victim = cluster.masters()[0];
    let (batches, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let mut cfg = config(&cluster);
    // Redis replicates asynchronously: only a write a replica confirmed survives the master.
    cfg.wait_replicas = 1;
    // SET is idempotent: a group written again after a lost connection reads the same.
    let results = writer(
        cfg,
        50,
        10,
        |i| {
            let k = format!("set:{i}");
            (k.clone(), redis::cmd("SET").arg(&k).arg(i).clone())
        },
        |r| *r == Value::Okay,
        batches.clone(),
        stop.clone(),
    );
    wait_batches(&batches, 5, "the writer to start");
    let promoted = cluster.kill_master(victim);
    // Back as a supervisor would start it: it rejoins as the promoted node's replica, so that
    // writes can be confirmed again.
    cluster.restart(victim);
    let now = batches.load(Ordering::SeqCst);
    wait_batches(&batches, now + 5, "writes after the failover");
    stop.store(true, Ordering::SeqCst);
    let written = results
        .recv_timeout(Duration::from_secs(90))
        .expect("the writer ends")
        .unwrap_or_else(|e| panic!("the writer failed: {e}\n{}", cluster.logs()));
    assert!(
        written.stats.lost_connections > 0 && written.stats.refreshes > 1,
        "the writer never met the dead master: {:?}",
        written.stats
    );
    let values = read_all(config(&cluster), written.keys.clone());
    for (i, (k, v)) in written.keys.iter().zip(&values).enumerate() {
        assert_eq!(
            v.as_deref(),
            Some(i.to_string().as_str()),
            "{k} lost (promoted :{promoted}); {:?}",
            written.stats
        );
    }
    eprintln!("{} keys, {:?}", written.keys.len(), written.stats);
}

/// A fake cluster node on a free port: its `CLUSTER SLOTS` names `owner` as the master of
/// every slot (`CLUSTER SHARDS` is refused, as an old server would), and every other command
/// is answered `MOVED` to `to()`. Counts the commands it was sent.
fn bouncing_node(
    owner: Arc<AtomicU64>,
    to: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
) -> std::net::TcpListener {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let accept = listener.try_clone().expect("a listener");
    std::thread::spawn(move || {
        for stream in accept.incoming() {
            let Ok(stream) = stream else { return };
            let (owner, to, sent) = (owner.clone(), to.clone(), sent.clone());
            std::thread::spawn(move || answer_bouncing(stream, &owner, &to, &sent));
        }
    });
    listener
}

fn answer_bouncing(
    stream: std::net::TcpStream,
    owner: &AtomicU64,
    to: &AtomicU64,
    sent: &AtomicU64,
) {
    use std::io::Write;
    let mut writer = stream.try_clone().expect("a stream");
    let mut reader = std::io::BufReader::new(stream);
    let mut parser = redis::Parser::new();
    while let Ok(Value::Array(words)) = parser.parse_value(&mut reader) {
        sent.fetch_add(1, Ordering::SeqCst);
        let word = |i: usize| {
            words
                .get(i)
                .and_then(bulk)
                .unwrap_or_default()
                .to_uppercase()
        };
        let reply = match (word(0).as_str(), word(1).as_str()) {
            ("CLUSTER", "SHARDS") => "-ERR unknown subcommand\r\n".to_string(),
            ("CLUSTER", "SLOTS") => {
                let port = owner.load(Ordering::SeqCst);
                format!("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n")
            }
            _ => format!("-MOVED 7 127.0.0.1:{}\r\n", to.load(Ordering::SeqCst)),
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

#[test]
fn nodes_that_bounce_a_slot_between_them_make_a_call_give_up_not_spin() {
    let (port_a, port_b) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let sent = Arc::new(AtomicU64::new(0));
    // a says b serves the slot, b says a does, and each names a as the owner of every slot.
    let a = bouncing_node(port_a.clone(), port_b.clone(), sent.clone());
    let b = bouncing_node(port_a.clone(), port_a.clone(), sent.clone());
    let port = |l: &std::net::TcpListener| u64::from(l.local_addr().expect("bound").port());
    port_a.store(port(&a), Ordering::SeqCst);
    port_b.store(port(&b), Ordering::SeqCst);
    let mut cfg = parse_url(&format!("redis+cluster://127.0.0.1:{}/", port(&a))).expect("URL");
    cfg.retry_for = Duration::from_secs(1);
    let err = on_executor(async move {
        let mut client = ClusterClient::connect(cfg).await.expect("a slot map");
        let set = Routed::new("k", redis::cmd("SET").arg("k").arg(1).clone());
        client.query(set).await.expect_err("no node ever answers")
    });
    let text = err.to_string();
    assert!(text.contains("1 of 1 commands unanswered"), "{text}");
    assert!(text.contains("MOVED 7"), "the last reason is named: {text}");
    // Each round after the second waits 10 ms, doubling to 500 ms, and reads the map again:
    // within a second that is a handful of rounds. A tight loop would send thousands.
    let total = sent.load(Ordering::SeqCst);
    assert!(total < 200, "{total} commands sent in a second: {text}");
}

/// `XLEN` of each of `keys`, through a client that waits for no replica.
async fn lengths(cfg: &ClusterConfig, keys: &[String]) -> Vec<i64> {
    let plain = ClusterConfig {
        wait_replicas: 0,
        ..cfg.clone()
    };
    let mut client = ClusterClient::connect(plain).await.expect("a slot map");
    let xlens: Vec<Routed> = keys
        .iter()
        .map(|k| Routed::new(k, redis::cmd("XLEN").arg(k).clone()))
        .collect();
    let replies = client.pipeline(&xlens).await.expect("every XLEN answered");
    replies
        .iter()
        .map(|v| match v {
            Value::Int(n) => *n,
            other => panic!("XLEN answered {other:?}"),
        })
        .collect()
}

/// A write that its master applied but too few replicas confirmed (`WAIT`) is not written
/// again: an `XADD` is not idempotent, and while a replica is down or resynchronising each
/// round of the call used to add one more entry. It is confirmed by a later `WAIT` on the
/// connection it went by, within the call and across calls (`pipeline_resume`, as the store
/// sends a batch again after a call gave up).
#[test]
fn a_write_applied_but_not_yet_confirmed_is_confirmed_later_never_written_twice() {
    let mut cluster = RedisCluster::start();
    cluster.kill_replicas();
    let mut cfg = config(&cluster);
    cfg.wait_replicas = 1;
    // Each master's `WAIT` holds a round for half the I/O timeout (1 s), one master after
    // another: 4 s is room for a second round.
    cfg.retry_for = Duration::from_secs(4);
    // Streams in several slots, on every master.
    let keys: Vec<String> = (0..9).map(|i| format!("punctual:fired:{{t{i}}}")).collect();
    let xadds: Vec<Routed> = keys
        .iter()
        .map(|k| {
            let xadd = redis::cmd("XADD")
                .arg(k)
                .arg("*")
                .arg("key")
                .arg("a")
                .clone();
            Routed::new(k, xadd)
        })
        .collect();
    on_executor(async {
        let mut client = ClusterClient::connect(cfg.clone())
            .await
            .expect("a slot map");
        // No replica to confirm: every master applies its XADDs, and the call goes on asking
        // for `retry_for`, then gives up.
        let gave_up = client.pipeline(&xadds).await;
        assert!(
            matches!(gave_up, Err(ClusterError::GaveUp { .. })),
            "nothing confirmed: {gave_up:?}"
        );
        assert_eq!(
            lengths(&cfg, &keys).await,
            vec![1; keys.len()],
            "each XADD applied once during the call"
        );

        // Across calls: the second call confirms what the first left landed, once the
        // replicas are back, and adds nothing.
        let mut state = vec![Sent::Unsent; xadds.len()];
        let first = client.pipeline_resume(&xadds, &mut state).await;
        assert!(
            matches!(first, Err(ClusterError::GaveUp { .. })),
            "{first:?}"
        );
        assert!(
            state.iter().all(|s| matches!(s, Sent::Landed { .. })),
            "applied, not confirmed: {state:?}"
        );
        for n in cluster.nodes.iter_mut().filter(|n| !n.running()) {
            n.start();
        }
        cluster.wait_healthy("the replicas back and in sync");
        client
            .pipeline_resume(&xadds, &mut state)
            .await
            .unwrap_or_else(|e| panic!("confirmed once the replicas are back: {e}"));
        assert!(
            state
                .iter()
                .all(|s| matches!(s, Sent::Answered(Value::BulkString(_)))),
            "each answered with its entry's id: {state:?}"
        );
        assert_eq!(
            lengths(&cfg, &keys).await,
            vec![2; keys.len()],
            "the second batch's XADDs applied once each, the first's not again"
        );
    });
}
