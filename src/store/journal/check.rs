//! The offline tool, in the spirit of `redis-check-aof` and `etcdutl`: `punctual journal check
//! DIR` says what a data directory holds and whether a start would recover it without loss;
//! `punctual journal dump DIR [--shard N]` prints every record as a JSON line.
//!
//! ```text
//!   check:  CURRENT (valid? which generation, how many shards)
//!           per shard directory, per file: kind, seq, bytes, commits and records, damage
//!           per shard: what a start recovers, or why it refuses and what
//!                      --journal-skip-corrupt would skip (file, byte range, why)
//!           exit 0: the log is whole (every file readable, every commit whole and in
//!           sequence, no gap, no damage but a torn tail), so a start recovers every commit
//!           the files hold; 1: a start would refuse or skip records; 2: the directory
//!           cannot be read (or a server holds it)
//! ```
//!
//! What exit 0 proves is the log's internal consistency, not that it holds every
//! acknowledged write: a newest tail that a power cut (or a lost disk cache) took whole
//! leaves a shorter log that is just as consistent, and no tool reading the files alone can
//! tell. (Under `--fsync always` the disk acknowledged every commit before its caller was;
//! under `everysec` and `never` the last unsynced second, or more, may be gone.)
//!
//! ```text
//!   dump:   {"file", "offset", "type", …} per header, record and damaged region
//! ```
//!
//! Both read the same code a start runs (`layout`, `replay`, `scan`) and change nothing: no
//! truncation, no deletion. They take the data directory's lock shared, so they refuse to run
//! beside a server (whose files change under them) and a server cannot start meanwhile.

use super::current::{self, Current};
use super::file::{flags, Header, Kind, Listing, UNSYNCED};
use super::record::{self, Record, Timer};
use super::replay::Buf;
use super::scan::{Role, Scan};
use super::shard_dir::{check_dir, header_of, Owner};
use serde::Serialize;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why the tool could not look at the directory at all (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    Unreadable(String),
    #[error("cannot write the report: {0}")]
    Output(#[from] std::io::Error),
}

fn unreadable(what: &str, path: &Path, e: impl std::fmt::Display) -> ToolError {
    ToolError::Unreadable(format!("{what} {}: {e}", path.display()))
}

/// One shard directory to look at.
struct Target {
    /// `gen-<G>/shard-<s>`.
    label: String,
    dir: PathBuf,
    shard: usize,
    owner: Option<Owner>,
}

/// The shard directories of `root`: those of the generation `CURRENT` names, or, without a
/// valid one, every one found; and what is wrong with `CURRENT` (a start would refuse).
fn targets(root: &Path) -> Result<(Vec<Target>, Vec<String>), ToolError> {
    let read = current::read(root).map_err(|e| ToolError::Unreadable(e.to_string()))?;
    let found = current::survey(root).map_err(|e| ToolError::Unreadable(e.to_string()))?;
    let mut problems = Vec::new();
    let mut targets = Vec::new();
    let target = |g: u64, s: usize, owner: Option<Owner>| Target {
        label: format!("gen-{g}/shard-{s}"),
        dir: root.join(format!("gen-{g}")).join(format!("shard-{s}")),
        shard: s,
        owner,
    };
    match read {
        Ok(Some(Current { generation, shards })) => {
            for s in 0..shards {
                let t = target(
                    generation,
                    s,
                    Some(Owner {
                        shard: s as u32,
                        shards: shards as u32,
                    }),
                );
                if t.dir.is_dir() {
                    targets.push(t);
                } else {
                    problems.push(format!("CURRENT names {}, which is not there", t.label));
                }
            }
        }
        other => {
            problems.push(match other {
                Err(why) => format!("CURRENT is not valid ({why}): a start refuses"),
                _ if found.iter().any(|g| g.files > 0) => {
                    match current::leftover_of_a_first_start(&found, root) {
                        Ok(Some(_)) => "CURRENT is missing and the only journal files are segments that hold no record (a first start cut short): a start removes them and begins empty".to_string(),
                        _ => "CURRENT is missing: a start refuses".to_string(),
                    }
                }
                _ => "CURRENT is missing and no generation holds a file: a start begins empty"
                    .to_string(),
            });
            for g in &found {
                for &s in &g.shards {
                    targets.push(target(g.number, s, None));
                }
            }
        }
    }
    Ok((targets, problems))
}

/// Takes the data directory's lock shared for as long as the tool looks (see the module doc).
fn lock(root: &Path) -> Result<Option<File>, ToolError> {
    use std::os::fd::AsRawFd;
    let path = root.join("LOCK");
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable("cannot open", &path, e)),
    };
    // SAFETY: flock on a descriptor this function owns; no memory is shared with the kernel.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    if rc != 0 {
        return Err(ToolError::Unreadable(format!(
            "{} is in use by a running punctual ({}); stop it first: its files change while it runs",
            root.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(Some(f))
}

fn executor() -> Result<glommio::LocalExecutor, ToolError> {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .map_err(|e| ToolError::Unreadable(format!("cannot start an executor: {e}")))
}

/// `punctual journal check DIR`: writes the report to `out`; whether a start would recover
/// the directory without loss.
pub fn check(root: &Path, out: &mut dyn Write) -> Result<bool, ToolError> {
    if !root.is_dir() {
        return Err(unreadable("no data directory at", root, "not a directory"));
    }
    let _lock = lock(root)?;
    let (targets, problems) = targets(root)?;
    writeln!(out, "punctual journal check {}", root.display())?;
    if let Ok(Ok(Some(c))) = current::read(root) {
        writeln!(
            out,
            "CURRENT: generation {}, {} shards (format {})",
            c.generation,
            c.shards,
            record::FORMAT
        )?;
    }
    for p in &problems {
        writeln!(out, "problem: {p}")?;
    }
    let ex = executor()?;
    let mut lossless = problems.is_empty();
    for t in &targets {
        writeln!(out, "{}:", t.label)?;
        files(t, out)?;
        lossless &= ex.run(recovery(t, out))?;
    }
    writeln!(
        out,
        "verdict: {}",
        if lossless {
            "the log is whole and consistent: a start recovers every commit it holds (exit 0; a newest tail lost whole cannot be seen in the files)"
        } else {
            "a start would refuse this directory or skip records it holds (exit 1)"
        }
    )?;
    Ok(lossless)
}

/// The files of one shard directory, one line each.
fn files(t: &Target, out: &mut dyn Write) -> Result<(), ToolError> {
    let listing = Listing::read(&t.dir).map_err(|e| unreadable("cannot list", &t.dir, e))?;
    let newest = listing.segments.last().copied();
    let names = listing
        .snapshots
        .iter()
        .map(|&s| (super::file::snapshot_name(s), s, true))
        .chain(
            listing
                .segments
                .iter()
                .map(|&s| (super::file::segment_name(s), s, false)),
        );
    for (name, seq, snapshot) in names {
        let path = t.dir.join(&name);
        let buf = Buf::map_from_disk(&path).map_err(|e| unreadable("cannot read", &path, e))?;
        let header = match header_of(&buf, seq, t.owner) {
            Ok(h) => h,
            Err(why) => {
                writeln!(
                    out,
                    "  {name}  {} bytes  unreadable header: {why}",
                    buf.len()
                )?;
                continue;
            }
        };
        let role = match (snapshot, Some(seq) == newest) {
            (true, _) => Role::Snapshot,
            (false, true) if flags(&buf) & UNSYNCED != 0 => Role::LastUnsynced,
            (false, true) => Role::Last,
            (false, false) => Role::Sealed,
        };
        let block = header.block as usize;
        let mut scan = Scan::new(&buf, block, block, role, true);
        let (mut records, mut commits, mut end) = (0u64, 0u64, None);
        for item in scan.by_ref() {
            match item {
                Ok((Record::Batch { .. }, _, _)) => commits += 1,
                Ok((Record::End(e), _, _)) => end = Some(e),
                Ok(_) => records += 1,
                Err(_) => {}
            }
        }
        let what = match (header.kind, end) {
            (Kind::Snapshot, Some(e)) => format!(
                "snapshot: {records} entries, covers batches to {}, version floor {}",
                e.last_batch, e.version_floor
            ),
            (Kind::Snapshot, None) => format!("snapshot: {records} entries, NO end record"),
            (Kind::Segment, _) => match (scan.first_batch, scan.last_batch) {
                (Some(a), Some(b)) => {
                    format!("segment: {commits} commits (batches {a} to {b}), {records} records")
                }
                _ => "segment: no commit".to_string(),
            },
        };
        writeln!(out, "  {name}  {} bytes  {what}", buf.len())?;
        for r in &scan.skipped {
            let to = r.resume.map_or("the end".to_string(), |y| y.to_string());
            writeln!(
                out,
                "    damage at offset {} (to {to}): {}",
                r.offset, r.why
            )?;
        }
        if scan.torn {
            writeln!(
                out,
                "    torn tail at offset {}: the commit a crash cut short (never acknowledged{})",
                scan.end,
                if scan.dropped_after_tear {
                    "; but acknowledged unsynced commits follow it, and a start drops them"
                } else {
                    ""
                }
            )?;
        }
    }
    Ok(())
}

/// (timers, dead letters) among live entries' frames.
fn count<'a>(live: impl Iterator<Item = (Timer<'a>, &'a [u8])>) -> (u64, u64) {
    live.fold((0, 0), |(t, d), (_, frame)| {
        if record::is_dead_letter(frame) {
            (t, d + 1)
        } else {
            (t + 1, d)
        }
    })
}

/// What a start does with one shard directory; whether it loses nothing.
async fn recovery(t: &Target, out: &mut dyn Write) -> Result<bool, ToolError> {
    match check_dir(&t.dir, false, t.owner).await {
        Ok(c) => {
            let (timers, dead) = count(c.replay.live());
            let lossy = c.replay.report.dropped_after_tear;
            writeln!(
                out,
                "  recovery: {}: {timers} pending timers, {dead} dead letters, {} torn tail(s) cut, next batch {}",
                if lossy { "drops acknowledged unsynced commits" } else { "lossless" },
                c.torn,
                c.replay.next_batch()
            )?;
            Ok(!lossy)
        }
        Err(refusal) => {
            writeln!(out, "  recovery: a start refuses: {refusal}")?;
            match check_dir(&t.dir, true, t.owner).await {
                Ok(c) => {
                    let (timers, dead) = count(c.replay.live());
                    writeln!(out, "  with --journal-skip-corrupt a start skips:")?;
                    for (path, why) in &c.skipped_files {
                        writeln!(out, "    {} (the whole file): {why}", path.display())?;
                    }
                    for (path, r) in &c.replay.report.skipped {
                        let to = r.resume.map_or("its end".to_string(), |y| y.to_string());
                        writeln!(
                            out,
                            "    {} from offset {} to {to}: {}",
                            path.display(),
                            r.offset,
                            r.why
                        )?;
                    }
                    writeln!(
                        out,
                        "    and recovers {timers} pending timers and {dead} dead letters; the records in what it skips are lost"
                    )?;
                }
                Err(e) => writeln!(out, "  even --journal-skip-corrupt cannot recover it: {e}")?,
            }
            Ok(false)
        }
    }
}

/// A timer (or dead letter) of a record, for the dump.
#[derive(Serialize)]
struct TimerLine<'a> {
    tenant: &'a str,
    key: &'a str,
    version: u64,
    deadline_us: u64,
    meta_hex: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_hex: Option<String>,
}

impl<'a> TimerLine<'a> {
    fn new(t: &Timer<'a>) -> TimerLine<'a> {
        let text = std::str::from_utf8(t.payload).ok();
        TimerLine {
            tenant: t.tenant,
            key: t.key,
            version: t.version,
            deadline_us: t.deadline.0,
            meta_hex: hex::encode(t.meta),
            payload: text,
            payload_hex: text.is_none().then(|| hex::encode(t.payload)),
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum What<'a> {
    Header {
        kind: &'static str,
        seq: u64,
        shard: u32,
        shards: u32,
        block: u32,
        unsynced: bool,
    },
    UnreadableHeader {
        why: String,
    },
    Batch {
        seq: u64,
        records: u32,
    },
    Schedule(TimerLine<'a>),
    Attempt(TimerLine<'a>),
    Cancel {
        tenant: &'a str,
        key: &'a str,
    },
    Fired {
        tenant: &'a str,
        key: &'a str,
        version: u64,
    },
    DeadLetter(TimerLine<'a>),
    End {
        entries: u64,
        last_batch: u64,
        version_floor: u64,
    },
    DeadRemoved {
        tenant: &'a str,
        key: &'a str,
    },
    Redrive(TimerLine<'a>),
    Lease {
        ceiling: u64,
    },
    Damage {
        why: String,
        resume: Option<usize>,
    },
}

#[derive(Serialize)]
struct Line<'a> {
    file: &'a str,
    offset: usize,
    #[serde(flatten)]
    what: What<'a>,
}

fn line_of<'a>(r: &Record<'a>) -> What<'a> {
    let names = |id: &'a [u8]| record::names(id).unwrap_or(("", ""));
    match *r {
        Record::Batch { seq, records } => What::Batch { seq, records },
        Record::Schedule(t) => What::Schedule(TimerLine::new(&t)),
        Record::Attempt(t) => What::Attempt(TimerLine::new(&t)),
        Record::DeadLetter(t) => What::DeadLetter(TimerLine::new(&t)),
        Record::Redrive(t) => What::Redrive(TimerLine::new(&t)),
        Record::Cancel { identity } => {
            let (tenant, key) = names(identity);
            What::Cancel { tenant, key }
        }
        Record::DeadRemoved { identity } => {
            let (tenant, key) = names(identity);
            What::DeadRemoved { tenant, key }
        }
        Record::Fired { version, identity } => {
            let (tenant, key) = names(identity);
            What::Fired {
                tenant,
                key,
                version,
            }
        }
        Record::End(e) => What::End {
            entries: e.entries,
            last_batch: e.last_batch,
            version_floor: e.version_floor,
        },
        Record::Lease { ceiling } => What::Lease { ceiling },
    }
}

fn emit(out: &mut dyn Write, line: &Line<'_>) -> Result<(), ToolError> {
    serde_json::to_writer(&mut *out, line).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// `punctual journal dump DIR [--shard N]`: every file of the shard directories (all, or
/// shard `only`), its header and every record as JSON lines, damaged regions included.
pub fn dump(root: &Path, only: Option<usize>, out: &mut dyn Write) -> Result<(), ToolError> {
    if !root.is_dir() {
        return Err(unreadable("no data directory at", root, "not a directory"));
    }
    let _lock = lock(root)?;
    let (targets, _) = targets(root)?;
    for t in targets.iter().filter(|t| only.is_none_or(|s| s == t.shard)) {
        let listing = Listing::read(&t.dir).map_err(|e| unreadable("cannot list", &t.dir, e))?;
        let newest = listing.segments.last().copied();
        let files = listing
            .snapshots
            .iter()
            .map(|&s| (super::file::snapshot_name(s), s))
            .chain(
                listing
                    .segments
                    .iter()
                    .map(|&s| (super::file::segment_name(s), s)),
            );
        for (name, seq) in files {
            let path = t.dir.join(&name);
            let label = format!("{}/{name}", t.label);
            let buf = Buf::map_from_disk(&path).map_err(|e| unreadable("cannot read", &path, e))?;
            dump_file(&label, &buf, seq, Some(seq) == newest, t.owner, out)?;
        }
    }
    Ok(())
}

fn dump_file(
    file: &str,
    buf: &[u8],
    seq: u64,
    newest: bool,
    owner: Option<Owner>,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let header: Header = match header_of(buf, seq, owner) {
        Ok(h) => h,
        Err(why) => {
            let what = What::UnreadableHeader { why };
            return emit(
                out,
                &Line {
                    file,
                    offset: 0,
                    what,
                },
            );
        }
    };
    let unsynced = flags(buf) & UNSYNCED != 0;
    let what = What::Header {
        kind: match header.kind {
            Kind::Segment => "segment",
            Kind::Snapshot => "snapshot",
        },
        seq: header.seq,
        shard: header.shard,
        shards: header.shards,
        block: header.block,
        unsynced,
    };
    emit(
        out,
        &Line {
            file,
            offset: 0,
            what,
        },
    )?;
    let role = match header.kind {
        Kind::Snapshot => Role::Snapshot,
        Kind::Segment if newest && unsynced => Role::LastUnsynced,
        Kind::Segment if newest => Role::Last,
        Kind::Segment => Role::Sealed,
    };
    let block = header.block as usize;
    let mut scan = Scan::new(buf, block, block, role, true);
    for (record, _, offset) in scan.by_ref().flatten() {
        emit(
            out,
            &Line {
                file,
                offset,
                what: line_of(&record),
            },
        )?;
    }
    let tail = scan.torn.then(|| super::scan::Region {
        offset: scan.end,
        resume: None,
        why: "torn tail: the commit a crash cut short".to_string(),
    });
    for r in scan.skipped.iter().cloned().chain(tail) {
        let what = What::Damage {
            why: r.why,
            resume: r.resume,
        };
        emit(
            out,
            &Line {
                file,
                offset: r.offset,
                what,
            },
        )?;
    }
    Ok(())
}
