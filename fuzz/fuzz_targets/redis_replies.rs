//! The Redis reply reader and judge on arbitrary bytes: RESP split across reads, then judged
//! against pipelines of several shapes (plain and MULTI/EXEC). Nothing may panic; a settled
//! pipeline answers every entry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use punctual::store::redis::replies::judge_wire;

fuzz_target!(|data: &[u8]| {
    let Some((&shape, wire)) = data.split_first() else {
        return;
    };
    let sizes: Vec<usize> = (0..1 + usize::from(shape % 4))
        .map(|i| 1 + usize::from((shape >> (2 + i)) & 1))
        .collect();
    let atomic = shape & 0x80 != 0;
    if let Ok(settled) = judge_wire(&sizes, atomic, wire) {
        assert_eq!(settled, sizes.len());
    }
});
