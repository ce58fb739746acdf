use super::*;
use crate::engine::Scheduled;
use crate::units::UtcMicros;

/// The answer encoded a slice at a time is byte for byte what `serde_json` makes of the
/// whole body, for no result, one, and enough to cross many slices, scheduled, replaced
/// and failed (with and without a key) mixed.
#[test]
fn encoding_in_slices_matches_serde_on_the_whole_body() {
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor");
    ex.run(async {
        for n in [0usize, 1, 20_000] {
            let results = (0..n)
                .map(|i| match i % 3 {
                    0 => BatchItem::scheduled(
                        format!("order-{i}"),
                        &Scheduled {
                            version: i as u64,
                            deadline: UtcMicros(1_700_000_000_000_000 + i as u64),
                            replaced: i % 2 == 0,
                        },
                    ),
                    1 => BatchItem::failed(
                        Some(format!("k\"{i}\\")),
                        &ApiError::MalformedJson(format!("item {i}: bad \u{1F600}")),
                    ),
                    _ => BatchItem::failed(None, &ApiError::EmptyBatch),
                })
                .collect();
            let body = BatchBody { results };
            let serde = serde_json::to_vec(&body).expect("serde encodes");
            let ours = encode(body).await.expect("encodes");
            assert_eq!(ours, serde, "{n} results");
        }
    });
}
