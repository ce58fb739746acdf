//! Replay: the live timers and dead letters of a snapshot and the segments after it, without
//! holding a copy of each.
//!
//! ```text
//!   1. index the segments, oldest first: (set, identity) → the location of its last record
//!      in that set, live or gone (`Record::effect`: the pending timers and the dead letters
//!      are two sets, and a timer and a dead letter with the same identity coexist)
//!   2. live entries = the snapshot's entries whose (set, identity) the index does not hold
//!                   + the index's live entries, decoded from their frames
//! ```
//!
//! Replay also finds the version floor: the highest version any record it read carried (a
//! snapshot's end record holds that of the records it replaced), so that the shard never
//! hands out a version again even when the clock has stepped back.
//!
//! The index stores 12 bytes per entry (32 bits of the identity's hash, file, offset, set, live)
//! in 4,096 tables of cache lines chosen by hash bits (`parts.rs`: compaction builds the
//! index on the shard's thread, where one table's doubling was a stop the pacing could not
//! cut; a probe is one line, asked for [`AHEAD`] records before it is read); the identity it
//! compares is read from the frame in the loaded file, so nothing is copied. The kept hash
//! bits are what the tables hash by, so growing the index reads no frame: with only the
//! location kept, each doubling reread every identity from the files, and that rehashing was
//! 15% of recovering ten million timers (`cargo bench --bench pending -- --timers 10000000`,
//! profiled). Snapshots hold each identity once, so they are streamed, not indexed. Recovery
//! hands the live timers to the shard; compaction copies their frames, verbatim, into the next
//! snapshot; a change of shard count sends each to its new owner.
//!
//! Cost: one hash and one probe per segment record, one lookup per snapshot record; memory
//! is the index plus the pages of the files that replay touches. Files are mapped, not read
//! into the heap: their pages are the kernel's page cache, given back when the mapping
//! goes, and the reserved zero tail of a segment cut short by a crash costs no heap.
//!
//! `source.rs` holds a file as replay reads it (mapped), `report.rs` what replay found wrong
//! and the messages that stop a start, `pace.rs` how it shares the shard's thread; the index
//! and the two steps are here.

#[cfg(test)]
mod continuity_tests;
mod order;
mod pace;
mod parts;
mod report;
mod source;
#[cfg(test)]
mod tests;

pub use pace::Pace;
pub use report::{corrupt_error, data_dir_of, Report};
pub use source::{Buf, Source};

use super::record::{kind, Effect, End, Record, Timer};
use super::scan::{Damage, Region, Role, Scan};
use parts::Parts;
use report::gap;
use std::hash::BuildHasher;

/// Records loaded between two checks of the start's stop flag.
pub const YIELD_EVERY: usize = 4096;

/// Where an identity's last record in one set lies.
#[derive(Clone, Copy)]
struct Loc {
    /// The identity's hash, 32 bits of it ([`hash_of`]).
    hash: u32,
    /// The file's place in the segments, with [`DEAD`] and [`LIVE`] in its top bits.
    src: u32,
    off: u32,
}

/// [`Loc::src`]'s bit for the set: dead letters (set) or pending timers.
const DEAD: u32 = 1 << 31;
/// [`Loc::src`]'s bit for a live entry (a gone one is not).
const LIVE: u32 = 1 << 30;
/// The most segments one replay reads: the files' places stay below the two flag bits.
const MAX_SEGMENTS: usize = 1 << 30;

impl Loc {
    fn new(hash: u32, src: usize, off: usize, dead: bool, live: bool) -> Loc {
        let flags = if dead { DEAD } else { 0 } | if live { LIVE } else { 0 };
        Loc {
            hash,
            src: src as u32 | flags,
            off: off as u32,
        }
    }

    fn src(&self) -> usize {
        (self.src & !(DEAD | LIVE)) as usize
    }

    fn dead(&self) -> bool {
        self.src & DEAD != 0
    }

    fn live(&self) -> bool {
        self.src & LIVE != 0
    }

    fn key<'a>(&self, segments: &'a [Source]) -> (bool, &'a [u8]) {
        (self.dead(), identity_at(segments, *self))
    }

    /// Whether this entry is (set, id)'s, whose hash is `hash`: the kept bits first, so that a
    /// frame is read only for a likely match.
    fn is(&self, hash: u32, key: (bool, &[u8]), segments: &[Source]) -> bool {
        self.hash == hash && self.key(segments) == key
    }
}

/// A 64-bit hash from the 32 bits an entry keeps: a multiply spreads them over the high half,
/// which places an entry's line in its part (`parts.rs`).
fn widen(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

pub struct Replay {
    snapshot: Option<Source>,
    segments: Vec<Source>,
    index: Parts,
    /// Entries of the index that are live.
    index_live: usize,
    hasher: foldhash::fast::FixedState,
    skip_corrupt: bool,
    /// The snapshot's end record, once [`Replay::check_snapshot`] read it.
    snapshot_end: End,
    /// The snapshot's entries, once [`Replay::check_snapshot`] counted them.
    snapshot_entries: Option<u64>,
    /// Whether the newest segment may have a torn tail (false for compaction, which reads
    /// only sealed segments).
    last_may_tear: bool,
    pub report: Report,
}

impl Replay {
    pub fn new(
        snapshot: Option<Source>,
        segments: Vec<Source>,
        skip_corrupt: bool,
        last_may_tear: bool,
    ) -> Replay {
        Replay {
            snapshot,
            segments,
            index: Parts::new(),
            index_live: 0,
            hasher: foldhash::fast::FixedState::with_seed(0x7075_6e63),
            skip_corrupt,
            snapshot_end: End::default(),
            snapshot_entries: None,
            last_may_tear,
            report: Report::default(),
        }
    }

    /// Step 1: checks the snapshot ([`Replay::check_snapshot`]), then indexes every segment,
    /// oldest first, yielding to the executor as it goes. The log must be continuous: the
    /// first segment is the snapshot's seq (or 1), each next one the seq after it, and the
    /// batch sequence runs on from the snapshot's last batch without a gap (see `scan`).
    pub async fn index(&mut self) -> Result<(), String> {
        self.check_snapshot().await?;
        let skip = self.skip_corrupt;
        let mut next_seg = self.snapshot.as_ref().map_or(1, |s| s.header.seq);
        // Values read from disk saturate: a CRC-valid u64::MAX must not overflow, and the
        // continuity check stays on.
        let mut next_batch = Some(self.snapshot_end.last_batch.saturating_add(1));
        let Replay {
            segments,
            index,
            index_live,
            hasher,
            report,
            ..
        } = self;
        if segments.len() > MAX_SEGMENTS {
            return Err(format!(
                "{} segments after the snapshot: one replay reads at most {MAX_SEGMENTS}",
                segments.len()
            ));
        }
        // An entry keeps a record's offset in 32 bits; the journal never writes a segment
        // over 1 GiB (`segment_bytes`), so a bigger file is not one of its segments.
        if let Some(big) = segments.iter().find(|s| s.buf.len() > u32::MAX as usize) {
            return Err(format!(
                "{}: {} bytes, more than a segment can hold (4 GiB)",
                big.path.display(),
                big.buf.len()
            ));
        }
        let last = segments.len().saturating_sub(1);
        let mut pace = Pace::new();
        // Records hashed, their lines asked for, and noted in the index [`AHEAD`] later, in
        // the same order (see `parts.rs`).
        let mut ahead = std::collections::VecDeque::with_capacity(AHEAD + 1);
        for (i, src) in segments.iter().enumerate() {
            let role = if i == last && self.last_may_tear {
                if super::file::flags(&src.buf) & super::file::UNSYNCED != 0 {
                    Role::LastUnsynced
                } else {
                    Role::Last
                }
            } else {
                Role::Sealed
            };
            if src.header.seq != next_seg {
                let d = Damage {
                    offset: 0,
                    why: gap(next_seg, src.header.seq, i == 0),
                };
                if !skip {
                    return Err(corrupt_error(&src.path, &d));
                }
                report.corrupt += 1;
                next_batch = None;
                tracing::error!(file = %src.path.display(), why = %d.why, "journal: a gap in the log skipped");
                let region = Region {
                    offset: 0,
                    resume: Some(0),
                    why: d.why,
                };
                report.skipped.push((src.path.clone(), region));
            }
            next_seg = src.header.seq.saturating_add(1);
            let block = src.header.block as usize;
            let mut scan = Scan::new(&src.buf, block, block, role, skip);
            if let Some(b) = next_batch {
                scan = scan.expecting(b);
            }
            for item in scan.by_ref() {
                pace.step().await;
                let (record, _, off) = item.map_err(|d| corrupt_error(&src.path, &d))?;
                if let Some(v) = record.version() {
                    report.version_floor = report.version_floor.max(v);
                }
                if let Record::Batch { seq, .. } = record {
                    report.last_batch = seq;
                }
                let Some(id) = record.identity() else {
                    continue;
                };
                let (timers, dead) = record.effect();
                for (set, effect) in [(false, timers), (true, dead)] {
                    let Some(effect) = effect else {
                        continue;
                    };
                    let hash = hash_of(hasher, (set, id));
                    index.prefetch(hash);
                    ahead.push_back((set, id, Loc::new(hash, i, off, set, effect == Effect::Live)));
                    if ahead.len() > AHEAD {
                        if let Some((set, id, loc)) = ahead.pop_front() {
                            *index_live = note(index, *index_live, segments, (set, id), loc);
                        }
                    }
                }
            }
            report.corrupt += scan.corrupt;
            report.dropped_after_tear |= scan.dropped_after_tear;
            report.version_floor = report.version_floor.max(scan.dropped_versions);
            let path = &src.path;
            report
                .skipped
                .extend(scan.skipped.drain(..).map(|r| (path.clone(), r)));
            if let Some(b) = scan.last_batch {
                next_batch = b.checked_add(1);
            }
            if scan.corrupt > 0 {
                // Skipped damage may have held commits: the next file's are not a new gap.
                next_batch = None;
            }
            if i == last {
                report.last_end = Some(scan.end as u64);
            }
            if scan.torn {
                report.torn += 1;
                report.truncate = Some((src.path.clone(), scan.end as u64));
            }
        }
        while let Some((set, id, loc)) = ahead.pop_front() {
            *index_live = note(index, *index_live, segments, (set, id), loc);
        }
        Ok(())
    }

    /// Reads the snapshot through once, so that its damage is found before any entry is
    /// handed on; the number of entries (timers and dead letters) it holds. Runs once: a
    /// second call answers the first one's count.
    pub async fn check_snapshot(&mut self) -> Result<u64, String> {
        if let Some(n) = self.snapshot_entries {
            return Ok(n);
        }
        let Some(snap) = &self.snapshot else {
            self.snapshot_entries = Some(0);
            return Ok(0);
        };
        let mut n = 0u64;
        let mut scan = self.snapshot_scan(snap);
        let mut end = None;
        let mut floor = 0;
        let mut pace = Pace::new();
        for item in scan.by_ref() {
            pace.step().await;
            let (record, _, _) = item.map_err(|d| corrupt_error(&snap.path, &d))?;
            floor = floor.max(record.version().unwrap_or(0));
            match record {
                Record::End(e) => end = Some(e),
                r if r.entry().is_some() => n += 1,
                _ => {}
            }
        }
        self.report.corrupt += scan.corrupt;
        let path = &snap.path;
        self.report
            .skipped
            .extend(scan.skipped.drain(..).map(|r| (path.clone(), r)));
        self.report.version_floor = self.report.version_floor.max(floor);
        if let Some(e) = end {
            self.snapshot_end = e;
        }
        self.snapshot_entries = Some(n);
        match end.map(|e| e.entries) {
            Some(t) if t == n || self.skip_corrupt => Ok(n),
            found => {
                let d = Damage {
                    offset: scan.end,
                    why: match found {
                        Some(t) => format!("the snapshot says {t} timers but holds {n}"),
                        None => "the snapshot ends without its end record".into(),
                    },
                };
                if self.skip_corrupt {
                    self.report.corrupt += 1;
                    Ok(n)
                } else {
                    Err(corrupt_error(&snap.path, &d))
                }
            }
        }
    }

    fn snapshot_scan<'a>(&self, snap: &'a Source) -> Scan<'a> {
        let block = snap.header.block as usize;
        Scan::new(&snap.buf, block, block, Role::Snapshot, self.skip_corrupt)
    }

    /// At most how many entries [`Replay::live`] yields (after [`Replay::index`]): the
    /// snapshot's, some of which later records may have replaced, and the index's live ones.
    pub fn live_bound(&self) -> usize {
        self.snapshot_entries.unwrap_or(0) as usize + self.index_live
    }

    /// [`Replay::live`], one item per record looked at: `None` for one that is not live (a
    /// snapshot's entry that a later record replaced, an index entry that is gone). A caller
    /// that shares its thread paces on these (`Pace::step`): a snapshot whose every entry was
    /// replaced since yields nothing live, and skipping it whole (a CRC and a lookup per
    /// entry, 16 MiB of 1.6 KiB timers) held a compacting shard for 3.5 ms in one go.
    pub fn live_steps(&self) -> impl Iterator<Item = Option<(Timer<'_>, &[u8])>> + '_ {
        let from_segments = self.index.iter().map(|l| {
            l.live()
                .then(|| self.segment_entry(l.src(), l.off))
                .flatten()
        });
        self.snapshot_steps().chain(from_segments)
    }

    /// The snapshot's entries, `None` for one a later record replaced.
    fn snapshot_steps(&self) -> impl Iterator<Item = Option<(Timer<'_>, &[u8])>> + '_ {
        self.snapshot
            .iter()
            .flat_map(|s| self.snapshot_scan(s))
            .map(|item| {
                let (record, frame, _) = item.ok()?;
                let set = matches!(record, Record::DeadLetter(_));
                let t = record.entry()?;
                let hash = hash_of(&self.hasher, (set, t.identity));
                self.index
                    .find(hash, |l| l.is(hash, (set, t.identity), &self.segments))
                    .is_none()
                    .then_some((t, frame))
            })
    }

    /// The live entry whose record is at `off` in segment `src`.
    fn segment_entry(&self, src: usize, off: u32) -> Option<(Timer<'_>, &[u8])> {
        let src = self.segments.get(src)?;
        let block = src.header.block as usize;
        match super::record::decode_at(&src.buf, off as usize, block) {
            super::record::Step::Record { record, frame, .. } => Some((record.entry()?, frame)),
            _ => None,
        }
    }

    /// The sequence the next commit must carry: the one after the last batch read.
    pub fn next_batch(&self) -> u64 {
        self.report
            .last_batch
            .max(self.snapshot_end.last_batch)
            .saturating_add(1)
    }

    /// The end record of a snapshot of `entries` of this replay's live entries: the last batch
    /// and the version floor of everything it read.
    pub fn end(&self, entries: u64) -> End {
        End {
            entries,
            last_batch: self.report.last_batch.max(self.snapshot_end.last_batch),
            version_floor: self
                .report
                .version_floor
                .max(self.snapshot_end.version_floor),
        }
    }

    /// (seq, bytes) of the loaded snapshot.
    pub fn snapshot_file(&self) -> Option<(u64, u64)> {
        self.snapshot
            .as_ref()
            .map(|s| (s.header.seq, s.buf.len() as u64))
    }

    /// The loaded segments (for their paths and sizes).
    pub fn segments(&self) -> &[Source] {
        &self.segments
    }

    /// Lets go of segment `seq`'s mapping before its file is cut (the old mapping must not
    /// outlive the bytes it shows), and says where it lies. The index keeps offsets, not
    /// pointers, so it stays valid through [`Replay::map_segment`].
    pub fn unmap_segment(&mut self, seq: u64) -> Option<std::path::PathBuf> {
        let src = self.segments.iter_mut().find(|s| s.header.seq == seq)?;
        src.buf = Buf::Owned(Vec::new());
        Some(src.path.clone())
    }

    /// Maps segment `seq` again (after its file was cut).
    pub fn map_segment(&mut self, seq: u64) -> std::io::Result<()> {
        if let Some(src) = self.segments.iter_mut().find(|s| s.header.seq == seq) {
            src.buf = Buf::map(&src.path)?;
        }
        Ok(())
    }
}

/// Index entries hashed but not yet noted, at most, while indexing: the index's line for each
/// is asked for as it is hashed, so that up to this many misses overlap. About as many as a
/// core keeps in flight (10 to 16 fill buffers). At ten million timers, indexing one shard
/// took 1.4–1.6 s with 4, 8, 16 or 32 ahead alike, and 2.0–2.2 s asking for no line ahead
/// (`docs/BENCHMARKS.md`, "Paging far timers").
const AHEAD: usize = 16;

/// Notes in the index that (set, identity)'s last record is at `loc`, live or gone; the count
/// of live entries after it.
fn note(
    index: &mut Parts,
    live: usize,
    segments: &[Source],
    key: (bool, &[u8]),
    loc: Loc,
) -> usize {
    let hash = loc.hash;
    let live = match index.find_mut(hash, |l| l.is(hash, key, segments)) {
        Some(l) => {
            let was = l.live();
            *l = loc;
            live - usize::from(was)
        }
        None => {
            index.insert_unique(loc);
            live
        }
    };
    live + usize::from(loc.live())
}

/// The 32 bits of (set, identity)'s hash that an index entry keeps.
fn hash_of(hasher: &foldhash::fast::FixedState, key: (bool, &[u8])) -> u32 {
    (hasher.hash_one(key) >> 32) as u32
}

/// The identity of the record at `l`, read without checking its CRC again (it was checked
/// when it was indexed); empty if the bytes are not there.
fn identity_at(segments: &[Source], l: Loc) -> &[u8] {
    let Some(src) = segments.get(l.src()) else {
        return &[];
    };
    let at = l.off as usize;
    let Some(&kind) = src.buf.get(at + 8) else {
        return &[];
    };
    let body = at + 9;
    let start = match kind {
        kind::SCHEDULE | kind::ATTEMPT | kind::DEAD_LETTER | kind::REDRIVE => body + 16,
        kind::CANCEL | kind::DEAD_REMOVED => body,
        kind::FIRED => body + 8,
        _ => return &[],
    };
    let (Some(&t), Some(&k)) = (src.buf.get(start), src.buf.get(start + 1)) else {
        return &[];
    };
    src.buf
        .get(start..start + 2 + usize::from(t) + usize::from(k))
        .unwrap_or_default()
}

/// Lets the executor's other tasks and its reactor run (`cooperate::yield_to_reactor`: a
/// timer, not `yield_now`, so that glommio polls for I/O and timers before coming back).
pub async fn breathe() {
    crate::runtime::cooperate::yield_to_reactor().await;
}
