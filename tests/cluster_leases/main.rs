//! Partition leases and membership against a real Redis Cluster (three masters with a replica
//! each, started and killed by each test). Two "nodes" live in one test process, each with
//! its own cluster client. The rules under test: one holder per partition; a node never acts
//! on a lease past its local deadline, and that deadline never outlives the lease in Redis;
//! a write under a stale epoch is refused with the fencing error and changes nothing.
//! Nothing asserts a duration; every wait is bounded.

#[path = "../support/redis_cluster.rs"]
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

mod holders;
mod lapses;
mod loops;
