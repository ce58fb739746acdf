//! Stream entries written under a partition's lease, against a real Redis Cluster (three
//! masters with a replica each): a fire's stream entry goes into the partition's relay by the
//! partition's fenced script (`store::redis::relay`), so a holder whose lease is gone writes
//! neither the record's removal nor the entry; a holder's entry is relayed to the tenant's
//! stream once, and one left in the relay (its relay never ran) is found and relayed once by a
//! sweep. Every wait is bounded.

#[path = "support/redis_cluster.rs"]
mod redis_cluster;

use punctual::nodes::lease::{self, Acquired, LeaseConfig};
use punctual::store::redis::cluster::fence;
use punctual::store::redis::cluster::{parse_url, ClusterClient, Routed};
use punctual::store::redis::layout;
use punctual::store::redis::relay::{self, Relayed};
use redis::Value;
use redis_cluster::{on_executor, RedisCluster};

const STREAM: &str = "punctual:fired:{shop}";

/// `XADD` of a fire of `key` to the tenant's stream, and the record's `HDEL`, as the store
/// queues them.
fn fire(p: u32, key: &str) -> (redis::Cmd, redis::Cmd) {
    let xadd = redis::cmd("XADD")
        .arg(STREAM)
        .arg("MAXLEN")
        .arg("~")
        .arg(1000)
        .arg("*")
        .arg("key")
        .arg(key)
        .arg("version")
        .arg(1)
        .clone();
    let hdel = redis::cmd("HDEL")
        .arg(layout::timers_key(p))
        .arg(format!("shop/{key}"))
        .clone();
    (xadd, hdel)
}

/// The fire as the store sends it under `holder`: the entry into p's relay, then the `HDEL`,
/// in p's fenced script; its reply and what to relay.
async fn fenced_fire(c: &mut ClusterClient, p: u32, holder: &str, key: &str) -> (Value, Relayed) {
    let (xadd, hdel) = fire(p, key);
    let (to_relay, r) = relay::divert(&xadd, p).expect("an XADD");
    let (relay_key, timers) = (relay::relay_key(p), layout::timers_key(p));
    let script =
        fence::fenced(p, holder, &[&timers, &relay_key], &[to_relay, hdel]).expect("one slot");
    (c.query(script).await.expect("answered"), r)
}

async fn len(c: &mut ClusterClient, key: &str) -> i64 {
    match c
        .query(Routed::new(key, redis::cmd("XLEN").arg(key).clone()))
        .await
        .expect("XLEN")
    {
        Value::Int(n) => n,
        other => panic!("XLEN answered {other:?}"),
    }
}

#[test]
fn a_stream_entry_lands_only_under_the_lease_and_reaches_its_stream_once() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
        let mut c = ClusterClient::connect(cfg).await.expect("a slot map");
        let p = 41;
        let me = lease::incarnation("127.0.0.1:17009");
        let mut acquired = lease::acquire(&mut c, &me, &[p], LeaseConfig::default())
            .await
            .expect("answered");
        let Some(Acquired::Held(held)) = acquired.pop() else {
            panic!("a free partition is acquired");
        };
        let relay_key = relay::relay_key(p);

        // A holder whose lease is gone (a deposed node's queued fire): nothing lands.
        let (refused, _) = fenced_fire(&mut c, p, &format!("{me}-0:1"), "a").await;
        assert!(fence::is_fenced(&refused), "{refused:?}");
        assert_eq!(len(&mut c, &relay_key).await, 0, "no relay entry");

        // The holder: the entry lands in the relay, and is relayed once.
        let (landed, r) = fenced_fire(&mut c, p, held.holder(), "b").await;
        let Value::Array(items) = &landed else {
            panic!("{landed:?}");
        };
        let id = relay::id_of(&items[0]).expect("the relay entry's id");
        relay::forward(&mut c, &[(r, id)]).await.expect("relayed");
        assert_eq!(len(&mut c, STREAM).await, 1);
        assert_eq!(len(&mut c, &relay_key).await, 0, "taken out of the relay");

        // An entry whose relay never ran is found by a sweep, relayed once, and gone.
        fenced_fire(&mut c, p, held.holder(), "c").await;
        let far = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
            + 60_000;
        let left = relay::leftovers(&mut c, &[p], far, 100)
            .await
            .expect("read");
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].0.fields[..2], [b"key".to_vec(), b"c".to_vec()]);
        assert_eq!(
            left[0].0.opts,
            [b"MAXLEN".to_vec(), b"~".to_vec(), b"1000".to_vec()]
        );
        relay::forward(&mut c, &left).await.expect("relayed");
        assert_eq!(len(&mut c, STREAM).await, 2);
        let after = relay::leftovers(&mut c, &[p], far, 100)
            .await
            .expect("read");
        assert!(after.is_empty(), "{after:?}");
    });
}
