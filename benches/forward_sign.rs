//! The cost a signed forward adds on each side (`src/api/forward_sign.rs`): one HMAC-SHA256
//! under the cluster's secret over the head (method, path, forwarding node, `Authorization`,
//! time, nonce) and the body; and the cost of its signed answer.
//!
//! - `forward_sign/put`: a forwarded PUT (`/v1/timers/shop/order-12345`, a bearer token, a
//!   20-byte body): what the forwarding node computes and the owner recomputes to verify.
//! - `forward_sign/nonce`: each forward's nonce (a per-process random prefix and a count).
//! - `forward_sign/sub-batch 1 MiB`: a sub-batch of about 10,000 small items, per byte.
//! - `forward_sign/answer`: the owner's answer to that PUT (`201`, `content-type`, a 64-byte
//!   body) signed as the owner does and verified as the forwarding node does
//!   (`src/api/forward_answer.rs`): both sides' cost of a signed answer together.
//!
//! Run: `cargo bench --bench forward_sign` (about 20 s). Smoke test: `cargo bench --bench
//! forward_sign -- --test`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::StatusCode;
use punctual::api::forward_answer::{answer_signature, verify, AnswerHead};
use punctual::api::forward_sign::{nonce, signature, Head};
use std::hint::black_box;

const SECRET: &[u8] = b"a-cluster-secret-of-at-least-32-bytes-0123";

fn head(nonce: &str) -> Head<'_> {
    Head {
        method: "PUT",
        path: "/v1/timers/shop/order-12345",
        node: b"10.0.0.5:7480",
        auth: b"Bearer tenant-token-0123456789abcdef0123456789",
        t_ms: 1_796_621_487_577,
        nonce,
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("forward_sign");
    let n = nonce();
    let put = br#"{"delay_ms":600000}"#;
    g.bench_function("put", |b| {
        b.iter(|| signature(SECRET, black_box(&head(&n)), black_box(put)))
    });
    g.bench_function("nonce", |b| b.iter(nonce));
    let request = signature(SECRET, &head(&n), put);
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let answer = br#"{"tenant":"shop","key":"order-12345","version":17,"fire_at_us":1796}"#;
    let h = AnswerHead {
        request: request.as_bytes(),
        status: StatusCode::CREATED,
        headers: &headers,
    };
    g.bench_function("answer", |b| {
        b.iter(|| {
            let s = answer_signature(SECRET, black_box(&h), black_box(answer));
            let given = HeaderValue::from_str(&s).ok();
            let checked = verify(SECRET, black_box(&h), given.as_ref(), black_box(answer));
            futures_lite::future::block_on(checked)
        })
    });
    let batch = vec![b'x'; 1 << 20];
    g.throughput(Throughput::Bytes(batch.len() as u64));
    g.bench_function("sub-batch 1 MiB", |b| {
        b.iter(|| signature(SECRET, black_box(&head(&n)), black_box(&batch)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
