//! The journal's files: their names, and the header block each begins with.
//!
//! A shard's directory holds segments `seg-<seq>.log` (the log, in order of `seq`, 16 hex
//! digits), at most one snapshot `snap-<seq>.snap` (the live timers of every segment before
//! `seq`), and, while one is written, `snap-<seq>.tmp`, which no reader trusts.
//!
//! ```text
//!   header (the first block of every file, zero-padded to the block):
//!     magic "PUNCTJNL" | format: u16 | kind: u8 (1 segment, 2 snapshot) | flags: u8 |
//!     block: u32 | shard: u32 | shards: u32 | seq: u64 | crc32c of the preceding 32 bytes: u32
//! ```
//!
//! Records start at the second block. `block` is the unit the writer aligns each commit to.
//! `flags` bit 0 (`UNSYNCED`, segments only): its commits were acknowledged before they were
//! synced (`--fsync everysec` or `never`), so a power cut may leave any part of its unsynced
//! tail unwritten, holes before written blocks included (see `scan`, `Role::LastUnsynced`).

use super::record::FORMAT;
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"PUNCTJNL";

/// The block every commit starts on, and the header's size: at least the device's direct-I/O
/// alignment on any disk this runs on (512 or 4096).
pub const BLOCK: usize = 4096;

const HEADER_LEN: usize = 36;

/// Header flag: the segment's commits were not synced one by one.
pub const UNSYNCED: u8 = 1;

/// The header's flags byte (0 when `buf` is too short to hold one).
pub fn flags(buf: &[u8]) -> u8 {
    buf.get(11).copied().unwrap_or(0)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Segment = 1,
    Snapshot = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub block: u32,
    pub shard: u32,
    pub shards: u32,
    pub seq: u64,
}

impl Header {
    /// The header block, `BLOCK` bytes.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_flagged(0)
    }

    /// The header block with `flags` (see [`UNSYNCED`]).
    pub fn encode_flagged(&self, flags: u8) -> Vec<u8> {
        let mut b = Vec::with_capacity(BLOCK);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&FORMAT.to_le_bytes());
        b.push(self.kind as u8);
        b.push(flags);
        b.extend_from_slice(&self.block.to_le_bytes());
        b.extend_from_slice(&self.shard.to_le_bytes());
        b.extend_from_slice(&self.shards.to_le_bytes());
        b.extend_from_slice(&self.seq.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.resize(BLOCK, 0);
        b
    }

    /// The header at the start of `buf`, or why it is not one.
    pub fn decode(buf: &[u8]) -> Result<Header, String> {
        let h = buf
            .get(..HEADER_LEN)
            .ok_or_else(|| format!("{} bytes, shorter than a header", buf.len()))?;
        if &h[..8] != MAGIC {
            return Err("not a punctual journal file (bad magic)".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        if crc32c::crc32c(&h[..32]) != u32_at(32) {
            return Err("header CRC mismatch".into());
        }
        let format = u16::from_le_bytes([h[8], h[9]]);
        if format != FORMAT {
            return Err(format!(
                "journal format {format}; this build reads format {FORMAT} only (before 1.0, formats are not migrated: let the timers drain with the build that wrote them, or start on an empty --data-dir)"
            ));
        }
        let kind = match h[10] {
            1 => Kind::Segment,
            2 => Kind::Snapshot,
            k => return Err(format!("unknown file kind {k}")),
        };
        let block = u32_at(12);
        if !block.is_power_of_two() || block < 512 || block as usize > buf.len().max(BLOCK) {
            return Err(format!("impossible block size {block}"));
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&h[24..32]);
        Ok(Header {
            kind,
            block,
            shard: u32_at(16),
            shards: u32_at(20),
            seq: u64::from_le_bytes(seq),
        })
    }
}

pub fn segment_name(seq: u64) -> String {
    format!("seg-{seq:016x}.log")
}

pub fn snapshot_name(seq: u64) -> String {
    format!("snap-{seq:016x}.snap")
}

pub fn snapshot_tmp_name(seq: u64) -> String {
    format!("snap-{seq:016x}.tmp")
}

/// What a shard's directory holds, by name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Segment sequence numbers, ascending.
    pub segments: Vec<u64>,
    /// Snapshot sequence numbers, ascending.
    pub snapshots: Vec<u64>,
    /// Unfinished snapshots and anything else the journal does not read.
    pub leftovers: Vec<PathBuf>,
}

impl Listing {
    pub fn read(dir: &Path) -> std::io::Result<Listing> {
        let mut l = Listing::default();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let seq = |prefix: &str, suffix: &str| {
                name.strip_prefix(prefix)
                    .and_then(|r| r.strip_suffix(suffix))
                    .filter(|h| h.len() == 16)
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
            };
            if let Some(s) = seq("seg-", ".log") {
                l.segments.push(s);
            } else if let Some(s) = seq("snap-", ".snap") {
                l.snapshots.push(s);
            } else if seq("snap-", ".tmp").is_some() {
                l.leftovers.push(entry.path());
            }
        }
        l.segments.sort_unstable();
        l.snapshots.sort_unstable();
        Ok(l)
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
