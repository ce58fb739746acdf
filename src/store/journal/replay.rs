//! Replay: the live timers of a snapshot and the segments after it, without holding a copy of
//! each timer.
//!
//! ```text
//!   1. index the segments, oldest first: identity → the location of its last record
//!      (a schedule or attempt: live at that frame; a cancel, fire or dead letter: gone)
//!   2. live timers = the snapshot's timers whose identity the index does not hold
//!                  + the index's live entries, decoded from their frames
//! ```
//!
//! The index stores 12 bytes per timer (file, offset, live) in a `hashbrown::HashTable`; the
//! identity it hashes and compares is read from the frame in the loaded file, so nothing is
//! copied. Snapshots hold each identity once, so they are streamed, not indexed. Recovery
//! hands the live timers to the shard; compaction copies their frames, verbatim, into the
//! next snapshot; a change of shard count sends each to its new owner.
//!
//! Cost: one hash and one probe per segment record, one lookup per snapshot record; memory
//! is the index plus the pages of the files that replay touches. Files are mapped, not read
//! into the heap: their pages are the kernel's page cache, given back when the mapping
//! goes, and the reserved zero tail of a segment cut short by a crash costs no heap.

use super::file::Header;
use super::record::{kind, Record, Timer};
use super::scan::{Damage, Role, Scan};
use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::path::PathBuf;

/// Records handled between two yields to the executor.
pub const YIELD_EVERY: usize = 4096;

/// A file's bytes: mapped read-only, or (an empty file, a test) owned.
pub enum Buf {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl Buf {
    /// Maps the file at `path` read-only.
    ///
    /// Only files that nothing writes while they are mapped are opened here: at start, before
    /// the shard writes; in compaction, sealed segments and a finished snapshot, never the
    /// segment being written. A file is truncated only after its mapping is dropped.
    pub fn map(path: &std::path::Path) -> std::io::Result<Buf> {
        let file = std::fs::File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(Buf::Owned(Vec::new()));
        }
        // SAFETY: the mapping is read-only and private to this process, and the journal's
        // files are not modified while mapped (see above; the data directory's lock keeps
        // other punctual processes out). Mapping a file that another program truncates is
        // outside that contract: the read would fault (SIGBUS), as it would for any mmap user.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(Buf::Mapped(map))
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Owned(v) => v,
            Buf::Mapped(m) => m,
        }
    }
}

/// One file of the log, loaded.
pub struct Source {
    pub path: PathBuf,
    pub buf: Buf,
    pub header: Header,
}

/// Where an identity's last record lies.
#[derive(Clone, Copy)]
struct Loc {
    src: u32,
    off: u32,
    live: bool,
}

/// What replay found wrong, for the metrics and the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub torn: u64,
    pub corrupt: u64,
    /// The last segment's valid length, when its tail was torn.
    pub truncate: Option<(PathBuf, u64)>,
    /// Where the newest segment's records end (its header's end when it holds none).
    pub last_end: Option<u64>,
}

/// Corruption that stops the start: which file, where, and what to do.
pub fn corrupt_error(path: &std::path::Path, d: &Damage) -> String {
    format!(
        "journal file {} is corrupt at offset {}: {}. Restore the file, or start with --journal-skip-corrupt to skip the damaged records (counted in punctual_journal_corrupt_records)",
        path.display(),
        d.offset,
        d.why
    )
}

pub struct Replay {
    snapshot: Option<Source>,
    segments: Vec<Source>,
    index: HashTable<Loc>,
    hasher: foldhash::fast::FixedState,
    skip_corrupt: bool,
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
            index: HashTable::new(),
            hasher: foldhash::fast::FixedState::with_seed(0x7075_6e63),
            skip_corrupt,
            last_may_tear,
            report: Report::default(),
        }
    }

    /// Step 1: indexes every segment, oldest first, yielding to the executor as it goes.
    pub async fn index(&mut self) -> Result<(), String> {
        let Replay {
            segments,
            index,
            hasher,
            report,
            ..
        } = self;
        let last = segments.len().saturating_sub(1);
        let mut handled = 0usize;
        for (i, src) in segments.iter().enumerate() {
            let role = if i == last && self.last_may_tear {
                Role::Last
            } else {
                Role::Sealed
            };
            let block = src.header.block as usize;
            let mut scan = Scan::new(&src.buf, block, block, role, self.skip_corrupt);
            for item in scan.by_ref() {
                let (record, _, off) = item.map_err(|d| corrupt_error(&src.path, &d))?;
                let Some(id) = record.identity() else {
                    continue;
                };
                let live = matches!(record, Record::Schedule(_) | Record::Attempt(_));
                let loc = Loc {
                    src: i as u32,
                    off: off as u32,
                    live,
                };
                let hash = hasher.hash_one(id);
                let found = index.find_mut(hash, |l| identity_at(segments, *l) == id);
                match found {
                    Some(l) => *l = loc,
                    None => {
                        index.insert_unique(hash, loc, |l| {
                            hasher.hash_one(identity_at(segments, *l))
                        });
                    }
                }
                handled += 1;
                if handled % YIELD_EVERY == 0 {
                    breathe().await;
                }
            }
            report.corrupt += scan.corrupt;
            if i == last {
                report.last_end = Some(scan.end as u64);
            }
            if scan.torn {
                report.torn += 1;
                report.truncate = Some((src.path.clone(), scan.end as u64));
            }
        }
        Ok(())
    }

    /// Reads the snapshot through once, so that its damage is found before any timer is
    /// handed on; the number of timers it holds.
    pub async fn check_snapshot(&mut self) -> Result<u64, String> {
        let Some(snap) = &self.snapshot else {
            return Ok(0);
        };
        let mut n = 0u64;
        let mut scan = self.snapshot_scan(snap);
        let mut end = None;
        for item in scan.by_ref() {
            match item.map_err(|d| corrupt_error(&snap.path, &d))? {
                (Record::Schedule(_) | Record::Attempt(_), _, _) => n += 1,
                (Record::End { timers }, _, _) => end = Some(timers),
                _ => {}
            }
            if n % YIELD_EVERY as u64 == 0 {
                breathe().await;
            }
        }
        self.report.corrupt += scan.corrupt;
        match end {
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

    /// Step 2: every live timer with its frame (run [`Replay::index`] and
    /// [`Replay::check_snapshot`] first; damage they passed is skipped here).
    pub fn live(&self) -> impl Iterator<Item = (Timer<'_>, &[u8])> + '_ {
        let from_snapshot = self
            .snapshot
            .iter()
            .flat_map(|s| self.snapshot_scan(s))
            .filter_map(|item| match item {
                Ok((Record::Schedule(t) | Record::Attempt(t), frame, _)) => Some((t, frame)),
                _ => None,
            })
            .filter(|(t, _)| {
                let hash = self.hasher.hash_one(t.identity);
                self.index
                    .find(hash, |l| identity_at(&self.segments, *l) == t.identity)
                    .is_none()
            });
        let from_segments = self.index.iter().filter(|l| l.live).filter_map(|l| {
            let src = self.segments.get(l.src as usize)?;
            let block = src.header.block as usize;
            match super::record::decode_at(&src.buf, l.off as usize, block) {
                super::record::Step::Record {
                    record: Record::Schedule(t) | Record::Attempt(t),
                    frame,
                    ..
                } => Some((t, frame)),
                _ => None,
            }
        });
        from_snapshot.chain(from_segments)
    }

    /// The loaded segments (for their paths and sizes).
    pub fn segments(&self) -> &[Source] {
        &self.segments
    }

    /// Cuts segment `seq` at `end` with `cut` and maps it again. The index keeps offsets,
    /// not pointers, so it stays valid; the old mapping is dropped before the file shrinks.
    pub fn cut_segment(
        &mut self,
        seq: u64,
        end: u64,
        cut: impl FnOnce(&std::path::Path, u64) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let Some(src) = self.segments.iter_mut().find(|s| s.header.seq == seq) else {
            return Ok(());
        };
        src.buf = Buf::Owned(Vec::new());
        cut(&src.path, end)?;
        src.buf = Buf::map(&src.path)?;
        Ok(())
    }
}

/// The identity of the record at `l`, read without checking its CRC again (it was checked
/// when it was indexed); empty if the bytes are not there.
fn identity_at(segments: &[Source], l: Loc) -> &[u8] {
    let Some(src) = segments.get(l.src as usize) else {
        return &[];
    };
    let at = l.off as usize;
    let Some(&kind) = src.buf.get(at + 8) else {
        return &[];
    };
    let body = at + 9;
    let start = match kind {
        kind::SCHEDULE | kind::ATTEMPT => body + 16,
        kind::CANCEL => body,
        kind::FIRED | kind::DEAD_LETTER => body + 8,
        _ => return &[],
    };
    let (Some(&t), Some(&k)) = (src.buf.get(start), src.buf.get(start + 1)) else {
        return &[];
    };
    src.buf
        .get(start..start + 2 + usize::from(t) + usize::from(k))
        .unwrap_or_default()
}

/// Lets the executor's other tasks and its reactor run: a one-microsecond timer, not
/// `yield_now`, so that glommio polls for I/O and timers before coming back.
pub async fn breathe() {
    glommio::timer::sleep(std::time::Duration::from_micros(1)).await;
}
