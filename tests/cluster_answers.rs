//! An answer to a forward is relayed only when it proves the cluster's secret, against a real
//! Redis Cluster, a real `punctual serve` node and a real listener posing as a node.
//!
//! Someone who holds the cluster's secret (or a record copied with its proof) can list any
//! address as a node, and the real nodes then forward that node's partitions to it. The
//! listener there answers every forward `201` with a body of its choosing, without the
//! answer signature only a node can make (`src/api/forward_answer.rs`): the caller must never
//! get that `201` (it would believe a timer acknowledged that exists nowhere), but `503
//! peer_unavailable` saying why, with the refusal counted in `/metrics` and logged, while
//! keys of the real node's partitions are served as ever. Every wait is bounded.

mod api_support;
#[path = "support/cluster_serve.rs"]
mod cluster_serve;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;

use cluster_serve::CLUSTER_SECRET;
use cluster_serve::{list_member, metrics, put_keys, sample, shop_node};
use punctual::nodes::membership::{prove, NodeRecord};
use punctual::nodes::rendezvous::owned_by;
use punctual::partition::partition_of;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "tenant-token-that-only-nodes-may-see-0123";

/// Serves one connection: each request read whole, answered `201` with a made-up timer; every
/// other answer carries a well-formed signature that proves nothing.
fn pose(stream: TcpStream, seen: &AtomicU64) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        let n = seen.fetch_add(1, Ordering::SeqCst);
        let body = r#"{"tenant":"shop","key":"made-up","version":1,"fire_at_us":1}"#;
        let signature = if n % 2 == 1 {
            format!("punctual-answer-signature: s={}\r\n", "0".repeat(64))
        } else {
            String::new()
        };
        write!(
            out,
            "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n{signature}content-length: {}\r\n\r\n{body}",
            body.len()
        )?;
    }
}

#[test]
fn an_answer_that_does_not_prove_the_secret_is_never_relayed() {
    let (cluster, _dir, a, node) = shop_node(TOKEN, &[]);

    // The posing listener, and a record for it that proves the secret.
    let trap = TcpListener::bind("127.0.0.1:0").expect("bind");
    let fake = trap.local_addr().expect("addr").to_string();
    let seen = Arc::new(AtomicU64::new(0));
    let counted = seen.clone();
    std::thread::spawn(move || {
        for stream in trap.incoming().flatten() {
            let seen = counted.clone();
            std::thread::spawn(move || pose(stream, &seen));
        }
    });
    let mut record = NodeRecord {
        id: fake.clone(),
        advertise: fake.clone(),
        started_at_us: 1,
        proof: None,
    };
    record.proof = prove(CLUSTER_SECRET.as_bytes(), &record);
    list_member(
        &cluster,
        &fake,
        &serde_json::to_string(&record).expect("json"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while sample(&metrics(a), "punctual_cluster_live_nodes") != 2 {
        assert!(Instant::now() < deadline, "the proven record never counted");
        std::thread::sleep(Duration::from_millis(100));
    }

    let ids = [a.to_string(), fake.clone()];
    let posed = owned_by(&fake, &ids);
    let auth = format!("Bearer {TOKEN}");
    let (mut refused, mut served) = (0u64, 0u64);
    for (key, r) in put_keys(a, &auth, 200) {
        if posed.contains(&partition_of("shop", &key)) {
            assert_eq!(
                (r.status, r.code()),
                (503, "peer_unavailable".to_string()),
                "PUT {key}, forwarded to the posing listener, got its answer relayed: {:?}",
                r.json()
            );
            let message = r.json()["error"]["message"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            assert!(
                message.contains("not relayed") && message.contains("punctual-answer-signature"),
                "the refusal does not say why: {message}"
            );
            refused += 1;
        } else {
            assert_eq!(r.status, 201, "PUT {key} on the real node: {:?}", r.json());
            served += 1;
        }
    }
    assert!(
        refused > 0 && served > 0,
        "{refused} refused, {served} served"
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        refused,
        "each refused answer came from a forward the listener answered"
    );
    let text = metrics(a);
    let unverified = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("punctual_cluster_forwards_total{outcome=\"unverified\"} ")?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    assert_eq!(unverified, refused, "refusals counted in /metrics");
    let log = node.stderr_text();
    assert!(
        log.contains("does not prove the cluster's secret") && log.contains(&fake),
        "no log line names the refused answer and its address: {log}"
    );
}
