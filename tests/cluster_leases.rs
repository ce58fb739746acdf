//! Partition leases and membership against a real Redis Cluster (three masters with a replica
//! each, started and killed by each test). Two "nodes" live in one test process, each with
//! its own cluster client. The rules under test: one holder per partition; a node never acts
//! on a lease past its local deadline, and that deadline never outlives the lease in Redis;
//! a write under a stale epoch is refused with the fencing error and changes nothing.
//! Nothing asserts a duration; every wait is bounded.

#[path = "support/redis_cluster.rs"]
mod redis_cluster;

use punctual::cluster::lease::{self, Acquired, Lease, LeaseConfig, LeaseError};
use punctual::cluster::load;
use punctual::cluster::membership::{self, NodeRecord};
use punctual::cluster::node::{self, Holdings, NodeConfig};
use punctual::cluster::reader::{Partitions, Reader, Shards};
use punctual::cluster::rendezvous;
use punctual::partition::{partition_of, PARTITIONS};
use punctual::store::redis::cluster::fence;
use punctual::store::redis::cluster::{parse_url, ClusterClient, Routed};
use punctual::store::redis::clustered::Holders;
use punctual::store::redis::layout;
use redis::Value;
use redis_cluster::{on_executor, RedisCluster};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The loop's configuration of a node advertised at `id`, with the default rounds and leases.
fn node_config(id: &str) -> NodeConfig {
    NodeConfig::new(NodeRecord {
        id: id.into(),
        advertise: id.into(),
        started_at_us: 1,
        proof: None,
    })
}

async fn client(cluster: &RedisCluster) -> ClusterClient {
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    ClusterClient::connect(cfg).await.expect("a slot map")
}

fn held(outcomes: &[Acquired]) -> Vec<Lease> {
    outcomes
        .iter()
        .filter_map(|a| match a {
            Acquired::Held(l) => Some(l.clone()),
            Acquired::Taken(_) => None,
        })
        .collect()
}

/// Polls (bounded) until partition `p` has no lease in Redis.
async fn until_lease_gone(c: &mut ClusterClient, p: u32) {
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        let key = layout::lease_key(p);
        let v = c
            .query(Routed::new(&key, redis::cmd("GET").arg(&key).clone()))
            .await
            .expect("GET");
        if v == Value::Nil {
            return;
        }
        assert!(Instant::now() < give_up, "lease of {p} still there: {v:?}");
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn two_nodes_contend_and_each_partition_gets_exactly_one_holder() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let (mut a, mut b) = (client(&cluster).await, client(&cluster).await);
        let partitions: Vec<u32> = (0..96).collect();
        let cfg = LeaseConfig::default();
        let (ra, rb) = futures_lite::future::zip(
            lease::acquire(&mut a, "node-a:7480", &partitions, cfg),
            lease::acquire(&mut b, "node-b:7480", &partitions, cfg),
        )
        .await;
        let (ra, rb) = (ra.expect("a's acquisitions"), rb.expect("b's acquisitions"));
        for (i, &p) in partitions.iter().enumerate() {
            let (lease, by, winner) = match (&ra[i], &rb[i]) {
                (Acquired::Held(l), Acquired::Taken(by)) => (l, by, "node-a:7480"),
                (Acquired::Taken(by), Acquired::Held(l)) => (l, by, "node-b:7480"),
                other => panic!("partition {p}: not exactly one holder: {other:?}"),
            };
            assert_eq!(lease.partition, p);
            assert!(
                lease.holder().starts_with(&format!("{winner}-"))
                    && lease.holder().ends_with(&format!(":{}", lease.epoch)),
                "{lease:?}: the holder, its acquisition's token and the epoch"
            );
            assert_eq!(
                by,
                lease.holder(),
                "partition {p}: the loser names the winner"
            );
        }
        // a hands its leases over (a planned handoff); b takes them under a later epoch.
        let a_held = held(&ra);
        lease::release(&mut a, &a_held).await.expect("release");
        let mut a_left = a_held.clone();
        let still = lease::renew(&mut a, &mut a_left, cfg).await.expect("renew");
        assert!(
            still.iter().all(|h| !h),
            "a released lease cannot be renewed"
        );
        assert!(
            a_left.iter().all(|l| !l.valid_at(Instant::now())),
            "nor acted on"
        );
        let taken: Vec<u32> = a_held.iter().map(|l| l.partition).collect();
        let again = held(
            &lease::acquire(&mut b, "node-b:7480", &taken, cfg)
                .await
                .expect("b's second acquisitions"),
        );
        assert_eq!(again.len(), taken.len(), "every released partition is free");
        for (old, new) in a_held.iter().zip(&again) {
            assert_eq!(old.partition, new.partition);
            assert!(
                new.epoch > old.epoch,
                "epochs only grow: {old:?} then {new:?}"
            );
        }
        // b's leases renew; a's are refused for good.
        let mut b_all = held(&rb);
        b_all.extend(again);
        let renewed = lease::renew(&mut b, &mut b_all, cfg).await.expect("renew");
        assert!(renewed.iter().all(|h| *h));
        assert_eq!(b_all.len(), partitions.len());
    });
}

#[test]
fn a_stale_epoch_is_fenced_and_a_lease_past_its_deadline_is_not_acted_upon() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let (mut a, mut b) = (client(&cluster).await, client(&cluster).await);
        let p = 17;
        let key = layout::timers_key(p);
        let short = LeaseConfig::with_ttl(Duration::from_millis(400));
        let hset = |field: &str| {
            redis::cmd("HSET")
                .arg(&key)
                .arg(field)
                .arg("1 2 {}")
                .clone()
        };

        let a_lease = match &lease::acquire(&mut a, "node-a:7480", &[p], short)
            .await
            .expect("acquire")[..]
        {
            [Acquired::Held(l)] => l.clone(),
            other => panic!("{other:?}"),
        };
        // Under its lease, a's fenced write lands.
        let ok = a_lease
            .fence(Instant::now(), &[&key], &[hset("t/first")])
            .expect("a valid lease fences");
        let reply = a.query(ok).await.expect("answered");
        assert_eq!(reply, Value::Array(vec![Value::Int(1)]));
        // a builds a write, then stalls (a pause, a partition) past its lease.
        let late = a_lease
            .fence(Instant::now(), &[&key], &[hset("t/stale")])
            .expect("still valid when built");
        until_lease_gone(&mut b, p).await;
        // Redis dropped the lease: a's local deadline had passed by then.
        assert!(
            !a_lease.valid_at(Instant::now()),
            "{a_lease:?} outlived its key"
        );
        assert!(matches!(
            a_lease.fence(Instant::now(), &[&key], &[hset("t/never")]),
            Err(LeaseError::Expired { partition: 17, .. })
        ));
        let b_lease = match &lease::acquire(&mut b, "node-b:7480", &[p], LeaseConfig::default())
            .await
            .expect("acquire")[..]
        {
            [Acquired::Held(l)] => l.clone(),
            other => panic!("{other:?}"),
        };
        assert!(b_lease.epoch > a_lease.epoch);
        // a's write, sent late under its old epoch, is refused and changes nothing.
        let refused = a.query(late).await.expect("answered");
        assert!(fence::is_fenced(&refused), "{refused:?}");
        let stale = b
            .query(Routed::new(
                &key,
                redis::cmd("HGET").arg(&key).arg("t/stale").clone(),
            ))
            .await
            .expect("HGET");
        assert_eq!(stale, Value::Nil, "a fenced write left nothing behind");
        // The same write under b's lease lands.
        let ok = b_lease
            .fence(Instant::now(), &[&key], &[hset("t/stale")])
            .expect("b's lease fences");
        assert_eq!(
            b.query(ok).await.expect("answered"),
            Value::Array(vec![Value::Int(1)])
        );
        // a renews in vain: the lease is b's now.
        let mut mine = vec![a_lease];
        assert_eq!(
            lease::renew(&mut a, &mut mine, short).await.expect("renew"),
            [false]
        );
    });
}

#[test]
fn membership_sees_every_beating_node_and_forgets_a_silent_one() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let (mut a, mut b) = (client(&cluster).await, client(&cluster).await);
        let record = |id: &str| NodeRecord {
            id: id.into(),
            advertise: id.into(),
            started_at_us: 1,
            proof: None,
        };
        let (ra, rb) = (record("10.0.0.1:7480"), record("10.0.0.2:7480"));
        let ttl = Duration::from_millis(500);
        membership::beat(&mut a, &ra, ttl).await.expect("a beats");
        let seen = membership::beat(&mut b, &rb, ttl).await.expect("b beats");
        assert_eq!(seen, vec![ra.clone(), rb.clone()]);
        let ids: Vec<&str> = seen.iter().map(|r| r.id.as_str()).collect();
        let mine_a = rendezvous::owned_by(&ra.id, &ids);
        let mine_b = rendezvous::owned_by(&rb.id, &ids);
        assert_eq!(
            mine_a.len() + mine_b.len(),
            punctual::partition::PARTITIONS as usize
        );
        assert!(mine_a.iter().all(|p| !mine_b.contains(p)));

        // b falls silent; a keeps beating and, one TTL later, sees itself alone.
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = membership::beat(&mut a, &ra, ttl).await.expect("a beats");
            if seen == [ra.clone()] {
                break;
            }
            assert!(Instant::now() < give_up, "b never expired: {seen:?}");
            glommio::timer::sleep(Duration::from_millis(100)).await;
        }
        // b comes back and leaves on purpose: a sees it go at once.
        membership::beat(&mut b, &rb, Duration::from_secs(60))
            .await
            .expect("b beats");
        membership::leave(&mut b, &rb).await.expect("b leaves");
        let seen = membership::beat(&mut a, &ra, ttl).await.expect("a beats");
        assert_eq!(seen, vec![ra]);
    });
}

#[test]
fn fenced_writes_and_renewals_go_on_while_their_slots_are_resharded() {
    let cluster = RedisCluster::start();
    let masters = cluster.masters();
    // The reshard moves the source's first slots; these partitions live there.
    let source_slots = cluster
        .slots()
        .into_iter()
        .filter(|(_, port)| *port == masters[0])
        .map(|(range, _)| range)
        .min_by_key(|r| *r.start())
        .expect("the source serves slots");
    let moved = 1_000u16;
    let first = *source_slots.start();
    let partitions: Vec<u32> = (0..punctual::partition::PARTITIONS)
        .filter(|&p| {
            let s = punctual::store::redis::cluster::slot::partition_slot(p);
            s >= first && s < first + moved
        })
        .collect();
    assert!(partitions.len() > 10, "{partitions:?}");
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (partitions, stop, rounds) = (partitions.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            let result = on_executor(async move {
                let mut c = ClusterClient::connect(cfg)
                    .await
                    .map_err(|e| e.to_string())?;
                let lease_cfg = LeaseConfig::default();
                let got = lease::acquire(&mut c, "node-a:7480", &partitions, lease_cfg)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut leases = held(&got);
                if leases.len() != partitions.len() {
                    return Err(format!("not every lease acquired: {got:?}"));
                }
                let epochs: Vec<u64> = leases.iter().map(|l| l.epoch).collect();
                let mut round = 0u64;
                let mut after_stop = 0;
                while after_stop < 5 {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        after_stop += 1;
                    }
                    let renewed = lease::renew(&mut c, &mut leases, lease_cfg)
                        .await
                        .map_err(|e| e.to_string())?;
                    if renewed.iter().any(|h| !h) {
                        return Err(format!("round {round}: a lease lost: {renewed:?}"));
                    }
                    let now = Instant::now();
                    let field = format!("w{round}");
                    let mut writes = Vec::with_capacity(leases.len());
                    for l in &leases {
                        let key = layout::timers_key(l.partition);
                        let incr = redis::cmd("HINCRBY").arg(&key).arg(&field).arg(1).clone();
                        writes.push(l.fence(now, &[&key], &[incr]).map_err(|e| e.to_string())?);
                    }
                    let replies = c.pipeline(&writes).await.map_err(|e| e.to_string())?;
                    let one = Value::Array(vec![Value::Int(1)]);
                    if let Some(bad) = replies.iter().find(|r| **r != one) {
                        return Err(format!("round {round}: {bad:?}"));
                    }
                    round += 1;
                    rounds.store(round, std::sync::atomic::Ordering::SeqCst);
                    glommio::timer::sleep(Duration::from_millis(20)).await;
                }
                let still: Vec<u64> = leases.iter().map(|l| l.epoch).collect();
                Ok::<_, String>((round, epochs == still, c.stats()))
            });
            let _ = tx.send(result);
        });
    }
    let give_up = Instant::now() + Duration::from_secs(60);
    while rounds.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        assert!(Instant::now() < give_up, "the writer never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    cluster
        .reshard(masters[0], masters[1], u32::from(moved))
        .finish();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (written, same_epochs, stats) = rx
        .recv_timeout(Duration::from_secs(90))
        .expect("the writer ends")
        .unwrap_or_else(|e| panic!("the writer failed: {e}\n{}", cluster.logs()));
    assert!(
        same_epochs,
        "a lease was handed out again during the reshard"
    );
    assert!(stats.moved > 0, "no write met a moved slot: {stats:?}");
    for &p in &partitions {
        assert_eq!(
            cluster.master_of(punctual::store::redis::cluster::slot::partition_slot(p)),
            masters[1]
        );
    }
    // Every round's write landed exactly once in every partition.
    on_executor(async {
        let mut c = client(&cluster).await;
        for &p in &partitions {
            let key = layout::timers_key(p);
            let all = c
                .query(Routed::new(&key, redis::cmd("HGETALL").arg(&key).clone()))
                .await
                .expect("HGETALL");
            let Value::Array(kv) = all else {
                panic!("{all:?}")
            };
            assert_eq!(kv.len() as u64, 2 * written, "partition {p}: {kv:?}");
            for pair in kv.chunks_exact(2) {
                assert_eq!(pair[1], Value::BulkString(b"1".to_vec()), "partition {p}");
            }
        }
    });
    eprintln!(
        "{} partitions, {written} rounds, {stats:?}",
        partitions.len()
    );
}

/// Every partition held (valid now) by both nodes at once: must stay empty.
fn both_hold(a: &Holdings, b: &Holdings) -> Vec<u32> {
    let now = Instant::now();
    (0..PARTITIONS)
        .filter(|&p| a.valid(p, now).is_some() && b.valid(p, now).is_some())
        .collect()
}

/// What a node's loop told: each partition gained and not yet lost, and whether it ever told a
/// partition gained twice or lost before gained.
struct Told {
    gained: Mutex<Vec<bool>>,
    out_of_order: AtomicBool,
}

impl Told {
    fn new() -> Told {
        Told {
            gained: Mutex::new(vec![false; PARTITIONS as usize]),
            out_of_order: AtomicBool::new(false),
        }
    }

    fn set(&self, partition: u32, to: bool) {
        let mut gained = self.gained.lock().expect("not poisoned");
        if gained[partition as usize] == to {
            self.out_of_order.store(true, Ordering::Relaxed);
        }
        gained[partition as usize] = to;
    }

    fn held(&self) -> Vec<u32> {
        assert!(
            !self.out_of_order.load(Ordering::Relaxed),
            "gained and lost alternate"
        );
        let gained = self.gained.lock().expect("not poisoned");
        (0..PARTITIONS).filter(|&p| gained[p as usize]).collect()
    }
}

impl Partitions for Told {
    fn gained(&self, partition: u32) {
        self.set(partition, true);
    }

    fn lost(&self, partition: u32) {
        self.set(partition, false);
    }
}

#[test]
fn two_node_loops_split_the_partitions_and_the_survivor_takes_over_a_killed_node() {
    let cluster = RedisCluster::start();
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    let (na, nb) = (
        node_config("127.0.0.1:17001"),
        node_config("127.0.0.1:17002"),
    );
    let (ha, hb) = (Holdings::default(), Holdings::default());
    let (ta, tb) = (Told::new(), Told::new());
    let stop = AtomicBool::new(false);
    let kill_a = Cell::new(false);
    on_executor(async {
        // a's loop dies mid-round when `kill_a` is set: its future is dropped, nothing released.
        let a = futures_lite::future::or(
            async {
                node::run(cfg.clone(), &na, &ha, &ta, &stop).await;
                panic!("a's loop ended without being killed");
            },
            async {
                while !kill_a.get() {
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                }
            },
        );
        let b = node::run(cfg.clone(), &nb, &hb, &tb, &stop);
        let check = async {
            // Both beat, see each other, and settle on the rendezvous assignment.
            let ids = [na.me.id.as_str(), nb.me.id.as_str()];
            let (want_a, want_b) = (
                rendezvous::owned_by(ids[0], &ids),
                rendezvous::owned_by(ids[1], &ids),
            );
            let give_up = Instant::now() + Duration::from_secs(20);
            loop {
                assert_eq!(
                    both_hold(&ha, &hb),
                    Vec::<u32>::new(),
                    "two holders at once"
                );
                let now = Instant::now();
                if ha.owned(now) == want_a && hb.owned(now) == want_b {
                    break;
                }
                assert!(
                    Instant::now() < give_up,
                    "no split after 20 s: a holds {}, b holds {}",
                    ha.owned(now).len(),
                    hb.owned(now).len()
                );
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
            eprintln!(
                "split: a holds {}, b holds {} of {PARTITIONS}",
                want_a.len(),
                want_b.len()
            );
            assert!(want_a.len() > 400 && want_b.len() > 400, "about half each");
            assert_eq!(
                (ta.held(), tb.held()),
                (want_a.clone(), want_b.clone()),
                "shards told"
            );
            // Redis holds exactly the value each node fences its writes with.
            let mut c = client(&cluster).await;
            let gets: Vec<Routed> = (0..PARTITIONS)
                .map(|p| {
                    let key = layout::lease_key(p);
                    Routed::new(&key, redis::cmd("GET").arg(&key).clone())
                })
                .collect();
            let values = c.pipeline(&gets).await.expect("GETs");
            for (p, v) in (0..PARTITIONS).zip(values) {
                let holder = ha.holder(p).or_else(|| hb.holder(p)).expect("held");
                assert_eq!(
                    v,
                    Value::BulkString(holder.as_bytes().to_vec()),
                    "partition {p}"
                );
            }
            let before: Vec<(u32, u64)> = want_a
                .iter()
                .map(|&p| (p, ha.valid(p, Instant::now()).expect("a's").epoch))
                .collect();

            // kill -9 a: b takes every partition once a's heartbeat and leases lapse.
            kill_a.set(true);
            let killed = Instant::now();
            let limit = nb.member_ttl + nb.lease.ttl + Duration::from_secs(5);
            loop {
                assert_eq!(
                    both_hold(&ha, &hb),
                    Vec::<u32>::new(),
                    "two holders at once"
                );
                if hb.owned(Instant::now()).len() == PARTITIONS as usize {
                    break;
                }
                assert!(
                    killed.elapsed() < limit,
                    "b holds {} of {PARTITIONS} {limit:?} after a's death",
                    hb.owned(Instant::now()).len()
                );
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            eprintln!(
                "b held every partition {} ms after a was killed",
                killed.elapsed().as_millis()
            );
            assert!(
                ha.owned(Instant::now()).is_empty(),
                "a's local deadlines passed first"
            );
            assert_eq!(
                tb.held().len(),
                PARTITIONS as usize,
                "b's shards told of every gain"
            );
            for (p, old) in before {
                let new = hb.valid(p, Instant::now()).expect("b's").epoch;
                assert!(new > old, "partition {p}: epoch {old} then {new}");
            }
            let st = &hb.stats;
            let (losses, errors) = (
                st.losses_total.load(Ordering::Relaxed),
                st.round_errors_total.load(Ordering::Relaxed),
            );
            // On a loaded host a round can stall past a TTL; a lease lost then is taken again.
            eprintln!("b: {losses} leases lost at renewal, {errors} rounds failed");
            stop.store(true, Ordering::Release);
        };
        futures_lite::future::zip(a, futures_lite::future::zip(b, check)).await;
    });
    // b left on stop: its shards told to drop everything, its leases released.
    assert_eq!(tb.held(), Vec::<u32>::new());
    on_executor(async {
        let mut c = client(&cluster).await;
        for p in [0, 511, 1023] {
            until_lease_gone(&mut c, p).await;
        }
    });
}

#[test]
fn a_gained_partition_reads_back_every_record_of_both_hashes_page_by_page() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let mut c = client(&cluster).await;
        let p = 300;
        let keys: Vec<String> = (0..)
            .map(|i| format!("order-{i}"))
            .filter(|k| partition_of("shop", k) == p)
            .take(303)
            .collect();
        let hset = |hash: String, field: String, record: Vec<u8>| {
            Routed::new(
                &hash,
                redis::cmd("HSET").arg(&hash).arg(field).arg(record).clone(),
            )
        };
        // 300 pending timers, 3 dead letters, and two records recovery would skip as well.
        let mut writes: Vec<Routed> = keys[..300]
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let record = layout::encode_record(i as u64 + 1, 1_000 + i as u64, b"", b"{}");
                hset(layout::timers_key(p), layout::field("shop", k), record)
            })
            .collect();
        for k in &keys[300..] {
            let record = layout::encode_record(9, 9, b"dead", b"{}");
            writes.push(hset(
                punctual::store::redis::dead::dead_key(p),
                layout::field("shop", k),
                record,
            ));
        }
        writes.push(hset(
            layout::timers_key(p),
            "no-slash".into(),
            b"1 2 {}".to_vec(),
        ));
        let elsewhere = (0..)
            .map(|i| format!("other-{i}"))
            .find(|k| partition_of("shop", k) != p)
            .expect("a key of another partition");
        writes.push(hset(
            layout::timers_key(p),
            layout::field("shop", &elsewhere),
            b"1 2 {}".to_vec(),
        ));
        for reply in c.pipeline(&writes).await.expect("HSETs") {
            assert_eq!(reply, Value::Int(1));
        }

        let read = load::read(&mut c, p, 50).await.expect("read");
        assert_eq!(
            read.skipped, 2,
            "the malformed and the misfiled record are left"
        );
        let mut got: Vec<(String, u64)> = read
            .records
            .iter()
            .map(|r| (r.key.clone(), r.version))
            .collect();
        got.sort();
        got.dedup();
        assert_eq!(
            got.len(),
            303,
            "every record once (HSCAN may repeat one; loads upsert)"
        );
        for (i, k) in keys.iter().enumerate() {
            let r = read.records.iter().find(|r| &r.key == k).expect("read");
            let dead = i >= 300;
            assert_eq!(r.meta.is_empty(), !dead, "{k}");
            if !dead {
                assert_eq!(r.version, i as u64 + 1);
            }
        }
        let empty = load::read(&mut c, p + 1, 50).await.expect("read");
        assert!(empty.records.is_empty() && empty.skipped == 0);
    });
}

/// What a node's shards were handed: per partition, the loads (record keys) and drops in order.
#[derive(Default)]
struct Handed(Mutex<Vec<(u32, Option<Vec<String>>)>>);

impl Shards for Handed {
    fn load(&self, partition: u32, read: load::Read) {
        let keys = read.records.into_iter().map(|r| r.key).collect();
        self.0
            .lock()
            .expect("not poisoned")
            .push((partition, Some(keys)));
    }

    fn drop_partition(&self, partition: u32) {
        self.0.lock().expect("not poisoned").push((partition, None));
    }
}

#[test]
fn a_node_hands_its_shards_each_gained_partition_s_records_and_then_its_drop() {
    let cluster = RedisCluster::start();
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    let me = node_config("127.0.0.1:17003");
    let holdings = Holdings::default();
    let handed = Handed::default();
    let stop = AtomicBool::new(false);
    // Two pending timers stored before the node starts.
    let stored = ["order-1", "order-2"];
    on_executor(async {
        let mut c = client(&cluster).await;
        for k in stored {
            let hash = layout::timers_key(partition_of("shop", k));
            let cmd = redis::cmd("HSET")
                .arg(&hash)
                .arg(layout::field("shop", k))
                .arg(layout::encode_record(1, 2, b"", b"{}"))
                .clone();
            c.query(Routed::new(&hash, cmd)).await.expect("HSET");
        }
        let (reader, queue) = Reader::new(&handed);
        let node = futures_lite::future::or(
            node::run(cfg.clone(), &me, &holdings, &reader, &stop),
            reader.serve(cfg.clone(), queue),
        );
        let check = async {
            let give_up = Instant::now() + Duration::from_secs(20);
            while handed.0.lock().expect("not poisoned").len() < PARTITIONS as usize {
                assert!(
                    Instant::now() < give_up,
                    "not every partition loaded in 20 s"
                );
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            stop.store(true, Ordering::Release);
        };
        futures_lite::future::zip(node, check).await;
    });
    let handed = handed.0.into_inner().expect("not poisoned");
    let (loads, drops) = handed.split_at(PARTITIONS as usize);
    let mut loaded: Vec<u32> = loads.iter().map(|(p, _)| *p).collect();
    loaded.sort_unstable();
    assert_eq!(
        loaded,
        (0..PARTITIONS).collect::<Vec<_>>(),
        "each gained partition loaded once"
    );
    for (p, keys) in loads {
        let mut want: Vec<String> = stored
            .iter()
            .filter(|k| partition_of("shop", k) == *p)
            .map(|k| k.to_string())
            .collect();
        let mut got = keys.clone().expect("a load");
        want.sort();
        got.sort();
        assert_eq!(got, want, "partition {p}'s records");
    }
    assert_eq!(
        drops.len(),
        PARTITIONS as usize,
        "every partition dropped at stop"
    );
    assert!(drops.iter().all(|(_, keys)| keys.is_none()));
}

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
