//! The crash matrix: for each phase of the journal's life, a crash at every I/O step (and the
//! power cut variants), then a recovery checked against a model of what was acknowledged
//! (`model`: the phases, their steps, the state they leave).
//!
//! ```text
//!   base      a journal of one shard built and closed cleanly (real disk)
//!   clean run the phase once on a counting `Disk`: it does S file operations
//!   for N in 0..S, for each variant:
//!     copy the base, prepare the data directory for the phase's shard count (a re-partition
//!     when it is not 1) and open every shard on a `Disk` that faults operation N, run the
//!     phase's steps as the shard makes them (admit first, then push, then end the pass and
//!     wait for the acks)
//!     crash    the process dies at N: N and everything after it change nothing
//!     cut      … and the power goes: every change not yet durable is undone
//!     hole     … and the power goes, but writeback had reached every unsynced write except
//!              the oldest (a hole before later persisted blocks)
//!     names    … and the power goes, but the removals of names had reached the disk
//!     eio      N fails with EIO once; the store goes on, then closes
//!     enospc   N and every later growth fail with ENOSPC until the phase's end
//!     reopen on the real disk, with the phase's shard count, WITHOUT --journal-skip-corrupt;
//!     each shard's pending timers and dead letters must equal the model after some prefix P
//!     of that shard's steps, with P past every acknowledged one (a power cut under
//!     everysec/never may lose unsynced acknowledged steps: any prefix), and its version
//!     floor must be at least every version the base and P carried
//! ```
//!
//! A prefix, because the journal writes records in the order the shard made them and makes
//! whole commits durable: no resurrected cancel, no lost acknowledged schedule or dead letter,
//! and, the model's versions being exact, no version that goes back. Per shard, because the
//! shards' commits are independent. `cargo test` runs every crash point of every phase in
//! `always` (crash, power cut, ENOSPC) and a sample in the other modes; the full matrix
//! (every mode, every variant, every point) runs with `PUNCTUAL_CRASH_MATRIX=full`, which
//! prints the table docs/DRILLS.md shows; `PUNCTUAL_CRASH_MATRIX=power`, every point of every
//! mode with power cuts only (what a removed sync shows as); `PUNCTUAL_CRASH_MATRIX=ci`, what
//! `.ci/run` adds (EIO, EIO then power cut and short writes under `always`, and `everysec`);
//! `PUNCTUAL_CRASH_PHASE=<name>` runs one phase.
//!
//! `holes`: a power cut that loses each unsynced write of a new segment in turn; `recovery`:
//! crashes and power cuts during the start that follows a crash point.

mod holes;
mod model;
mod recovery;

use super::faults::{Fault, Faults};
use super::harness::{config, on_executor, prepare, Node};
use super::io::Disk;
use super::{Fsync, JournalConfig};
use model::{drive, phases, Driven, Phase, State, Step};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const FAR: u64 = u64::MAX / 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Crash,
    Cut,
    Hole,
    /// … and the power goes, but the removals of names reached the disk, not what came
    /// before them in their directory.
    Names,
    Eio,
    /// EIO at N, the store goes on (and fails), closes; then the power goes.
    EioCut,
    NoSpace,
    /// Operation N, a write, writes half its bytes; later growth fails as ENOSPC.
    Short,
}

impl Variant {
    const ALL: [Variant; 8] = [
        Variant::Crash,
        Variant::Cut,
        Variant::Hole,
        Variant::Names,
        Variant::Eio,
        Variant::EioCut,
        Variant::NoSpace,
        Variant::Short,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Crash => "crash",
            Variant::Cut => "power cut",
            Variant::Hole => "power cut, hole",
            Variant::Names => "power cut, removals kept",
            Variant::Eio => "EIO",
            Variant::EioCut => "EIO, then power cut",
            Variant::NoSpace => "ENOSPC",
            Variant::Short => "short write",
        }
    }

    fn fault(self) -> Fault {
        match self {
            Variant::Eio | Variant::EioCut => Fault::Eio,
            Variant::NoSpace => Fault::NoSpace,
            Variant::Short => Fault::Short,
            Variant::Crash | Variant::Cut | Variant::Hole | Variant::Names => Fault::Die,
        }
    }

    /// Whether the phase's disk stays full after the fault until its steps are done.
    fn fills(self) -> bool {
        matches!(self, Variant::NoSpace | Variant::Short)
    }
}

/// The outcome of one case.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Recovered the state after `prefix` steps, all acknowledged ones included (`lost`:
    /// acknowledged steps a power cut took, allowed only under everysec/never).
    Held {
        lost: bool,
    },
    Violated(String),
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), &target)?;
        }
    }
    Ok(())
}

fn cfg_for(dir: &Path, fsync: Fsync, disk: Disk) -> JournalConfig {
    let mut cfg = config(dir);
    cfg.fsync = fsync;
    cfg.disk = disk;
    cfg.retry_max = Duration::from_millis(20);
    cfg
}

/// Builds the phase's base in `dir` (one shard), on the real disk; its state.
fn build_base(p: &Phase, dir: &Path, fsync: Fsync) -> Result<State, String> {
    let cfg = cfg_for(dir, fsync, Disk::default());
    let data = prepare(&cfg, 1)?;
    let mut state = State::sized(p.payload);
    for s in &p.base {
        state.apply(s);
    }
    on_executor(async {
        let mut nodes = vec![Node::open(&cfg, data, 0, 1).await?];
        nodes[0].payload = vec![b'p'; p.payload];
        let mut base = p.base.clone();
        let run = drive(&mut nodes, &mut base, Duration::from_secs(60)).await;
        close_all(nodes).await;
        let owed = p.base.iter().filter(|s| s.is_acknowledged()).count();
        if run.acked.len() < owed {
            return Err("the base was not acknowledged".to_string());
        }
        Ok(())
    })?;
    Ok(state)
}

/// Opens every shard of `shards` on `data`; `None` if one does not open (the others closed).
async fn open_all(
    cfg: &JournalConfig,
    data: &Arc<super::layout::DataDir>,
    shards: usize,
) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::with_capacity(shards);
    for s in 0..shards {
        match Node::open(cfg, data.clone(), s, shards).await {
            Ok(n) => nodes.push(n),
            Err(e) => {
                close_all(nodes).await;
                return Err(e);
            }
        }
    }
    Ok(nodes)
}

async fn close_all(nodes: Vec<Node>) {
    for n in nodes {
        n.close().await;
    }
}

/// Runs the phase's steps on `dir` with `faults` (the re-partition, when the phase has
/// another shard count, included): what the run did, and the steps as they reached the
/// stores.
fn run_steps(
    p: &Phase,
    dir: &Path,
    fsync: Fsync,
    faults: &Arc<Faults>,
    v: Variant,
) -> (Driven, Vec<Step>) {
    let mut cfg = cfg_for(dir, fsync, Disk::faulty(faults.clone()));
    if v.fills() {
        cfg.ack_timeout = Duration::from_millis(300);
    }
    let mut steps = p.steps.clone();
    let Ok(data) = prepare(&cfg, p.shards) else {
        return (Driven::default(), steps);
    };
    let run = on_executor(async {
        let Ok(mut nodes) = open_all(&cfg, &data, p.shards).await else {
            return Driven::default();
        };
        for n in &mut nodes {
            n.payload = vec![b'p'; p.payload];
        }
        let run = drive(&mut nodes, &mut steps, Duration::from_secs(30)).await;
        if v.fills() {
            faults.end_full();
        }
        close_all(nodes).await;
        run
    });
    (run, steps)
}

/// Reopens `dir` with `shards` shards on the real disk without skipping corruption: each
/// shard's recovered state and version floor.
fn recover(dir: &Path, fsync: Fsync, sizes: (usize, usize)) -> Result<Vec<(State, u64)>, String> {
    recover_on(dir, fsync, Disk::default(), sizes)
}

/// [`recover`] on `disk`.
fn recover_on(
    dir: &Path,
    fsync: Fsync,
    disk: Disk,
    (shards, size): (usize, usize),
) -> Result<Vec<(State, u64)>, String> {
    let cfg = cfg_for(dir, fsync, disk);
    let data = prepare(&cfg, shards)?;
    on_executor(async {
        let nodes = open_all(&cfg, &data, shards).await?;
        let found = nodes
            .iter()
            .map(|n| {
                (
                    State::of(n, size),
                    crate::store::Store::version_floor(&n.store),
                )
            })
            .collect();
        close_all(nodes).await;
        Ok(found)
    })
}

/// The file operations a clean run of the phase makes, one word each (kind and file name):
/// the interleaving each case must follow up to its crash point. A phase that waits for a
/// compaction must have made one.
fn count_ops(p: &Phase, base: &Path, work: &Path, fsync: Fsync) -> Result<Vec<String>, String> {
    let dir = work.join(format!("count-{}-{fsync:?}", p.name));
    // A trash of its own: removed names go there under numbered names, which another run's
    // trash would already hold (a removal that then fails changes the operations).
    let trash = work.join(format!("count-trash-{}-{fsync:?}", p.name));
    copy_dir(base, &dir)
        .and_then(|()| std::fs::create_dir_all(&trash))
        .map_err(|e| e.to_string())?;
    let faults = Faults::new(&trash);
    let (run, _) = run_steps(p, &dir, fsync, &faults, Variant::Crash);
    let waits = p.steps.iter().any(|s| matches!(s, Step::Compaction));
    if waits && run.compactions == 0 {
        return Err("the phase waits for a compaction, and none was made".to_string());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&trash);
    Ok(faults.log())
}

/// Tries of a case whose interleaving did not follow the clean run's up to its crash point
/// (the shards' commit tasks and a compaction share the executor, their I/O threads run in
/// parallel): each try is a fresh copy of the base.
const TRIES: usize = 8;

/// One case: fault operation `n` of phase `p` with variant `v`, recover, check. The run
/// must reach operation `n` by the clean run's interleaving (`planned`), else it is tried
/// again ([`TRIES`]); one that never does is a violation: a crash point planned and not hit.
fn case(
    p: &Phase,
    base: (&Path, &State),
    (work, planned): (&Path, &[String]),
    fsync: Fsync,
    v: Variant,
    n: u64,
) -> Outcome {
    let mut seen = Vec::new();
    for tries in 0..TRIES {
        let dir = work.join(format!("case-{n}-{v:?}"));
        let trash = work.join(format!("trash-{n}-{v:?}"));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&trash);
        if let Err(e) = copy_dir(base.0, &dir).and_then(|()| std::fs::create_dir_all(&trash)) {
            return Outcome::Violated(format!("setup: {e}"));
        }
        let faults = Faults::new(&trash);
        faults.fail_at(n, v.fault());
        let (run, steps) = run_steps(p, &dir, fsync, &faults, v);
        let log = faults.log();
        let upto = (n as usize + 1).min(planned.len());
        let last = tries + 1 == TRIES;
        let planned_order = log.get(..upto) == planned.get(..upto);
        // The last try is judged if it hit its point at all, in whatever order: a loaded
        // host can keep a compaction's wake-ups from ever matching the clean run's.
        if !faults.hit() || (!planned_order && !last) {
            seen = log;
            let _ = std::fs::remove_dir_all(&dir);
            let _ = std::fs::remove_dir_all(&trash);
            continue;
        }
        return judged(p, base.1, (&dir, &trash), &faults, fsync, v, (run, steps));
    }
    let at = |l: &[String], i: usize| l.get(i).cloned().unwrap_or_else(|| "nothing".into());
    let differs = (0..=n as usize)
        .find(|&i| planned.get(i) != seen.get(i))
        .unwrap_or(n as usize);
    Outcome::Violated(format!(
        "the planned crash point was not hit in {TRIES} tries (its operation never came): the last try's operations differ from the clean run's from operation {differs} ({} there, {} in the clean run), before operation {n} ({} in the clean run)",
        at(&seen, differs),
        at(planned, differs),
        at(planned, n as usize),
    ))
}

/// After a case's run that hit its crash point: the power cut its variant makes, the
/// recovery, the judgement.
fn judged(
    p: &Phase,
    base: &State,
    (dir, trash): (&Path, &Path),
    faults: &Faults,
    fsync: Fsync,
    v: Variant,
    (run, steps): (Driven, Vec<Step>),
) -> Outcome {
    let cut = match v {
        Variant::Cut | Variant::EioCut => faults.power_cut(|_| false),
        Variant::Hole => faults.power_cut(|i| i != 0),
        Variant::Names => faults.power_cut_keeping_removals(),
        _ => Ok(()),
    };
    if let Err(e) = cut {
        return Outcome::Violated(format!("power cut: {e}"));
    }
    let outcome = match recover(dir, fsync, (p.shards, p.payload)) {
        Err(e) => Outcome::Violated(format!("the start failed: {e}")),
        Ok(found) => {
            let power = matches!(
                v,
                Variant::Cut | Variant::Hole | Variant::Names | Variant::EioCut
            );
            let lost_allowed = power && !fsync.per_commit();
            match judge(&steps, base, &found, &run.acked, lost_allowed) {
                Outcome::Held { lost } => match resurrected(&found, &run.delivered) {
                    Some(why) if !lost_allowed => Outcome::Violated(why),
                    _ => Outcome::Held { lost },
                },
                violated => violated,
            }
        }
    };
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(trash);
    outcome
}

/// Judges each shard apart (their commits are independent, so a crash may keep one shard's
/// later commit and lose another's earlier one): the shard's recovered state must be the
/// one after some prefix of its own steps, past its last acknowledged one (unless
/// `lost_allowed`), and its version floor at least every version that prefix and the base
/// carried.
fn judge(
    steps: &[Step],
    base: &State,
    found: &[(State, u64)],
    acked: &[usize],
    lost_allowed: bool,
) -> Outcome {
    let shards = found.len();
    let mut lost = false;
    for (shard, (found, floor)) in found.iter().enumerate() {
        let mine: Vec<(usize, &Step)> = (steps.iter().enumerate())
            .filter(|(_, s)| s.owner(shards) == Some(shard))
            .collect();
        let owed = mine
            .iter()
            .rposition(|(i, _)| acked.contains(i))
            .map_or(0, |p| p + 1);
        let mut state = base.owned(shard, shards);
        let mut prefixes = vec![state.clone()];
        for (_, s) in &mine {
            state.apply(s);
            prefixes.push(state.clone());
        }
        // The latest prefix that matches, for what was acknowledged; the earliest, for what
        // is certainly durable (steps may undo each other, so several can match).
        let (Some(at), Some(first)) = (
            prefixes.iter().rposition(|s| s == found),
            prefixes.iter().position(|s| s == found),
        ) else {
            return Outcome::Violated(format!(
                "shard {shard} recovered a state no prefix of its steps gives: {found:?} (acknowledged {owed} of its steps)"
            ));
        };
        if at < owed && !lost_allowed {
            return Outcome::Violated(format!(
                "shard {shard} recovered the state after {at} of its steps; {owed} were acknowledged"
            ));
        }
        lost |= at < owed;
        let carried = std::iter::once(base.highest())
            .chain(mine[..first].iter().filter_map(|(_, s)| s.version()))
            .max()
            .unwrap_or(0);
        if *floor < carried {
            return Outcome::Violated(format!(
                "shard {shard}'s version floor {floor} is below version {carried}, which its records carried"
            ));
        }
    }
    Outcome::Held { lost }
}

/// A fire that went out under version v, then a recovery that holds the key pending under
/// an older version: a receiver would see v, then the older one. `None` when none did.
fn resurrected(found: &[(State, u64)], delivered: &[(String, u64)]) -> Option<String> {
    delivered.iter().find_map(|(k, v)| {
        let back = found.iter().find_map(|(s, _)| s.pending.get(k))?.version;
        (back < *v).then(|| {
            format!("{k} fired under version {v}, and recovery brought back version {back}")
        })
    })
}

/// Counts of outcomes, per (phase, mode, variant).
#[derive(Default)]
struct Tally {
    points: u64,
    held: u64,
    lost: u64,
    violations: Vec<String>,
}

/// Runs `phases` × `modes` × `variants`, every `stride`-th crash point; the table.
fn matrix(modes: &[Fsync], variants: &[Variant], stride: u64) -> (String, Vec<String>) {
    let work = match tempfile::tempdir() {
        Ok(t) => t,
        Err(e) => return (String::new(), vec![format!("tempdir: {e}")]),
    };
    let mut table = String::from(
        "| phase | fsync | variant | crash points | held | acknowledged lost (allowed) | violations |\n|---|---|---|---|---|---|---|\n",
    );
    let mut all = Vec::new();
    // `PUNCTUAL_CRASH_PHASE=<name>`: that phase only (a look at one while working on it).
    let only = std::env::var("PUNCTUAL_CRASH_PHASE").ok();
    for p in phases() {
        if only.as_deref().is_some_and(|name| name != p.name) {
            continue;
        }
        for &fsync in modes {
            let base = work.path().join(format!("base-{}-{fsync:?}", p.name));
            let state = match build_base(&p, &base, fsync) {
                Ok(s) => s,
                Err(e) => {
                    all.push(format!("{} {fsync:?}: base: {e}", p.name));
                    continue;
                }
            };
            let planned = match count_ops(&p, &base, work.path(), fsync) {
                Ok(log) => log,
                Err(e) => {
                    all.push(format!("{} {fsync:?}: count: {e}", p.name));
                    continue;
                }
            };
            let ops = planned.len() as u64;
            for &v in variants {
                let mut t = Tally::default();
                for n in (0..ops).step_by(stride as usize) {
                    t.points += 1;
                    match case(&p, (&base, &state), (work.path(), &planned), fsync, v, n) {
                        Outcome::Held { lost: false } => t.held += 1,
                        Outcome::Held { lost: true } => t.lost += 1,
                        Outcome::Violated(why) => t.violations.push(format!(
                            "{} / {fsync:?} / {} at operation {n}: {why}",
                            p.name,
                            v.name()
                        )),
                    }
                }
                table.push_str(&format!(
                    "| {} | {} | {} | {} of {ops} | {} | {} | {} |\n",
                    p.name,
                    format!("{fsync:?}").to_lowercase(),
                    v.name(),
                    t.points,
                    t.held,
                    t.lost,
                    t.violations.len()
                ));
                all.extend(t.violations);
            }
        }
    }
    (table, all)
}

#[test]
fn every_crash_point_of_every_phase_recovers_what_was_acknowledged() {
    let mode = std::env::var("PUNCTUAL_CRASH_MATRIX").unwrap_or_default();
    let (table, violations) = if mode == "power" {
        // Every point of every mode, power cuts only: what a removed sync shows as
        // (`scripts/journal_mutants.sh`).
        let all = [Fsync::Always, Fsync::EverySec, Fsync::Never];
        matrix(&all, &[Variant::Cut, Variant::Names], 1)
    } else if mode == "ci" {
        // What `.ci/run` adds to the default: the EIO variants and short writes under
        // `always`, and `everysec` whole.
        let (mut t, mut v) = matrix(
            &[Fsync::Always],
            &[Variant::Eio, Variant::EioCut, Variant::Short],
            1,
        );
        let every = [Variant::Crash, Variant::Cut, Variant::Hole, Variant::Eio];
        let (t2, v2) = matrix(&[Fsync::EverySec], &every, 1);
        t.push_str(&t2);
        v.extend(v2);
        (t, v)
    } else if mode == "full" {
        matrix(
            &[Fsync::Always, Fsync::EverySec, Fsync::Never],
            &Variant::ALL,
            1,
        )
    } else {
        let (mut t, mut v) = matrix(
            &[Fsync::Always],
            &[Variant::Crash, Variant::Cut, Variant::NoSpace],
            1,
        );
        let (t2, v2) = matrix(&[Fsync::Never], &[Variant::Hole], 3);
        t.push_str(&t2);
        v.extend(v2);
        (t, v)
    };
    println!("{table}");
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

#[test]
fn everysec_syncs_what_it_acknowledged_so_a_later_power_cut_keeps_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, trash) = (tmp.path().join("d"), tmp.path().join("trash"));
    std::fs::create_dir_all(&trash).expect("trash");
    let faults = Faults::new(&trash);
    let cfg = cfg_for(&dir, Fsync::EverySec, Disk::faulty(faults.clone()));
    let data = prepare(&cfg, 1).expect("prepare");
    on_executor(async {
        let mut node = Node::open(&cfg, data, 0, 1).await.expect("opens");
        let a = node.schedule("k", 7, FAR, b"");
        node.pass();
        assert!(a.acknowledged(Duration::from_secs(30)).await);
        // Synced within about a second; 30 s bounds the wait on a loaded machine.
        for _ in 0..3_000 {
            if faults.unsynced_writes() == 0 {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            faults.unsynced_writes(),
            0,
            "the acknowledged write was synced"
        );
        // The process dies here: the close below changes nothing on disk.
        faults.fail_at(faults.count(), Fault::Die);
        node.close().await;
    });
    faults.power_cut(|_| false).expect("power cut");
    let found = recover(&dir, Fsync::EverySec, (1, 7)).expect("recovers");
    assert_eq!(found[0].0.pending.get("k").map(|e| e.version), Some(7));
}
