//! `CURRENT`: which generation of a data directory is in force, and what a start does when it
//! is missing or damaged.
//!
//! ```text
//!   punctual journal format 2
//!   generation <G>
//!   shards <N>
//! ```
//!
//! Exactly these three lines, each ending in a newline; anything else is not a `CURRENT` file.
//! It is only ever replaced whole (written to `CURRENT.tmp`, synced, renamed, the directory
//! synced), so a crash leaves the old one or the new one.
//!
//! # When it is missing or unreadable
//!
//! Only a first start that crashed before writing it leaves a data directory without a valid
//! `CURRENT`, and then no generation holds a record: nothing, or only segments that hold no
//! record (a header and zeros, or zeros), all in one generation, with no snapshot. That start
//! begins again, removing those segments ([`leftover_of_a_first_start`]). Any other case is an operator's slip (a deleted file, a half-copied directory, a bad restore),
//! and starting empty would turn it into a healthy server that has lost every acknowledged
//! timer. So a start refuses, naming the directory, the generations it found and the command
//! that restores `CURRENT`, and deletes nothing. Likewise a `CURRENT` that names a generation
//! or a shard directory that is not there. A generation is deleted only when a valid `CURRENT`
//! names a newer one whose shard directories are all present (`layout`).

use super::file::{segment_name, Header, Kind, Listing, BLOCK};
use super::io::Disk;
use super::record::FORMAT;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// What `CURRENT` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Current {
    pub generation: u64,
    pub shards: usize,
}

/// Why a `CURRENT` file is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// Written by a build of another journal format.
    #[error("journal format {0}; this build reads format {FORMAT} only (before 1.0, formats are not migrated: let the timers drain with the build that wrote them, or start on an empty --data-dir)")]
    OtherFormat(u64),
    #[error("{0}")]
    Malformed(String),
}

impl Current {
    /// The file's text.
    pub fn text(&self) -> String {
        format!(
            "punctual journal format {FORMAT}\ngeneration {}\nshards {}\n",
            self.generation, self.shards
        )
    }

    /// Parses the file's text strictly; why it is not a `CURRENT` file otherwise.
    pub fn parse(text: &str) -> std::result::Result<Current, Invalid> {
        let bad = |why: String| Invalid::Malformed(why);
        let Some(body) = text.strip_suffix('\n') else {
            return Err(bad("it does not end with a newline (cut short?)".into()));
        };
        let lines: Vec<&str> = body.split('\n').collect();
        let [format, generation, shards] = lines[..] else {
            return Err(bad(format!("{} lines where 3 belong", lines.len())));
        };
        let number = |line: &str, prefix: &str| {
            line.strip_prefix(prefix)
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| bad(format!("{line:?} where \"{prefix}<number>\" belongs")))
        };
        let f = number(format, "punctual journal format ")?;
        if f != u64::from(FORMAT) {
            return Err(Invalid::OtherFormat(f));
        }
        let generation = number(generation, "generation ")?;
        let shards = number(shards, "shards ")?;
        if generation == 0 || shards == 0 {
            return Err(bad("generation and shards must be positive".into()));
        }
        let shards = usize::try_from(shards).map_err(|_| bad("shards out of range".into()))?;
        Ok(Current { generation, shards })
    }
}

/// `CURRENT` of `root`: `Ok(None)` when there is none, `Err` (why) when it is not valid.
pub fn read(root: &Path) -> Result<std::result::Result<Option<Current>, Invalid>> {
    let path = root.join("CURRENT");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ok(None)),
        Err(e) => {
            return Err(Error::Config(format!(
                "journal: cannot read {}: {e}",
                path.display()
            )))
        }
    };
    Ok(match std::str::from_utf8(&bytes) {
        Ok(text) => Current::parse(text).map(Some),
        Err(_) => Err(Invalid::Malformed("it is not text".into())),
    })
}

/// Replaces `CURRENT` whole: written to `CURRENT.tmp`, synced, renamed, the directory synced
/// (a `CURRENT.tmp` an earlier crash left is removed first).
pub fn write(disk: &Disk, root: &Path, current: Current) -> Result<()> {
    let tmp = root.join("CURRENT.tmp");
    let write = || -> std::io::Result<()> {
        if tmp.symlink_metadata().is_ok() {
            disk.unlink(&tmp)?;
        }
        disk.create_synced(&tmp, current.text().as_bytes())?;
        disk.rename(&tmp, &root.join("CURRENT"))?;
        disk.sync_dir(root)
    };
    write().map_err(|e| {
        Error::Config(format!(
            "journal: cannot write {}: {e}",
            root.join("CURRENT").display()
        ))
    })
}

/// A `gen-<G>` directory as a start finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    pub number: u64,
    /// Its `shard-<s>` directories, ascending.
    pub shards: Vec<usize>,
    /// Segments and snapshots in them.
    pub files: usize,
}

impl Generation {
    /// Whether it has every shard directory of a count of `shards`.
    pub fn complete(&self, shards: usize) -> bool {
        (0..shards).all(|s| self.shards.binary_search(&s).is_ok())
    }
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "gen-{} ({} shard directories, {} journal files)",
            self.number,
            self.shards.len(),
            self.files
        )
    }
}

/// The `gen-<G>` directories of `root`, ascending.
pub fn survey(root: &Path) -> Result<Vec<Generation>> {
    let list = |dir: &Path| {
        std::fs::read_dir(dir)
            .map_err(|e| Error::Config(format!("journal: cannot list {}: {e}", dir.display())))
    };
    let number = |name: &std::ffi::OsStr, prefix: &str| {
        name.to_str()?.strip_prefix(prefix)?.parse::<u64>().ok()
    };
    let mut gens = Vec::new();
    for e in list(root)?.flatten() {
        let Some(g) = number(&e.file_name(), "gen-") else {
            continue;
        };
        let mut gen = Generation {
            number: g,
            shards: Vec::new(),
            files: 0,
        };
        for s in list(&e.path())?.flatten() {
            if let Some(n) = number(&s.file_name(), "shard-").and_then(|n| usize::try_from(n).ok())
            {
                gen.shards.push(n);
                if let Ok(l) = Listing::read(&s.path()) {
                    gen.files += l.segments.len() + l.snapshots.len();
                }
            }
        }
        gen.shards.sort_unstable();
        gens.push(gen);
    }
    gens.sort_by_key(|g| g.number);
    Ok(gens)
}

/// The segments a first start cut short before it wrote `CURRENT` may have left, when they
/// provably hold nothing acknowledged: every journal file of `root` lies in one generation and
/// is a segment with no record (zeros, or a segment header followed by zeros), with no
/// snapshot and no unfinished one. `Some((generation, segments))` then; `None` when anything
/// else is there, so that the start refuses.
pub fn leftover_of_a_first_start(
    found: &[Generation],
    root: &Path,
) -> Result<Option<(u64, Vec<PathBuf>)>> {
    let mut holding = found.iter().filter(|g| g.files > 0);
    let (Some(g), None) = (holding.next(), holding.next()) else {
        return Ok(None);
    };
    let dir = root.join(format!("gen-{}", g.number));
    let mut empty = Vec::new();
    for s in &g.shards {
        let shard = dir.join(format!("shard-{s}"));
        let listing = Listing::read(&shard).map_err(|e| cannot("list", &shard, e))?;
        if !listing.snapshots.is_empty() || !listing.leftovers.is_empty() {
            return Ok(None);
        }
        for seq in listing.segments {
            let path = shard.join(segment_name(seq));
            if !holds_no_record(&path).map_err(|e| cannot("read", &path, e))? {
                return Ok(None);
            }
            empty.push(path);
        }
    }
    Ok(Some((g.number, empty)))
}

/// Whether the file at `path` is all zeros, or a segment header followed by zeros.
fn holds_no_record(path: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    let zeros = |b: &[u8]| b.iter().all(|&x| x == 0);
    let mut f = std::fs::File::open(path)?;
    let mut head = Vec::with_capacity(BLOCK);
    (&mut f).take(BLOCK as u64).read_to_end(&mut head)?;
    let segment = matches!(Header::decode(&head), Ok(h) if h.kind == Kind::Segment);
    if !segment && !zeros(&head) {
        return Ok(false);
    }
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(true);
        }
        if !zeros(&buf[..n]) {
            return Ok(false);
        }
    }
}

fn cannot(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Config(format!("journal: cannot {what} {}: {e}", path.display()))
}

/// The refusal of a start on `root` whose `CURRENT` is `what` (missing, or not valid because
/// ...), while `found` holds journal files: what was found, and how to put it right.
pub fn refusal(root: &Path, what: &str, found: &[Generation]) -> Error {
    let list: Vec<String> = found.iter().map(ToString::to_string).collect();
    let fix = match found.iter().rev().find(|g| g.files > 0) {
        Some(g) => {
            let c = Current {
                generation: g.number,
                shards: g.shards.len(),
            };
            format!(
                ". If gen-{} is the generation to keep (the newest that holds files; an interrupted change of shard count can leave a newer, unfinished one), restore CURRENT with:\n  printf '{}' > {}",
                g.number,
                c.text().replace('\n', "\\n"),
                root.join("CURRENT").display()
            )
        }
        None => String::new(),
    };
    Error::Config(format!(
        "journal: {} is {what}, but {} holds {}. punctual does not start on it and deletes nothing: starting empty would hide every timer those files hold. See what they hold with `punctual journal check {}`{fix}",
        root.join("CURRENT").display(),
        root.display(),
        list.join(", "),
        root.display(),
    ))
}

#[cfg(test)]
#[path = "current_tests.rs"]
mod tests;
