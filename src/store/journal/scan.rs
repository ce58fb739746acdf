//! Reading a file's records in order, and judging damage: a torn tail, or corruption.
//!
//! A record that does not decode at offset X is judged by what follows it:
//!
//! | what follows X | in the last segment | in any other file |
//! |---|---|---|
//! | a later commit (a valid `batch` record on a block boundary; in a snapshot, any valid record) | corruption | corruption |
//! | nothing valid | a torn tail: the commit a crash cut short; truncated at X, counted | corruption |
//!
//! Within a commit, every record its `batch` record counts must be there: zeros (padding, or
//! the end) while records are still owed are damage like any other, judged by the same rule
//! (a torn tail when no later commit follows in the last segment, else corruption), so a run
//! of zeros that ends on a block boundary can never hide acknowledged records. And each
//! `batch` record must carry the sequence that follows the one before it (the first, the one
//! the caller expects: see `replay`); any other is corruption, never a torn write, since
//! blocks are never reused. A snapshot's `end` record is its last: the scan stops there.
//!
//! The newest segment of a journal written with `--fsync everysec` or `never` (its header says
//! `UNSYNCED`) is read as `Role::LastUnsynced`: its commits were acknowledged before they were
//! synced, and a power cut may leave any of its unsynced blocks unwritten while later ones
//! reached the disk (writeback has no order). There the first damage of any kind ends the log:
//! the rest is truncated and counted as torn, which recovers the longest valid prefix, the
//! state of the journal at some instant before the cut. (Every older segment was synced before
//! the next one began, so this holds only for the newest.)
//!
//! Corruption stops the start with an error that names the file and X, unless the store
//! skips corrupt records, in which case the scan resumes at the next valid commit (or record)
//! and counts one corrupt region. Only one commit is ever in flight, and commits start on
//! block boundaries of files that are never reused, so a later `batch` record proves that X
//! was acknowledged data. Damage inside the very last commit of the last segment cannot be
//! told from a torn write: it is truncated and counted as torn.

use super::record::{decode_at, kind, Record, Step};

/// Where a file stands in the shard's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The newest segment: its tail may be torn.
    Last,
    /// The newest segment, its commits acknowledged before they were synced: any damage ends
    /// its log (see the module doc).
    LastUnsynced,
    /// A segment with newer ones after it: synced whole before the next one began.
    Sealed,
    /// A snapshot: written whole and synced before its name was given.
    Snapshot,
}

/// Damage that stops the start: the offset and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub offset: usize,
    pub why: String,
}

/// The records of one file, in order (see the module doc for damage).
pub struct Scan<'a> {
    buf: &'a [u8],
    block: usize,
    at: usize,
    role: Role,
    skip_corrupt: bool,
    done: bool,
    /// Records left in the current commit, from its `batch` record: once they are read, the
    /// rest of the block is padding. (Zeros alone cannot tell padding of fewer than four
    /// bytes from the start of a length that crosses the block boundary.)
    left: Option<u32>,
    /// The commit just ended: check that the rest of the block is zeros, then skip it.
    pad: bool,
    /// The sequence the next `batch` record must carry (`None`: any, e.g. after skipped
    /// damage).
    next_batch: Option<u64>,
    /// The first and the last batch sequence read.
    pub first_batch: Option<u64>,
    pub last_batch: Option<u64>,
    /// Where the valid data ends so far (after the last good record).
    pub end: usize,
    /// The tail was torn (the newest segment only): truncate at `end`.
    pub torn: bool,
    /// Corrupt regions skipped.
    pub corrupt: u64,
    /// Each region skipped (`skip_corrupt`), for `journal check`.
    pub skipped: Vec<Region>,
    /// The newest segment's unsynced tail ended at damage with commits after it: those
    /// commits were acknowledged and are dropped (a power cut under `everysec` or `never`).
    pub dropped_after_tear: bool,
    /// The highest version the whole records of those dropped commits carry: their timers
    /// may have fired under it, so the version floor counts it though their state is gone.
    pub dropped_versions: u64,
}

/// A region the scan skipped: from `offset` to `resume` (`None`: the end of the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub offset: usize,
    pub resume: Option<usize>,
    pub why: String,
}

/// One record, its whole frame and its offset.
pub type Item<'a> = (Record<'a>, &'a [u8], usize);

impl<'a> Scan<'a> {
    /// Records from `start` (the first block after the header).
    pub fn new(buf: &'a [u8], start: usize, block: usize, role: Role, skip: bool) -> Scan<'a> {
        Scan {
            buf,
            block: block.max(1),
            at: start,
            role,
            skip_corrupt: skip,
            done: false,
            left: None,
            pad: false,
            next_batch: None,
            first_batch: None,
            last_batch: None,
            end: start,
            torn: false,
            corrupt: 0,
            skipped: Vec::new(),
            dropped_after_tear: false,
            dropped_versions: 0,
        }
    }

    /// Requires the first `batch` record to carry `seq` (and each later one the next).
    pub fn expecting(mut self, seq: u64) -> Scan<'a> {
        self.next_batch = Some(seq);
        self
    }

    /// A `batch` record with `seq` at `at`: checks it follows, and starts its commit.
    fn batch(&mut self, at: usize, seq: u64, records: u32) -> Option<Damage> {
        let wanted = self.next_batch;
        self.next_batch = seq.checked_add(1);
        self.first_batch.get_or_insert(seq);
        self.last_batch = Some(seq);
        self.left = Some(records);
        match wanted {
            Some(w) if w != seq => {
                let why = format!(
                    "the commit here is batch {seq} where batch {w} belongs: {}",
                    if seq > w {
                        "commits are missing before it (a lost or zeroed file or region)"
                    } else {
                        "it repeats or goes back (a file from elsewhere?)"
                    }
                );
                if self.skip_corrupt {
                    self.corrupt += 1;
                    tracing::error!(offset = at, %why, "journal: a gap in the log skipped");
                    self.skipped.push(Region {
                        offset: at,
                        resume: Some(at),
                        why,
                    });
                    None
                } else {
                    self.done = true;
                    Some(Damage { offset: at, why })
                }
            }
            _ => None,
        }
    }

    /// Checks that the `records` records of the commit whose first one starts at `from` are
    /// all there and whole, before any of them is handed on: a commit counts whole or not at
    /// all. Where and why it is not.
    fn whole_commit(&self, from: usize, records: u32) -> Result<(), (usize, String)> {
        let mut at = from;
        for i in 0..records {
            match decode_at(self.buf, at, self.block) {
                Step::Record {
                    record: Record::Batch { .. },
                    ..
                } => {
                    let why = format!(
                        "a commit begins where its predecessor still owes {} records",
                        records - i
                    );
                    return Err((at, why));
                }
                Step::Record { next, .. } => at = next,
                Step::Bad(bad) => return Err((at, bad.to_string())),
                Step::Padding { .. } | Step::End => {
                    let why = format!("zeros where the commit still owes {} records", records - i);
                    return Err((at, why));
                }
            }
        }
        Ok(())
    }

    /// The first offset at or after `from` where valid data resumes.
    fn resync(&self, from: usize) -> Option<usize> {
        match self.role {
            Role::Snapshot => (from..self.buf.len()).find(|&y| {
                matches!(
                    decode_at(self.buf, y, self.block),
                    Step::Record { record, .. } if !matches!(record, Record::Batch { .. })
                )
            }),
            Role::Last | Role::LastUnsynced | Role::Sealed => {
                let first = from.div_ceil(self.block).saturating_mul(self.block);
                (first..self.buf.len()).step_by(self.block).find(|&y| {
                    matches!(
                        decode_at(self.buf, y, self.block),
                        Step::Record { frame, .. } if frame.get(8) == Some(&kind::BATCH)
                    )
                })
            }
        }
    }

    /// The highest version of the whole records in the commits that start on a block from
    /// `from` on (each read until its first damage).
    fn versions_after(&self, from: usize) -> u64 {
        let (mut highest, mut at) = (0, from);
        while let Some(y) = self.resync(at) {
            let mut x = y;
            while let Step::Record { record, next, .. } = decode_at(self.buf, x, self.block) {
                highest = record.version().map_or(highest, |v| highest.max(v));
                x = next;
            }
            at = x.max(y + 1);
        }
        highest
    }

    /// Damage at `at`: resume past it, stop as a torn tail, or report it.
    fn damaged(&mut self, at: usize, why: String) -> Option<Result<Item<'a>, Damage>> {
        if self.role == Role::LastUnsynced {
            if self.resync(at + 1).is_some() {
                self.dropped_after_tear = true;
                self.dropped_versions = self.versions_after(at + 1);
                tracing::warn!(offset = at, %why, "journal: damage in the unsynced tail of the newest segment (a power cut under --fsync everysec or never); the log ends there and the commits after it are dropped");
            }
            self.torn = true;
            self.done = true;
            return None;
        }
        match self.resync(at + 1) {
            Some(y) if self.skip_corrupt => {
                self.corrupt += 1;
                self.left = None;
                self.pad = false;
                self.next_batch = None;
                tracing::error!(offset = at, resumes = y, %why, "journal: corrupt records skipped");
                self.skipped.push(Region {
                    offset: at,
                    resume: Some(y),
                    why,
                });
                self.at = y;
                None
            }
            None if self.role == Role::Last => {
                self.torn = true;
                self.done = true;
                None
            }
            None if self.skip_corrupt => {
                self.corrupt += 1;
                tracing::error!(offset = at, %why, "journal: corrupt records skipped to the end of the file");
                self.skipped.push(Region {
                    offset: at,
                    resume: None,
                    why,
                });
                self.done = true;
                None
            }
            _ => {
                self.done = true;
                Some(Err(Damage { offset: at, why }))
            }
        }
    }
}

impl<'a> Iterator for Scan<'a> {
    type Item = Result<Item<'a>, Damage>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let at = self.at;
            if self.pad {
                self.pad = false;
                let boundary = at.div_ceil(self.block).saturating_mul(self.block);
                let rest = self.buf.get(at..boundary.min(self.buf.len()));
                if rest.is_some_and(all_zero) {
                    self.at = boundary;
                    continue;
                }
                let why = "non-zero bytes after the last record of a commit".to_string();
                if let Some(out) = self.damaged(at, why) {
                    return Some(out);
                }
                continue;
            }
            match decode_at(self.buf, at, self.block) {
                Step::Record {
                    record,
                    frame,
                    next,
                } => {
                    let segment = self.role != Role::Snapshot;
                    match record {
                        Record::Batch { seq, records } if segment => {
                            if let Err((x, why)) = self.whole_commit(next, records) {
                                if let Some(out) = self.damaged(x, why) {
                                    return Some(out);
                                }
                                continue;
                            }
                            if let Some(d) = self.batch(at, seq, records) {
                                return Some(Err(d));
                            }
                        }
                        _ if segment && self.left.is_none() => {
                            let why = "a record outside any commit (no batch record opens it)";
                            if let Some(out) = self.damaged(at, why.to_string()) {
                                return Some(out);
                            }
                            continue;
                        }
                        Record::End(_) if !segment => self.done = true,
                        _ => {
                            if let Some(l) = self.left.as_mut() {
                                *l = l.saturating_sub(1);
                            }
                        }
                    }
                    self.at = next;
                    self.end = next;
                    if self.left == Some(0) {
                        self.left = None;
                        self.pad = true;
                    }
                    return Some(Ok((record, frame, at)));
                }
                Step::Padding { next } => self.at = next,
                Step::End => {
                    // Zeros on a block boundary end the data, unless a later commit exists.
                    if self.role != Role::Snapshot && self.resync(at + 1).is_some() {
                        let why = "a block of zeros where the log continues".to_string();
                        if let Some(out) = self.damaged(at, why) {
                            return Some(out);
                        }
                        continue;
                    }
                    self.done = true;
                }
                Step::Bad(bad) => {
                    if let Some(out) = self.damaged(at, bad.to_string()) {
                        return Some(out);
                    }
                }
            }
        }
        None
    }
}

/// Whether `bytes` are all zero: compared a page at a time with `memcmp`, not byte by byte (a
/// segment of small commits is mostly the zeros that pad each to its block).
fn all_zero(bytes: &[u8]) -> bool {
    static ZEROS: [u8; 4096] = [0; 4096];
    bytes.chunks(ZEROS.len()).all(|c| c == &ZEROS[..c.len()])
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
