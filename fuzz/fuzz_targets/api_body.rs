//! The HTTP request bodies on arbitrary bytes: a single timer's (`parse_put`), a batch's
//! (`parse_batch`, then every item), and the deadline forms they resolve. Nothing may panic;
//! an accepted deadline must lie between the epoch and now + 10 years.
#![no_main]

use libfuzzer_sys::fuzz_target;
use punctual::api::body::{parse_batch, parse_item, parse_put};
use punctual::units::{UtcMicros, TEN_YEARS_US};

const NOW: UtcMicros = UtcMicros(1_800_000_000_000_000);

fuzz_target!(|data: &[u8]| {
    if let Ok(reg) = parse_put(data, NOW) {
        assert!(reg.deadline.0 <= NOW.0 + TEN_YEARS_US);
        assert!(reg.payload.len() <= data.len());
    }
    if let Ok(items) = parse_batch(data) {
        for item in items {
            if let Ok((_key, reg)) = parse_item(item, NOW) {
                assert!(reg.deadline.0 <= NOW.0 + TEN_YEARS_US);
            }
        }
    }
});
