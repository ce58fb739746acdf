//! Bulk cancel on a fleet: `punctual serve` nodes sharing a real Redis Cluster (three masters
//! with a replica each), real TCP. A `DELETE /v1/timers/{tenant}?prefix=` sent to one node
//! cancels the tenant's timers under the prefix on every node, while a third node joins and
//! partitions move; none outside the prefix (or of another tenant) is touched; a key put
//! again after its page was cancelled keeps its new timer; the action's progress is read
//! from the node that took it. Every wait is bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::{eventually, put_batches, try_request};
use cluster_serve::{node_addr, share, Proc};
use punctual::nodes::rendezvous::owned_by;
use punctual::partition::partition_of;
use redis_cluster::RedisCluster;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;

fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let r = try_request(addr, method, path, &[], body.as_bytes()).expect("answered");
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, v)
}

/// The pending keys of `tenant` under `prefix`, with their versions, as `addr` lists them.
fn listed(addr: SocketAddr, tenant: &str, prefix: &str) -> BTreeMap<String, u64> {
    let (st, v) = call(
        addr,
        "GET",
        &format!("/v1/timers/{tenant}?prefix={prefix}&limit=10000"),
        "",
    );
    assert_eq!(st, 200, "{v}");
    assert!(v.get("next").is_none(), "one page: {v}");
    v["timers"]
        .as_array()
        .expect("timers")
        .iter()
        .map(|t| {
            (
                t["key"].as_str().unwrap_or("").to_string(),
                t["version"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn progress(addr: SocketAddr, tenant: &str, id: &str) -> Value {
    let (st, v) = call(addr, "GET", &format!("/v1/actions/{tenant}/{id}"), "");
    assert_eq!(st, 200, "{v}");
    v
}

/// Nodes at `addrs` on `url`, each waited for until it holds and has loaded its share of all
/// of them.
fn settled(procs: &mut [Proc], addrs: &[SocketAddr]) {
    for (p, &a) in procs.iter_mut().zip(addrs) {
        p.wait_settled(a, share(a, addrs), addrs.len() as u64);
    }
}

#[test]
fn a_bulk_cancel_sent_to_one_node_cancels_the_prefix_on_every_node_and_nothing_else() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = cluster.url();
    let addrs = [node_addr(), node_addr(), node_addr()];
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| Proc::spawn(addrs[i], &url, dir.path(), &format!("node{i}")))
        .collect();
    settled(&mut procs, &addrs[..2]);

    let keys: Vec<String> = (0..10_000).map(|i| format!("order-{i:05}")).collect();
    let ids: Vec<String> = addrs[..2].iter().map(ToString::to_string).collect();
    let shares = ids.iter().map(|id| owned_by(id, &ids)).collect::<Vec<_>>();
    for s in &shares {
        let on = keys
            .iter()
            .filter(|k| s.contains(&partition_of("shop", k)))
            .count();
        assert!(
            on > 1_000,
            "the keys are spread over both nodes: {on} on one"
        );
    }
    put_batches(addrs[0], "shop", &keys);
    let outside: Vec<String> = (0..200).map(|i| format!("other-{i}")).collect();
    let mut kept = put_batches(addrs[1], "shop", &outside);
    kept.extend(put_batches(
        addrs[1],
        "shop",
        &["ORDER-1".to_string(), "order".to_string()],
    ));
    let mall = put_batches(addrs[0], "mall", &keys[..300]);

    // Sent to the second node; progress read there.
    let (st, v) = call(addrs[1], "DELETE", "/v1/timers/shop?prefix=order-", "");
    assert_eq!(st, 202, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    // Once the second page is listed, the first one's cancels are all answered: keys of it
    // put again now are never listed again, and keep their new timers.
    eventually("the first page cancelled", || {
        let v = progress(addrs[1], "shop", &id);
        (v["matched"].as_u64() >= Some(2_000) || v["state"] == "done").then_some(())
    });
    let again: Vec<String> = keys[..1_000].iter().step_by(50).cloned().collect();
    let renewed = put_batches(addrs[0], "shop", &again);
    // A third node joins while the action runs: partitions move between the nodes.
    procs.push(Proc::spawn(addrs[2], &url, dir.path(), "node2"));
    let done = eventually("the bulk cancel to finish", || {
        let v = progress(addrs[1], "shop", &id);
        (v["state"] == "done").then_some(v)
    });
    assert!(done.get("error").is_none(), "{done}");
    assert_eq!(done["cancelled"], json!(10_000), "{done}");
    assert!(done["matched"].as_u64() >= Some(10_000), "{done}");
    settled(&mut procs, &addrs);

    // Left under the prefix: exactly the keys put again, under their new versions.
    for at in addrs {
        assert_eq!(listed(at, "shop", "order-"), renewed, "as {at} lists it");
    }
    for key in keys.iter().step_by(97) {
        let r = try_request(addrs[2], "GET", &format!("/v1/timers/shop/{key}"), &[], b"")
            .expect("answered");
        assert_eq!(
            r.status == 200,
            renewed.contains_key(key),
            "{key}: {}",
            r.status
        );
    }
    // Nothing outside the prefix, nor of another tenant.
    let mut outside_now = listed(addrs[0], "shop", "other-");
    outside_now.extend(listed(addrs[0], "shop", "ORDER"));
    outside_now.extend(
        listed(addrs[0], "shop", "order")
            .into_iter()
            .filter(|(k, _)| k == "order"),
    );
    assert_eq!(outside_now, kept);
    assert_eq!(listed(addrs[2], "mall", "order-"), mall);
    // The action is the node's that took it.
    let (st, _) = call(addrs[0], "GET", &format!("/v1/actions/shop/{id}"), "");
    assert_eq!(st, 404);
}
