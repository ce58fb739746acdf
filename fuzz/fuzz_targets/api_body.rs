//! The HTTP request bodies on arbitrary bytes: a single timer's (`parse_put`), a batch's (the
//! scan, `parse_batch`, then every item), and the deadline forms they resolve. Nothing may
//! panic; an accepted deadline must lie between the epoch and now + 10 years.
//!
//! The batch parser is held to serde_json's reading of the whole body
//! (`src/api/scan_reference.rs`): the same items, or the same refusal, kind, message and
//! position included. Within the fuzzer's lengths no item, name or value reaches the scan's
//! bounds (`MAX_ITEM_BYTES`), where the two part on purpose.
#![no_main]

use libfuzzer_sys::fuzz_target;
use punctual::api::body::{parse_item, parse_put, MAX_BATCH_ITEMS, MAX_ITEM_BYTES};
use punctual::api::error::ApiError;
use punctual::api::scan::parse_batch;
use punctual::units::{UtcMicros, TEN_YEARS_US};
use serde_json::value::RawValue;

#[path = "../../src/api/scan_reference.rs"]
mod reference;

const NOW: UtcMicros = UtcMicros(1_800_000_000_000_000);

/// A batch's answer with its items as text, to compare.
fn texts<'a>(r: &Result<Vec<&'a RawValue>, ApiError>) -> Result<Vec<&'a str>, ApiError> {
    r.as_ref()
        .map(|items| items.iter().map(|i| i.get()).collect())
        .map_err(Clone::clone)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(reg) = parse_put(data, NOW) {
        assert!(reg.deadline.0 <= NOW.0 + TEN_YEARS_US);
        assert!(reg.payload.len() <= data.len());
    }
    let ours = parse_batch(data);
    if data.len() <= MAX_ITEM_BYTES {
        assert_eq!(
            texts(&ours),
            texts(&reference::parse_batch(data)),
            "{:?}",
            String::from_utf8_lossy(data)
        );
    }
    if let Ok(items) = ours {
        for item in items {
            if let Ok((_key, reg)) = parse_item(item, NOW) {
                assert!(reg.deadline.0 <= NOW.0 + TEN_YEARS_US);
            }
        }
    }
});
