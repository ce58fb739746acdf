//! The values a partition's lease key holds, against a real Redis Cluster (three masters with
//! a replica each, started and killed by each test): every acquisition writes a value of its
//! own, `<node>/<nonce>-<token>:<epoch>`, so that a write queued under one acquisition is
//! never accepted under another, even when a failover lost an `INCR` and an epoch is handed
//! out twice, to two incarnations of a node or to the same one. Nothing asserts a duration;
//! every wait is bounded.

#[path = "support/redis_cluster.rs"]
mod redis_cluster;

use punctual::nodes::lease::{self, Acquired, LeaseConfig, LeaseError};
use punctual::store::redis::cluster::fence;
use punctual::store::redis::cluster::{parse_url, ClusterClient, Routed};
use punctual::store::redis::layout;
use redis::Value;
use redis_cluster::{on_executor, RedisCluster};
use std::time::{Duration, Instant};

async fn client(cluster: &RedisCluster) -> ClusterClient {
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    ClusterClient::connect(cfg).await.expect("a slot map")
}

/// `GET` of `key` on its slot's master.
async fn get(c: &mut ClusterClient, key: &str) -> Value {
    c.query(Routed::new(key, redis::cmd("GET").arg(key).clone()))
        .await
        .expect("GET")
}

/// One HSET of partition `p` fenced by `holder`, as a store sends it.
fn fenced_hset(p: u32, holder: &str) -> Routed {
    let key = layout::timers_key(p);
    let hset = redis::cmd("HSET")
        .arg(&key)
        .arg("t/k")
        .arg("1 2 {}")
        .clone();
    fence::fenced(p, holder, &[&key], &[hset]).expect("one slot")
}

/// Sends a write of partition `p` fenced by `stale` and one fenced by `holder`: the first is
/// refused, the second lands.
async fn only_the_holder_writes(c: &mut ClusterClient, p: u32, stale: &str, holder: &str) {
    let refused = c.query(fenced_hset(p, stale)).await.expect("answered");
    assert!(fence::is_fenced(&refused), "{refused:?}");
    let landed = c.query(fenced_hset(p, holder)).await.expect("answered");
    assert_eq!(landed, Value::Array(vec![Value::Int(1)]));
}

/// `holder`'s acquisition of `p` alone, with the default leases.
async fn acquire_one(c: &mut ClusterClient, holder: &str, p: u32) -> Acquired {
    let mut answers = lease::acquire(c, holder, &[p], LeaseConfig::default())
        .await
        .expect("answered");
    assert_eq!(answers.len(), 1);
    answers.remove(0)
}

/// With replicas to wait for and none to confirm (every replica killed), an acquisition is
/// applied on the master but never confirmed: the call gives up (bounded) and nothing is held.
/// Asked again by the same incarnation, as a retry does, it recognises its own lease and takes
/// it under a new epoch (not "taken" by itself, so it need not wait for it to lapse); another
/// incarnation of the same node id finds it taken; a write fenced by the unconfirmed value is
/// refused.
#[test]
fn an_unconfirmed_acquisition_is_not_held_and_asked_again_it_recognises_its_own_lease() {
    let mut cluster = RedisCluster::start();
    cluster.kill_replicas();
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    on_executor(async {
        let mut waiting = ClusterClient::connect(punctual::store::redis::cluster::ClusterConfig {
            wait_replicas: 1,
            retry_for: Duration::from_secs(2),
            ..cfg.clone()
        })
        .await
        .expect("a slot map");
        let mut plain = ClusterClient::connect(cfg.clone())
            .await
            .expect("a slot map");
        let p = 23;
        let me = lease::incarnation("127.0.0.1:17006");
        let started = Instant::now();
        let unconfirmed = lease::acquire(&mut waiting, &me, &[p], LeaseConfig::default()).await;
        assert!(
            matches!(unconfirmed, Err(LeaseError::Cluster(_))),
            "not confirmed, not held: {unconfirmed:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "gave up, bounded"
        );
        let Value::BulkString(first) = get(&mut plain, &layout::lease_key(p)).await else {
            panic!("the master applied the acquisition");
        };
        let first = String::from_utf8(first).expect("UTF-8");
        let first_epoch: u64 = first
            .strip_prefix(&format!("{me}-"))
            .and_then(|rest| rest.rsplit_once(':'))
            .and_then(|(_, e)| e.parse().ok())
            .expect("this incarnation's value");

        let again = lease::incarnation("127.0.0.1:17006");
        assert_ne!(again, me);
        assert_eq!(
            acquire_one(&mut plain, &again, p).await,
            Acquired::Taken(first.clone()),
            "another incarnation of the node does not take it"
        );
        let mine = match acquire_one(&mut plain, &me, p).await {
            Acquired::Held(l) => l,
            other => panic!("its own lease not recognised: {other:?}"),
        };
        assert!(mine.epoch > first_epoch, "under a new epoch: {mine:?}");
        assert!(
            mine.holder().starts_with(&format!("{me}-"))
                && mine.holder().ends_with(&format!(":{}", mine.epoch)),
            "{mine:?}"
        );
        assert_eq!(
            get(&mut plain, &layout::lease_key(p)).await,
            Value::BulkString(mine.holder().as_bytes().to_vec())
        );
        only_the_holder_writes(&mut plain, p, &first, mine.holder()).await;
    });
}

/// An epoch handed out twice (a failover lost the acquisition and its `INCR`, here played by
/// deleting the lease and setting the epoch counter back) still gives two incarnations of one
/// node id two lease values: a write fenced by the first is refused under the second's lease.
#[test]
fn two_incarnations_of_one_node_never_share_a_lease_value_even_under_one_epoch() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let mut c = client(&cluster).await;
        let node = "127.0.0.1:17007";
        let (old, new) = (lease::incarnation(node), lease::incarnation(node));
        let p = 29;
        let Acquired::Held(first) = acquire_one(&mut c, &old, p).await else {
            panic!("a free partition is acquired");
        };
        lose_acquisition(&mut c, p, first.epoch).await;
        let Acquired::Held(second) = acquire_one(&mut c, &new, p).await else {
            panic!("a free partition is acquired");
        };
        assert_eq!(second.epoch, first.epoch, "the epoch handed out twice");
        assert_ne!(second.holder(), first.holder());
        only_the_holder_writes(&mut c, p, first.holder(), second.holder()).await;
    });
}

/// Plays a failover that lost the acquisition of `p` under `epoch` and its `INCR`: the lease
/// key deleted, the epoch counter set back.
async fn lose_acquisition(c: &mut ClusterClient, p: u32, epoch: u64) {
    let (lease_key, epoch_key) = (layout::lease_key(p), layout::epoch_key(p));
    let lost = [
        Routed::new(&lease_key, redis::cmd("DEL").arg(&lease_key).clone()),
        Routed::new(
            &epoch_key,
            redis::cmd("SET").arg(&epoch_key).arg(epoch - 1).clone(),
        ),
    ];
    c.pipeline(&lost).await.expect("DEL, SET");
}

/// The same process acquires a partition again under an epoch handed out twice (a failover
/// lost its first acquisition and the `INCR`, as it can with `--redis-wait-replicas 0`): the
/// two acquisitions write two values, so a batch still queued under the first is refused.
#[test]
fn one_process_acquiring_twice_under_one_epoch_writes_two_lease_values() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let mut c = client(&cluster).await;
        let me = lease::incarnation("127.0.0.1:17008");
        let p = 31;
        let Acquired::Held(first) = acquire_one(&mut c, &me, p).await else {
            panic!("a free partition is acquired");
        };
        lose_acquisition(&mut c, p, first.epoch).await;
        let Acquired::Held(second) = acquire_one(&mut c, &me, p).await else {
            panic!("a free partition is acquired");
        };
        assert_eq!(second.epoch, first.epoch, "the epoch handed out twice");
        assert_ne!(
            second.holder(),
            first.holder(),
            "each acquisition its own value"
        );
        only_the_holder_writes(&mut c, p, first.holder(), second.holder()).await;
    });
}
