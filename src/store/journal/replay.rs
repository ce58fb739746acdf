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
//! The index stores 12 bytes per entry (file, offset, set, live) in a `hashbrown::HashTable`; the
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
use super::record::{kind, Effect, End, Record, Timer};
use super::scan::{Damage, Region, Role, Scan};
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

/// Where an identity's last record in one set lies.
#[derive(Clone, Copy)]
struct Loc {
    src: u32,
    off: u32,
    /// The set: dead letters (true) or pending timers.
    dead: bool,
    live: bool,
}

impl Loc {
    fn key<'a>(&self, segments: &'a [Source]) -> (bool, &'a [u8]) {
        (self.dead, identity_at(segments, *self))
    }
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
    /// The highest version of every record read (and of the snapshot's end record).
    pub version_floor: u64,
    /// The last batch sequence read (the snapshot's, when no segment holds a batch).
    pub last_batch: u64,
    /// What `skip_corrupt` skipped, by file (a whole file: offset 0, to its end).
    pub skipped: Vec<(PathBuf, Region)>,
    /// A newest, unsynced segment's log ended at damage with acknowledged commits after it.
    pub dropped_after_tear: bool,
}

/// Why segment `found` cannot follow where `wanted` belongs.
fn gap(wanted: u64, found: u64, first: bool) -> String {
    let after = if first {
        "the snapshot (or, with none, the log's start)"
    } else {
        "the segment before it"
    };
    if found > wanted {
        format!(
            "segment {found} where segment {wanted} belongs after {after}: segments {wanted} to {} are missing",
            found - 1
        )
    } else {
        format!("segment {found} where segment {wanted} belongs after {after}")
    }
}

/// Corruption that stops the start: which file, where, and what to do.
pub fn corrupt_error(path: &std::path::Path, d: &Damage) -> String {
    format!(
        "journal file {} is corrupt at offset {}: {}. See every damaged file and what --journal-skip-corrupt would skip with `punctual journal check {}`; then restore the file, or start with --journal-skip-corrupt to skip the damaged records (counted in punctual_journal_corrupt_records)",
        path.display(),
        d.offset,
        d.why,
        data_dir_of(path).display()
    )
}

/// The data directory a journal file lies in (`<data_dir>/gen-<G>/shard-<s>/<file>`).
pub fn data_dir_of(path: &std::path::Path) -> &std::path::Path {
    path.ancestors().nth(3).unwrap_or(path)
}

pub struct Replay {
    snapshot: Option<Source>,
    segments: Vec<Source>,
    index: HashTable<Loc>,
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
            index: HashTable::new(),
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
            hasher,
            report,
            ..
        } = self;
        let last = segments.len().saturating_sub(1);
        let mut handled = 0usize;
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
                    let loc = Loc {
                        src: i as u32,
                        off: off as u32,
                        dead: set,
                        live: effect == Effect::Live,
                    };
                    let hash = hasher.hash_one((set, id));
                    match index.find_mut(hash, |l| l.key(segments) == (set, id)) {
                        Some(l) => *l = loc,
                        None => {
                            index.insert_unique(hash, loc, |l| hasher.hash_one(l.key(segments)));
                        }
                    }
                }
                handled += 1;
                if handled % YIELD_EVERY == 0 {
                    breathe().await;
                }
            }
            report.corrupt += scan.corrupt;
            report.dropped_after_tear |= scan.dropped_after_tear;
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
        for item in scan.by_ref() {
            let (record, _, _) = item.map_err(|d| corrupt_error(&snap.path, &d))?;
            floor = floor.max(record.version().unwrap_or(0));
            match record {
                Record::End(e) => end = Some(e),
                r if r.entry().is_some() => n += 1,
                _ => {}
            }
            if n % YIELD_EVERY as u64 == 0 {
                breathe().await;
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

    /// Step 2: every live timer and dead letter with its frame (run [`Replay::index`] and
    /// [`Replay::check_snapshot`] first; damage they passed is skipped here). A dead letter's
    /// metadata says what it is (`sink::is_dead`).
    pub fn live(&self) -> impl Iterator<Item = (Timer<'_>, &[u8])> + '_ {
        let from_snapshot = self
            .snapshot
            .iter()
            .flat_map(|s| self.snapshot_scan(s))
            .filter_map(|item| {
                let (record, frame, _) = item.ok()?;
                let set = matches!(record, Record::DeadLetter(_));
                Some((set, record.entry()?, frame))
            })
            .filter(|(set, t, _)| {
                let hash = self.hasher.hash_one((*set, t.identity));
                self.index
                    .find(hash, |l| l.key(&self.segments) == (*set, t.identity))
                    .is_none()
            })
            .map(|(_, t, frame)| (t, frame));
        let from_segments = self.index.iter().filter(|l| l.live).filter_map(|l| {
            let src = self.segments.get(l.src as usize)?;
            let block = src.header.block as usize;
            match super::record::decode_at(&src.buf, l.off as usize, block) {
                super::record::Step::Record { record, frame, .. } => Some((record.entry()?, frame)),
                _ => None,
            }
        });
        from_snapshot.chain(from_segments)
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

/// Lets the executor's other tasks and its reactor run: a one-microsecond timer, not
/// `yield_now`, so that glommio polls for I/O and timers before coming back.
pub async fn breathe() {
    glommio::timer::sleep(std::time::Duration::from_micros(1)).await;
}

#[cfg(test)]
mod tests {
    use super::super::shard_dir::read_shard_dir;
    use super::super::testlog::*;

    /// (key, version, dead) of every live entry of a shard directory.
    fn live(dir: &std::path::Path) -> Vec<(String, u64, bool)> {
        let (found, _) = read_shard_dir(dir, false).expect("replay");
        let mut v: Vec<_> = found
            .into_iter()
            .map(|f| (f.key, f.version, f.dead))
            .collect();
        v.sort();
        v
    }

    fn one_segment(commits: &[Vec<Frame>]) -> Vec<(String, u64, bool)> {
        let tmp = tempfile::tempdir().expect("tempdir");
        segment(tmp.path(), 1, 1, commits);
        live(tmp.path())
    }

    fn entry(version: u64, dead: bool) -> (String, u64, bool) {
        ("k".to_string(), version, dead)
    }

    #[test]
    fn a_dead_letter_and_a_pending_timer_of_one_key_coexist_in_either_order() {
        // Dead letter, then a new timer under its key.
        let got = one_segment(&[vec![dead("k", 1)], vec![schedule("k", 2)]]);
        assert_eq!(got, vec![entry(1, true), entry(2, false)]);
        // ... then the dead letter discarded: the timer stays.
        let got = one_segment(&[vec![dead("k", 1), schedule("k", 2), dead_removed("k")]]);
        assert_eq!(got, vec![entry(2, false)]);
        // ... or the new timer fired: the dead letter stays.
        let got = one_segment(&[vec![dead("k", 1), schedule("k", 2)], vec![fired("k", 2)]]);
        assert_eq!(got, vec![entry(1, true)]);
        // ... or cancelled: the dead letter stays.
        let got = one_segment(&[vec![dead("k", 1), schedule("k", 2), cancel("k")]]);
        assert_eq!(got, vec![entry(1, true)]);
        // A pending timer that dies: it leaves the pending set, the dead letter is filed.
        let got = one_segment(&[vec![schedule("k", 3)], vec![dead("k", 3)]]);
        assert_eq!(got, vec![entry(3, true)]);
    }

    #[test]
    fn a_snapshot_keeps_both_sets_and_later_records_touch_only_their_own() {
        let tmp = tempfile::tempdir().expect("tempdir");
        snapshot(tmp.path(), 2, &[dead("k", 1), schedule("k", 2)], 1, 2);
        segment(tmp.path(), 2, 2, &[vec![dead_removed("k")]]);
        assert_eq!(live(tmp.path()), vec![entry(2, false)]);
        let tmp = tempfile::tempdir().expect("tempdir");
        snapshot(tmp.path(), 2, &[dead("k", 1), schedule("k", 2)], 1, 2);
        segment(tmp.path(), 2, 2, &[vec![fired("k", 2)]]);
        assert_eq!(live(tmp.path()), vec![entry(1, true)]);
    }

    /// Cuts the log of `commits` at every offset of its last commit: each cut recovers
    /// `before` or `after`, never anything else.
    fn cut_anywhere(
        commits: &[Vec<Frame>],
        before: &[(String, u64, bool)],
        after: &[(String, u64, bool)],
    ) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let whole = segment(tmp.path(), 1, 1, commits);
        assert_eq!(live(tmp.path()), after);
        let data_end = whole.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        for cut in 4096 * commits.len()..=data_end {
            let trial = tempfile::tempdir().expect("tempdir");
            std::fs::write(
                trial.path().join(super::super::file::segment_name(1)),
                &whole[..cut],
            )
            .expect("cut copy");
            let got = live(trial.path());
            assert!(got == before || got == after, "cut at {cut}: {got:?}");
        }
    }

    #[test]
    fn a_redrive_is_one_record_so_a_cut_anywhere_keeps_the_letter_or_the_timer() {
        cut_anywhere(
            &[vec![dead("k", 1)], vec![redrive("k", 1)]],
            &[entry(1, true)],
            &[entry(1, false)],
        );
    }

    #[test]
    fn a_death_by_its_own_firing_is_one_record_so_a_cut_keeps_the_timer_or_the_letter() {
        cut_anywhere(
            &[vec![schedule("k", 1)], vec![dead("k", 1)]],
            &[entry(1, false)],
            &[entry(1, true)],
        );
    }

    #[test]
    fn two_records_of_one_commit_are_never_split_by_a_cut() {
        // The other stores' way (removal, then schedule) in one commit: it counts whole.
        cut_anywhere(
            &[
                vec![dead("k", 1)],
                vec![dead_removed("k"), schedule("k", 1)],
            ],
            &[entry(1, true)],
            &[entry(1, false)],
        );
    }
}

#[cfg(test)]
mod floor_tests {
    use super::super::shard_dir::read_shard_dir;
    use super::super::testlog::*;

    #[test]
    fn the_version_floor_counts_cancelled_fired_and_compacted_versions() {
        let tmp = tempfile::tempdir().expect("tempdir");
        segment(
            tmp.path(),
            1,
            1,
            &[
                vec![schedule("a", 50), cancel("a"), schedule("b", 40)],
                vec![fired("b", 40)],
            ],
        );
        let (found, report) = read_shard_dir(tmp.path(), false).expect("replay");
        assert!(found.is_empty());
        assert_eq!(report.version_floor, 50);
        // A snapshot's end record holds the floor of the records it replaced.
        let tmp = tempfile::tempdir().expect("tempdir");
        snapshot(tmp.path(), 2, &[schedule("c", 7)], 1, 70);
        segment(tmp.path(), 2, 2, &[vec![cancel("c")]]);
        let (found, report) = read_shard_dir(tmp.path(), false).expect("replay");
        assert!(found.is_empty());
        assert_eq!(report.version_floor, 70);
    }
}

#[cfg(test)]
mod continuity_tests {
    use super::super::file::{segment_name, snapshot_name, BLOCK};
    use super::super::record::put_batch;
    use super::super::shard_dir::{check_dir, read_shard_dir, Owner};
    use super::super::testlog::*;
    use std::path::Path;

    fn refused(dir: &Path) -> String {
        match read_shard_dir(dir, false) {
            Err(e) => e,
            Ok((found, _)) => panic!("accepted: {} entries", found.len()),
        }
    }

    #[test]
    fn a_lost_middle_segment_is_corruption_never_a_resurrected_timer() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        segment(d, 1, 1, &[vec![schedule("a", 1)]]);
        segment(d, 2, 2, &[vec![cancel("a")]]);
        segment(d, 3, 3, &[vec![schedule("b", 2)]]);
        std::fs::remove_file(d.join(segment_name(2))).expect("lose it");
        let why = refused(d);
        assert!(why.contains(&segment_name(3)), "{why}");
        assert!(why.contains("segments 2 to 2 are missing"), "{why}");
        // Renumbered to hide the gap, the batch sequence still shows it.
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        segment(d, 1, 1, &[vec![schedule("a", 1)]]);
        segment(d, 2, 3, &[vec![schedule("b", 2)]]);
        let why = refused(d);
        assert!(
            why.contains(&segment_name(2)) && why.contains("offset 4096"),
            "{why}"
        );
        assert!(why.contains("batch 3 where batch 2 belongs"), "{why}");
    }

    #[test]
    fn the_first_segment_must_follow_the_snapshot() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        snapshot(d, 3, &[schedule("a", 1)], 5, 1);
        segment(d, 4, 6, &[vec![cancel("a")]]);
        let why = refused(d);
        assert!(why.contains("segment 4 where segment 3 belongs"), "{why}");
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        snapshot(d, 3, &[schedule("a", 1)], 5, 1);
        segment(d, 3, 9, &[vec![cancel("a")]]);
        let why = refused(d);
        assert!(why.contains("batch 9 where batch 6 belongs"), "{why}");
        // Without a snapshot the log starts at segment 1.
        let tmp = tempfile::tempdir().expect("tempdir");
        segment(tmp.path(), 2, 1, &[vec![schedule("a", 1)]]);
        assert!(refused(tmp.path()).contains("segments 1 to 1 are missing"));
        // And in order it all reads.
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        snapshot(d, 3, &[schedule("a", 1)], 5, 1);
        segment(d, 3, 6, &[vec![cancel("a")], vec![schedule("b", 2)]]);
        segment(d, 4, 8, &[vec![schedule("c", 3)]]);
        let (found, _) = read_shard_dir(d, false).expect("continuous");
        assert_eq!(found.len(), 2);
    }

    /// A segment whose first commit says it holds 3 records, with only 2 before the zeros,
    /// then (when `later`) a second, whole commit on the next block.
    fn short_commit(dir: &Path, later: bool) {
        let mut b = super::super::file::Header {
            kind: super::super::file::Kind::Segment,
            block: BLOCK as u32,
            shard: 0,
            shards: 1,
            seq: 1,
        }
        .encode();
        put_batch(&mut b, 1, 3);
        b.extend_from_slice(&schedule("a", 1));
        b.extend_from_slice(&schedule("b", 2));
        b.resize(2 * BLOCK, 0);
        if later {
            put_batch(&mut b, 2, 1);
            b.extend_from_slice(&schedule("c", 3));
            b.resize(3 * BLOCK, 0);
        }
        std::fs::write(dir.join(segment_name(1)), b).expect("write");
    }

    #[test]
    fn zeros_while_a_commit_still_owes_records_are_corruption_or_the_torn_tail() {
        let tmp = tempfile::tempdir().expect("tempdir");
        short_commit(tmp.path(), true);
        let why = refused(tmp.path());
        assert!(why.contains("still owes 1 records"), "{why}");
        // As the last commit of the last segment it is the commit a crash cut short: it
        // counts not at all (none of its records is recovered), and nothing else is lost.
        let tmp = tempfile::tempdir().expect("tempdir");
        short_commit(tmp.path(), false);
        let (found, report) = read_shard_dir(tmp.path(), false).expect("torn tail");
        assert!(found.is_empty(), "{} records of a torn commit", found.len());
        assert_eq!(report.torn, 1);
        assert_eq!(report.truncate.map(|t| t.1), Some(BLOCK as u64));
    }

    #[test]
    fn a_header_must_match_its_name_and_its_shard() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        segment(d, 1, 1, &[vec![schedule("a", 1)]]);
        std::fs::rename(d.join(segment_name(1)), d.join(segment_name(2))).expect("rename");
        let why = refused(d);
        assert!(why.contains("its header says seq 1, its name 2"), "{why}");
        let tmp = tempfile::tempdir().expect("tempdir");
        segment(tmp.path(), 1, 1, &[vec![schedule("a", 1)]]);
        let owner = Owner {
            shard: 1,
            shards: 2,
        };
        let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .make()
            .expect("executor");
        let checked = ex.run(check_dir(tmp.path(), false, Some(owner)));
        let Err(why) = checked else {
            panic!("another shard's file accepted")
        };
        assert!(why.contains("shard 0 of 1"), "{why}");
    }

    #[test]
    fn a_snapshot_ends_at_its_end_record() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        snapshot(d, 2, &[schedule("a", 1)], 1, 1);
        let path = d.join(snapshot_name(2));
        let mut b = std::fs::read(&path).expect("read");
        b.extend_from_slice(&[0xAB; 700]); // what a writer's last buffer may leave after it
        std::fs::write(&path, b).expect("write");
        let (found, _) = read_shard_dir(d, false).expect("the end record is terminal");
        assert_eq!(found.len(), 1);
    }
}

#[cfg(test)]
mod store_tests {
    use super::super::harness::{config, on_executor, prepare, Node, TENANT};
    use crate::store::{DeadLetter, Store};
    use crate::timer::PackedTimer;
    use crate::timer::{FiredTimer, Firing};
    use crate::units::{UtcMicros, UtcNanos};
    use std::time::Duration;

    #[test]
    fn a_death_by_its_own_firing_queues_one_record_even_one_record_per_commit() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut cfg = config(tmp.path());
        cfg.max_batch_records = 1;
        on_executor(async {
            let data = prepare(&cfg, 1).expect("prepare");
            let mut node = Node::open(&cfg, data, 0, 1).await.expect("open");
            let ack = node.schedule("k", 7, 1, b"");
            node.pass();
            assert!(ack.acknowledged(Duration::from_secs(20)).await);
            let letter = PackedTimer::with_meta(TENANT, "k", b"dead", b"p").expect("fits");
            let fired = FiredTimer {
                shard: 0,
                tenant: TENANT,
                key: "k",
                version: 7,
                deadline: UtcMicros(1),
                fired_at: UtcNanos(1_000),
                meta: &[],
                payload: b"p",
                firing: Firing::Own,
            };
            let before = node.store.shared.outbox.borrow().len();
            node.store.fired_dead(
                &fired,
                &DeadLetter {
                    timer: &letter,
                    version: 7,
                    fire_at: UtcMicros(1),
                    attempts: 1,
                    last_status: Some(400),
                    last_error: None,
                    callback: "http://127.0.0.1:9/",
                },
            );
            let queued = node.store.shared.outbox.borrow().len() - before;
            assert_eq!(queued, 1, "the fire and the dead letter are one record");
            node.pass();
            node.close().await;
            let data = prepare(&cfg, 1).expect("prepare");
            let node = Node::open(&cfg, data, 0, 1).await.expect("reopen");
            let got: Vec<_> = node
                .recovered
                .iter()
                .map(|f| (f.key.as_str(), f.version, f.meta.as_slice()))
                .collect();
            assert_eq!(got, vec![("k", 7, &b"dead"[..])]);
        });
    }
}

#[cfg(test)]
mod overflow_tests {
    use super::super::shard_dir::read_shard_dir;
    use super::super::testlog::*;

    /// Sequence numbers come from disk: a CRC-valid file may hold any u64, and the largest
    /// must be reported as a break in the log, not overflow (a panic in a debug build).
    #[test]
    fn the_largest_sequence_numbers_on_disk_are_refused_without_overflow() {
        let tmp = tempfile::tempdir().expect("tempdir");
        snapshot(tmp.path(), 1, &[schedule("c", 7)], u64::MAX, 70);
        segment(tmp.path(), 1, 1, &[vec![schedule("d", 80)]]);
        let refused = read_shard_dir(tmp.path(), false);
        assert!(refused.is_err(), "a batch after u64::MAX cannot follow it");

        let tmp = tempfile::tempdir().expect("tempdir");
        segment(tmp.path(), 1, 1, &[vec![schedule("a", 5)]]);
        segment(tmp.path(), u64::MAX, 2, &[vec![schedule("b", 6)]]);
        assert!(
            read_shard_dir(tmp.path(), false).is_err(),
            "a gap up to u64::MAX"
        );
    }
}
