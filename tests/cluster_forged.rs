//! A node record written into Redis by hand gets nothing, against a real Redis Cluster and a
//! real `punctual serve` node given the cluster's secret.
//!
//! Anyone who can write to the cluster's Redis (or a staging node started against production
//! Redis) can add a record to the live set. Without a secret the nodes would count it: give it
//! partitions by rendezvous (which it never acquires, so they stay unowned) and forward their
//! requests to the address it names, with the caller's `Authorization`. Under the secret only
//! records that prove it count: the forged one, pointing at a local listener, gets no
//! partition and no connection, while the real node keeps serving every key. Every wait is
//! bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use cluster_serve::{list_member, metrics, put_keys, sample, shop_node};
use punctual::partition::PARTITIONS;
use std::net::TcpListener;
use std::time::Duration;

const SECRET: &str = "a-cluster-secret-of-at-least-32-bytes";

const TOKEN: &str = "tenant-token-that-only-nodes-may-see-0123";

#[test]
fn a_record_added_to_redis_by_hand_gets_no_partition_no_forward_and_no_token() {
    let (cluster, _dir, a, _node) = shop_node(TOKEN, &["--cluster-secret", SECRET]);

    // A forged record: alive for an hour, pointing at a listener that would collect tokens.
    let trap = TcpListener::bind("127.0.0.1:0").expect("bind");
    trap.set_nonblocking(true).expect("non-blocking");
    let forged = trap.local_addr().expect("addr").to_string();
    let record = format!(r#"{{"id":"{forged}","advertise":"{forged}","started_at_us":1}}"#);
    list_member(&cluster, &forged, &record);
    // Past a tick that sees the counter move and a round after it.
    std::thread::sleep(Duration::from_millis(2_500));

    let text = metrics(a);
    assert_eq!(
        sample(&text, "punctual_cluster_live_nodes"),
        1,
        "the forged record counted as a node"
    );
    assert_eq!(
        sample(&text, "punctual_cluster_partitions_owned"),
        u64::from(PARTITIONS),
        "a partition given up for the forged record"
    );
    let auth = format!("Bearer {TOKEN}");
    for (key, r) in put_keys(a, &auth, 200) {
        assert_eq!(r.status, 201, "PUT {key}: {:?}", r.json());
    }
    assert!(
        matches!(trap.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the forged record's address was connected to: a forward, with the tenant's token"
    );
}
