//! What replay found wrong, and how it says so: the [`Report`] (torn tails, corrupt regions
//! skipped, where the log ends, the version floor and the last batch), and the messages that
//! stop a start on corruption.

use super::super::scan::{Damage, Region};
use std::path::PathBuf;

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
pub(super) fn gap(wanted: u64, found: u64, first: bool) -> String {
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
