//! A request marked forwarded counts only when it proves the cluster's secret, against a real
//! Redis Cluster and a real `punctual serve` node.
//!
//! Every forward between nodes is signed (`src/api/forward_sign.rs`): an HMAC under the
//! cluster's secret of its method, path, forwarding node, `Authorization`, time, nonce and
//! body. The node refuses, with `401` and a count in `/metrics` by reason, a forwarded request
//! with no signature, one under another secret, one whose body changed after signing and one
//! signed outside the window (a replay); it stores nothing for any of them. A forward signed
//! with the right secret is served, and an ordinary request is untouched. Every wait is
//! bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::try_request;
use cluster_serve::{forwarded, metrics, node_addr, Proc, CLUSTER_SECRET};
use punctual::api::forward_sign::{now_ms, FORWARDED, WINDOW};
use redis_cluster::RedisCluster;

const TOKEN: &str = "tenant-token-that-only-nodes-may-see-0123";

const OTHER_SECRET: &str = "another-cluster-s-secret-0123456789abcdef";

/// A counter of `/metrics` text with one label (0 when absent).
fn refused(text: &str, reason: &str) -> u64 {
    let name = format!("punctual_cluster_forwards_refused_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&name)?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_forward_counts_only_signed_with_the_cluster_s_secret_fresh_and_unchanged() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tenants.toml");
    std::fs::write(&config, format!("[tenants.shop]\ntoken = \"{TOKEN}\"\n")).expect("config");
    let config = config.to_string_lossy().into_owned();
    let a = node_addr();
    let mut node = Proc::spawn_with(a, &cluster.url(), dir.path(), "a", &["--config", &config]);
    node.wait_healthy(a);

    let auth = format!("Bearer {TOKEN}");
    let body = br#"{"delay_ms":600000}"#;
    let forged = "/v1/timers/shop/forged";
    let from = "127.0.0.1:1";
    let put = |path: &str, headers: &[(&str, String)], body: &[u8]| {
        let mut h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        h.push(("authorization", &auth));
        try_request(a, "PUT", path, &h, body).expect("PUT answered")
    };
    let sign = |secret: &str, t_ms: u64, path: &str, body: &[u8]| {
        forwarded(secret, from, t_ms, ("PUT", path, &auth, body)).to_vec()
    };
    let window = WINDOW.as_millis() as u64;
    let right = sign(CLUSTER_SECRET, now_ms(), forged, body);
    let mut unsigned = right.clone();
    unsigned.retain(|(k, _)| *k == FORWARDED);
    let mut garbled = right.clone();
    garbled[1].1 = "t=1,n=00,s=zz".into();
    let refusals = [
        ("no signature", unsigned, &body[..], "missing"),
        ("a garbled signature", garbled, body, "missing"),
        (
            "another secret",
            sign(OTHER_SECRET, now_ms(), forged, body),
            body,
            "wrong",
        ),
        (
            "a body changed after signing",
            right.clone(),
            br#"{"delay_ms":1000}"#,
            "wrong",
        ),
        (
            "a replay past the window",
            sign(CLUSTER_SECRET, now_ms() - window - 5_000, forged, body),
            body,
            "stale",
        ),
        (
            "a time ahead of the window",
            sign(CLUSTER_SECRET, now_ms() + window + 5_000, forged, body),
            body,
            "stale",
        ),
    ];
    for (what, headers, sent, _) in &refusals {
        let r = put(forged, headers, sent);
        assert_eq!(
            (r.status, r.code()),
            (401, "unauthorized".into()),
            "{what}: {:?}",
            r.json()
        );
    }
    let r = try_request(a, "GET", forged, &[("authorization", &auth)], b"").expect("GET");
    assert_eq!(
        r.status,
        404,
        "a refused forward stored a timer: {:?}",
        r.json()
    );
    let text = metrics(a);
    for reason in ["missing", "wrong", "stale"] {
        let expected = refusals.iter().filter(|r| r.3 == reason).count() as u64;
        assert_eq!(refused(&text, reason), expected, "refused as {reason}");
    }

    // Signed with the cluster's secret, fresh: served, and stored.
    let signed = "/v1/timers/shop/signed";
    let r = put(signed, &sign(CLUSTER_SECRET, now_ms(), signed, body), body);
    assert_eq!(r.status, 201, "a signed forward: {:?}", r.json());
    let r = try_request(a, "GET", signed, &[("authorization", &auth)], b"").expect("GET");
    assert_eq!(r.status, 200, "the signed forward's timer: {:?}", r.json());
    // An ordinary request carries no signature and needs none.
    let r = put("/v1/timers/shop/plain", &[], body);
    assert_eq!(r.status, 201, "an ordinary PUT: {:?}", r.json());
}
