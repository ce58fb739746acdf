//! The journal's decoder on arbitrary bytes: `decode_at` at every offset the scan reaches, the
//! scan itself in every role and damage policy, and the file header. Nothing may panic, loop
//! or read out of bounds; every record returned must lie inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use punctual::store::journal::file::Header;
use punctual::store::journal::record::{decode_at, Step};
use punctual::store::journal::scan::{Role, Scan};

fuzz_target!(|data: &[u8]| {
    let _ = Header::decode(data);
    // The first byte picks the block size and where the scan starts.
    let block = 512usize << (data.first().copied().unwrap_or(0) % 4);
    let start = usize::from(data.get(1).copied().unwrap_or(0));
    for role in [Role::Last, Role::Sealed, Role::Snapshot] {
        for skip in [false, true] {
            let mut scan = Scan::new(data, start, block, role, skip);
            let mut last = 0usize;
            for item in scan.by_ref() {
                if let Ok((_, frame, at)) = item {
                    assert!(at + frame.len() <= data.len());
                    assert!(at >= last, "the scan goes forward");
                    last = at;
                }
            }
            assert!(scan.end <= data.len().max(start));
        }
    }
    for at in 0..data.len().min(64) {
        if let Step::Record { frame, next, .. } = decode_at(data, at, block) {
            assert_eq!(next, at + frame.len());
            assert!(next <= data.len());
        }
    }
});
