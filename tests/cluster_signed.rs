//! A request marked forwarded counts only when it proves the cluster's secret, against a real
//! Redis Cluster and a real `punctual serve` node.
//!
//! Every forward between nodes is signed (`src/api/forward_sign.rs`): an HMAC under the
//! cluster's secret of its method, path, forwarding node, `Authorization`, time, nonce and
//! body. The node refuses, with `401` and a count in `/metrics` by reason, a forwarded request
//! with no signature, one under another secret, one whose body changed after signing and one
//! signed outside the window (a replay); it stores nothing for any of them. A forward signed
//! with the right secret is served once: the same forward sent again within the window (a
//! copy taken on the way) is refused `401` and counted `replayed`, and changes nothing. An
//! ordinary request is untouched. Every wait is bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::try_request;
use cluster_serve::{forwarded, metrics, shop_node, CLUSTER_SECRET};
use punctual::api::forward_sign::{now_ms, FORWARDED, WINDOW};

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
fn a_forward_counts_only_signed_with_the_cluster_s_secret_fresh_unchanged_and_once() {
    let (_cluster, _dir, a, _node) = shop_node(TOKEN, &[]);

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
    // The same forward again, within the window: a replay, refused; the timer is as the first
    // forward left it.
    let once = "/v1/timers/shop/once";
    let headers = sign(CLUSTER_SECRET, now_ms(), once, body);
    let r = put(once, &headers, body);
    assert_eq!(r.status, 201, "the first forward: {:?}", r.json());
    let version = |r: &api_support::Resp| r.json()["version"].as_u64();
    let first = try_request(a, "GET", once, &[("authorization", &auth)], b"").expect("GET");
    let r = put(once, &headers, body);
    assert_eq!(
        (r.status, r.code()),
        (401, "unauthorized".into()),
        "a replayed forward was served: {:?}",
        r.json()
    );
    assert!(r.json()["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("replay")));
    let after = try_request(a, "GET", once, &[("authorization", &auth)], b"").expect("GET");
    assert_eq!(
        version(&after),
        version(&first),
        "the replay changed the timer"
    );
    assert_eq!(refused(&metrics(a), "replayed"), 1, "the replay counted");

    // An ordinary request carries no signature and needs none.
    let r = put("/v1/timers/shop/plain", &[], body);
    assert_eq!(r.status, 201, "an ordinary PUT: {:?}", r.json());
}
