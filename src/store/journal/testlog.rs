//! Test helpers: shard directories written record by record, as the commit task and
//! compaction would lay them out, for the recovery tests of `replay`, `scan` and `layout`.

use super::file::{segment_name, snapshot_name, Header, Kind, BLOCK};
use super::record::{self, End};
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::path::Path;

/// One record's frame.
pub type Frame = Vec<u8>;

pub fn timer(key: &str, meta: &[u8]) -> PackedTimer {
    PackedTimer::with_meta("t", key, meta, b"p").expect("fits")
}

pub fn schedule(key: &str, version: u64) -> Frame {
    let mut b = Vec::new();
    record::put_timer(&mut b, false, version, UtcMicros(1), &timer(key, b""));
    b
}

pub fn dead(key: &str, version: u64) -> Frame {
    let mut b = Vec::new();
    record::put_dead_letter(&mut b, version, UtcMicros(1), &timer(key, b"dead"));
    b
}

pub fn redrive(key: &str, version: u64) -> Frame {
    let mut b = Vec::new();
    record::put_redrive(&mut b, version, UtcMicros(1), &timer(key, b""));
    b
}

pub fn cancel(key: &str) -> Frame {
    let mut b = Vec::new();
    record::put_cancel(&mut b, "t", key);
    b
}

pub fn fired(key: &str, version: u64) -> Frame {
    let mut b = Vec::new();
    record::put_fired(&mut b, version, "t", key);
    b
}

pub fn dead_removed(key: &str) -> Frame {
    let mut b = Vec::new();
    record::put_dead_removed(&mut b, "t", key);
    b
}

fn header(kind: Kind, seq: u64) -> Vec<u8> {
    Header {
        kind,
        block: BLOCK as u32,
        shard: 0,
        shards: 1,
        seq,
    }
    .encode()
}

/// Segment `seq` in `dir`: one commit per element, batch sequences from `first_batch`.
pub fn segment(dir: &Path, seq: u64, first_batch: u64, commits: &[Vec<Frame>]) -> Vec<u8> {
    let mut b = header(Kind::Segment, seq);
    for (i, c) in commits.iter().enumerate() {
        record::put_batch(&mut b, first_batch + i as u64, c.len() as u32);
        for f in c {
            b.extend_from_slice(f);
        }
        b.resize(b.len().div_ceil(BLOCK) * BLOCK, 0);
    }
    std::fs::write(dir.join(segment_name(seq)), &b).expect("write segment");
    b
}

/// Snapshot `seq` in `dir` holding `entries`, covering batches up to `last_batch`.
pub fn snapshot(dir: &Path, seq: u64, entries: &[Frame], last_batch: u64, version_floor: u64) {
    let mut b = header(Kind::Snapshot, seq);
    for f in entries {
        b.extend_from_slice(f);
    }
    let end = End {
        entries: entries.len() as u64,
        last_batch,
        version_floor,
    };
    record::put_end(&mut b, end);
    std::fs::write(dir.join(snapshot_name(seq)), &b).expect("write snapshot");
}
