//! A lease that lapses: acquired again under a new epoch, and a fenced write that drops its
//! partition at once.

use super::*;

/// A lease whose local deadline passes before its renewal (here every round: a 3 s lease in
/// Redis with a 0.4 s local deadline, renewed each second) is never renewed under its epoch:
/// it is released and acquired again under a new one, so that a write queued under the lapsed
/// epoch is fenced instead of landing behind the partition's fresh load.
#[test]
fn a_lease_that_lapses_locally_is_acquired_again_under_a_new_epoch_not_renewed() {
    let cluster = RedisCluster::start();
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    let mut me = node_config("127.0.0.1:17004");
    me.lease = LeaseConfig {
        ttl: Duration::from_secs(3),
        drift: Duration::from_millis(2_600),
    };
    let holdings = Holdings::default();
    let told = Told::new();
    let stop = AtomicBool::new(false);
    const P: u32 = 5;
    let epochs = on_executor(async {
        let node = node::run(cfg.clone(), &me, &holdings, &told, &stop);
        let check = async {
            let mut c = client(&cluster).await;
            let mut epochs: Vec<u64> = Vec::new();
            let give_up = Instant::now() + Duration::from_secs(20);
            while epochs.len() < 3 {
                assert!(
                    Instant::now() < give_up,
                    "epochs seen of partition {P} in 20 s: {epochs:?}"
                );
                if let Some(l) = holdings.valid(P, Instant::now()) {
                    if epochs.last() != Some(&l.epoch) {
                        // Redis holds what this node holds: its own value under that epoch.
                        let key = layout::lease_key(P);
                        let v = c
                            .query(Routed::new(&key, redis::cmd("GET").arg(&key).clone()))
                            .await
                            .expect("GET");
                        if v == Value::BulkString(l.holder().as_bytes().to_vec()) {
                            epochs.push(l.epoch);
                        }
                    }
                }
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            stop.store(true, Ordering::Release);
            epochs
        };
        let (_, epochs) = futures_lite::future::zip(node, check).await;
        epochs
    });
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "each acquisition under a new epoch: {epochs:?}"
    );
    assert!(told.held().is_empty(), "every partition lost at stop");
    assert!(
        holdings.stats.losses_total.load(Ordering::Relaxed) >= 2,
        "each lapse counted as a loss"
    );
}

/// A write answered `FENCED` drops its partition at once: the lease key of a partition this
/// node holds is overwritten behind the loop's back (as another node would after a lapse this
/// node did not see), and the next write for it is refused by the fence. From then on the node
/// does not act on the partition: `Holdings` names no valid lease of it, the shard answers its
/// ops 503 naming it, and the loop tells the shards to drop it, long before the lease's local
/// deadline (54 s) or the loop's next round (30 s) would have said so. Another partition is
/// untouched.
#[test]
fn a_fenced_write_drops_its_partition_at_once_not_at_the_lease_s_deadline() {
    use punctual::engine::{EngineBuilder, Pinning, RedisConfig};
    use punctual::{Error, UtcMicros};
    use std::sync::Arc;

    let cluster = RedisCluster::start();
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    let mut me = node_config("127.0.0.1:17005");
    me.round = Duration::from_secs(30);
    me.member_ttl = Duration::from_secs(60);
    me.lease = LeaseConfig::with_ttl(Duration::from_secs(60));
    let holdings = Arc::new(Holdings::default());
    let engine = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .shard_capacity(10_000)
        .redis_config(RedisConfig::new(cluster.url()))
        .partition_holders(holdings.clone())
        .build()
        .expect("engine starts");
    let h = engine.handle();
    let keys: Vec<String> = (0..).map(|i| format!("order-{i}")).take(64).collect();
    let p = partition_of("shop", &keys[0]);
    let in_p: Vec<&String> = keys
        .iter()
        .filter(|k| partition_of("shop", k) == p)
        .collect();
    let other = keys
        .iter()
        .find(|k| partition_of("shop", k) != p)
        .expect("a key of another partition");
    let q = partition_of("shop", other);
    // The loop on a thread of its own, killed (dropped mid-sleep) at the end.
    let kill = Arc::new(AtomicBool::new(false));
    let node = {
        let (cfg, holdings, shards, kill) =
            (cfg.clone(), holdings.clone(), h.partitions(), kill.clone());
        std::thread::spawn(move || {
            on_executor(async {
                let (reader, queue) = Reader::new(&*shards);
                let killed = async {
                    while !kill.load(Ordering::Acquire) {
                        glommio::timer::sleep(Duration::from_millis(20)).await;
                    }
                };
                futures_lite::future::or(
                    futures_lite::future::or(
                        node::run(cfg.clone(), &me, &holdings, &reader, &kill),
                        reader.serve(cfg.clone(), queue),
                    ),
                    killed,
                )
                .await;
            })
        })
    };
    let far = UtcMicros(h.now().0 + 3_600_000_000);
    // Both partitions loaded: a write for each is acknowledged.
    let give_up = Instant::now() + Duration::from_secs(30);
    for k in [in_p[0], other] {
        while h.schedule("shop", k, far, b"").is_err() {
            assert!(Instant::now() < give_up, "{k} not loaded in 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    while h.partitions_loaded() < u64::from(PARTITIONS) {
        assert!(
            Instant::now() < give_up,
            "not every partition loaded in 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = holdings.valid(p, Instant::now()).expect("held").deadline();

    // Another holder takes p's lease behind the loop's back.
    on_executor(async {
        let mut c = client(&cluster).await;
        let key = layout::lease_key(p);
        let set = redis::cmd("SET")
            .arg(&key)
            .arg("thief:99")
            .arg("PX")
            .arg(60_000)
            .clone();
        assert_eq!(
            c.query(Routed::new(&key, set)).await.expect("SET"),
            Value::Okay
        );
    });
    assert!(
        h.schedule("shop", in_p[0], far, b"").is_err(),
        "the write is fenced and answered 503"
    );
    let give_up = Instant::now() + Duration::from_secs(10);
    while holdings.valid(p, Instant::now()).is_some() {
        assert!(
            Instant::now() < give_up,
            "partition {p} still acted on 10 s after a write was fenced"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        Instant::now() < deadline,
        "dropped before its local deadline"
    );
    assert!(!holdings.holds(p));
    for k in &in_p {
        assert_eq!(
            h.get("shop", k).map(|_| ()),
            Err(Error::PartitionNotHeld { partition: p }),
            "{k}: not acted on"
        );
    }
    assert_eq!(holdings.stats.fenced_drops_total.load(Ordering::Relaxed), 1);
    assert!(holdings.valid(q, Instant::now()).is_some(), "q still held");
    assert!(h.get("shop", other).expect("q answered").is_some());
    // The loop, woken by the cut, told the shards at once: the partition is dropped there.
    while h.partitions_loaded() != u64::from(PARTITIONS) - 1 {
        assert!(
            Instant::now() < give_up,
            "partition {p} still loaded 10 s after a write was fenced"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    kill.store(true, Ordering::Release);
    node.join().expect("the loop's thread");
    engine.shutdown().expect("engine stops");
}
