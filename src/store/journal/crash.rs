//! The crash matrix: for each phase of the journal's life, a crash at every I/O step (and the
//! power cut variants), then a recovery checked against a model of what was acknowledged.
//!
//! ```text
//!   base      a journal built and closed cleanly (real disk): the phase's starting state
//!   clean run the phase once on a counting `Disk`: it does S file operations
//!   for N in 0..S, for each variant:
//!     copy the base, open it on a `Disk` that faults operation N, run the phase's steps as
//!     the shard makes them (admit first, then push, then end the pass and wait for the acks)
//!     crash    the process dies at N: N and everything after it change nothing
//!     cut      … and the power goes: every change not yet durable is undone
//!     hole     … and the power goes, but writeback had reached every unsynced write except
//!              the oldest (a hole before later persisted blocks)
//!     eio      N fails with EIO once; the store goes on, then closes
//!     enospc   N and every later growth fail with ENOSPC until the phase's end
//!     reopen on the real disk WITHOUT --journal-skip-corrupt; the recovered pending timers
//!     and dead letters must equal the model after some prefix P of the phase's steps, with
//!     P past every acknowledged step (a power cut under everysec/never may lose unsynced
//!     acknowledged steps: any prefix)
//! ```
//!
//! A prefix, because the journal writes records in the order the shard made them and makes
//! whole commits durable: no resurrected cancel, no lost acknowledged schedule or dead letter,
//! and, the model's versions being exact, no version that goes back. `cargo test` runs every
//! crash point of every phase in `always` (crash, power cut, ENOSPC) and a sample in the
//! other modes; the full matrix
//! (every mode, every variant, every point) runs with `PUNCTUAL_CRASH_MATRIX=full`, which
//! prints the table DRILLS.md shows.

use super::harness::{config, on_executor, prepare, Answer, Node};
use super::io::{Disk, Fault, Faults};
use super::{Fsync, JournalConfig};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A dead letter's metadata, as the harness files it (and reads it back).
const DEAD: &[u8] = b"dead-letter";
const FAR: u64 = u64::MAX / 4;

/// One step of a phase, as the shard makes it.
#[derive(Clone, Debug)]
enum Step {
    Schedule(String, u64),
    Cancel(String),
    Fired(String, u64),
    Dead(String, u64),
    DeadRemoved(String),
    /// A dead letter pending again under its version.
    Redrive(String, u64),
    /// The end of a pass: the commit task takes what was queued; the acks are awaited.
    Pass,
    /// Wait for a compaction in flight to end.
    Compaction,
}

impl Step {
    /// Whether the step's caller waits for an acknowledgement.
    fn is_acknowledged(&self) -> bool {
        matches!(
            self,
            Step::Schedule(..) | Step::Cancel(_) | Step::DeadRemoved(_) | Step::Redrive(..)
        )
    }
}

/// Pending timers and dead letters, key → version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct State {
    pending: BTreeMap<String, u64>,
    dead: BTreeMap<String, u64>,
}

impl State {
    fn apply(&mut self, s: &Step) {
        match s {
            Step::Schedule(k, v) => {
                self.pending.insert(k.clone(), *v);
            }
            Step::Cancel(k) | Step::Fired(k, _) => {
                self.pending.remove(k);
            }
            Step::Dead(k, v) => {
                self.pending.remove(k);
                self.dead.insert(k.clone(), *v);
            }
            Step::DeadRemoved(k) => {
                self.dead.remove(k);
            }
            Step::Redrive(k, v) => {
                self.dead.remove(k);
                self.pending.insert(k.clone(), *v);
            }
            Step::Pass | Step::Compaction => {}
        }
    }

    fn of(node: &Node) -> State {
        let mut s = State::default();
        for f in &node.recovered {
            let set = if f.meta == DEAD {
                &mut s.dead
            } else {
                &mut s.pending
            };
            set.insert(f.key.clone(), f.version);
        }
        s
    }
}

/// A phase: how its base is built, and its steps.
struct Phase {
    name: &'static str,
    payload: usize,
    base: Vec<Step>,
    steps: Vec<Step>,
}

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}{i:04}")
}

fn phases() -> Vec<Phase> {
    let small = |n: usize| -> Vec<Step> {
        let mut b: Vec<Step> = (0..n)
            .map(|i| Step::Schedule(key("b", i), 1 + i as u64))
            .collect();
        b.push(Step::Dead(key("d", 0), 900));
        b.push(Step::Dead(key("d", 1), 901));
        b.push(Step::Pass);
        b
    };
    let commit = vec![
        Step::Schedule(key("n", 0), 100),
        Step::Cancel(key("b", 0)),
        Step::Schedule(key("b", 1), 101),
        Step::Pass,
        Step::Schedule(key("n", 1), 102),
        Step::Fired(key("b", 2), 3),
        Step::Pass,
        Step::Cancel(key("n", 0)),
        Step::Dead(key("b", 3), 4),
        Step::Pass,
    ];
    // 8 KiB timers: about 130 fill a 1 MiB segment; passes of 40 (4 commits of ≤ 256 KiB).
    let fill = |prefix: &str, n: usize, v0: u64, cancel: bool| -> Vec<Step> {
        let mut s = Vec::new();
        for i in 0..n {
            s.push(Step::Schedule(key(prefix, i), v0 + i as u64));
            if cancel {
                s.push(Step::Cancel(key(prefix, i)));
            }
            if i % 40 == 39 {
                s.push(Step::Pass);
            }
        }
        s.push(Step::Pass);
        s
    };
    let mut compaction_base = fill("c", 140, 1000, false);
    compaction_base.extend((0..136).map(|i| Step::Cancel(key("c", i))));
    compaction_base.push(Step::Pass);
    let mut compaction = fill("x", 140, 5000, true);
    compaction.push(Step::Compaction);
    compaction.push(Step::Schedule(key("y", 0), 9000));
    compaction.push(Step::Pass);
    vec![
        Phase {
            name: "commit",
            payload: 16,
            base: small(8),
            steps: commit,
        },
        Phase {
            name: "segment roll",
            payload: 8 << 10,
            base: small(4),
            steps: fill("r", 140, 2000, false),
        },
        Phase {
            name: "compaction",
            payload: 8 << 10,
            base: compaction_base,
            steps: compaction,
        },
        Phase {
            name: "re-drive",
            payload: 16,
            base: small(4),
            steps: vec![
                Step::Redrive(key("d", 0), 900),
                Step::Pass,
                Step::Schedule(key("n", 0), 100),
                Step::Pass,
            ],
        },
        Phase {
            name: "dead-letter discard",
            payload: 16,
            base: small(4),
            steps: vec![
                Step::Schedule(key("d", 1), 950),
                Step::Pass,
                Step::DeadRemoved(key("d", 1)),
                Step::Pass,
                Step::DeadRemoved(key("d", 0)),
                Step::Schedule(key("n", 0), 100),
                Step::Pass,
            ],
        },
    ]
}

/// What a run of a phase's steps was told: the index of the last acknowledged step + 1.
/// Steps the store refused (`admit`) are replaced by `Pass`: they never reached the outbox.
async fn drive(node: &mut Node, steps: &mut [Step], limit: Duration) -> usize {
    let mut acked = 0;
    let mut waiting: Vec<(usize, Answer)> = Vec::new();
    for (i, step) in steps.iter_mut().enumerate() {
        if step.is_acknowledged() && !node.admits() {
            *step = Step::Pass;
        }
        let answer = match &*step {
            Step::Schedule(k, v) => Some(node.schedule(k, *v, FAR, b"")),
            Step::Cancel(k) => Some(node.cancel(k, 0)),
            Step::Fired(k, v) => {
                node.fired(k, *v);
                None
            }
            Step::Dead(k, v) => {
                node.dead(k, *v, DEAD);
                None
            }
            Step::DeadRemoved(k) => Some(node.dead_removed(k, 0)),
            Step::Redrive(k, v) => Some(node.redrive(k, *v, FAR)),
            Step::Pass => {
                node.pass();
                for (at, a) in waiting.drain(..) {
                    if a.acknowledged(limit).await {
                        acked = acked.max(at + 1);
                    }
                }
                None
            }
            Step::Compaction => {
                for _ in 0..2_000 {
                    if !node.store.shared.files.borrow().compacting {
                        break;
                    }
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                }
                None
            }
        };
        if let Some(a) = answer {
            waiting.push((i, a));
        }
    }
    acked
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Crash,
    Cut,
    Hole,
    Eio,
    NoSpace,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::Crash,
        Variant::Cut,
        Variant::Hole,
        Variant::Eio,
        Variant::NoSpace,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Crash => "crash",
            Variant::Cut => "power cut",
            Variant::Hole => "power cut, hole",
            Variant::Eio => "EIO",
            Variant::NoSpace => "ENOSPC",
        }
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

/// Builds the phase's base in `dir`, on the real disk; its state.
fn build_base(p: &Phase, dir: &Path, fsync: Fsync) -> Result<State, String> {
    let cfg = cfg_for(dir, fsync, Disk::default());
    let data = prepare(&cfg, 1)?;
    let mut state = State::default();
    for s in &p.base {
        state.apply(s);
    }
    on_executor(async {
        let mut node = Node::open(&cfg, data, 0, 1).await?;
        node.payload = vec![b'p'; p.payload];
        let mut base = p.base.clone();
        let acked = drive(&mut node, &mut base, Duration::from_secs(60)).await;
        node.close().await;
        let owed = p
            .base
            .iter()
            .rposition(Step::is_acknowledged)
            .map_or(0, |i| i + 1);
        if acked < owed {
            return Err("the base was not acknowledged".to_string());
        }
        Ok(())
    })?;
    Ok(state)
}

/// Runs the phase's steps on `dir` with `faults`: the last acknowledged step + 1, and the
/// steps as they reached the store.
fn run_steps(
    p: &Phase,
    dir: &Path,
    fsync: Fsync,
    faults: &Arc<Faults>,
    v: Variant,
) -> (usize, Vec<Step>) {
    let mut cfg = cfg_for(dir, fsync, Disk::faulty(faults.clone()));
    if v == Variant::NoSpace {
        cfg.ack_timeout = Duration::from_millis(300);
    }
    let mut steps = p.steps.clone();
    let Ok(data) = prepare(&cfg, 1) else {
        return (0, steps);
    };
    let acked = on_executor(async {
        let Ok(mut node) = Node::open(&cfg, data, 0, 1).await else {
            return 0;
        };
        node.payload = vec![b'p'; p.payload];
        let acked = drive(&mut node, &mut steps, Duration::from_secs(30)).await;
        if v == Variant::NoSpace {
            faults.clear();
        }
        node.close().await;
        acked
    });
    (acked, steps)
}

/// Reopens `dir` on the real disk without skipping corruption; the recovered state.
fn recover(dir: &Path, fsync: Fsync) -> Result<State, String> {
    let cfg = cfg_for(dir, fsync, Disk::default());
    let data = prepare(&cfg, 1)?;
    on_executor(async {
        let node = Node::open(&cfg, data, 0, 1).await?;
        let s = State::of(&node);
        node.close().await;
        Ok(s)
    })
}

/// The file operations a clean run of the phase makes.
fn count_ops(p: &Phase, base: &Path, work: &Path, fsync: Fsync) -> Result<u64, String> {
    let dir = work.join(format!("count-{}-{fsync:?}", p.name));
    copy_dir(base, &dir).map_err(|e| e.to_string())?;
    let faults = Faults::new(work);
    run_steps(p, &dir, fsync, &faults, Variant::Crash);
    Ok(faults.count())
}

/// One case: fault operation `n` of phase `p` with variant `v`, recover, check.
fn case(
    p: &Phase,
    base: (&Path, &State),
    work: &Path,
    fsync: Fsync,
    v: Variant,
    n: u64,
) -> Outcome {
    let dir = work.join(format!("case-{n}-{v:?}"));
    let trash = work.join(format!("trash-{n}-{v:?}"));
    if let Err(e) = copy_dir(base.0, &dir).and_then(|()| std::fs::create_dir_all(&trash)) {
        return Outcome::Violated(format!("setup: {e}"));
    }
    let faults = Faults::new(&trash);
    faults.fail_at(
        n,
        match v {
            Variant::Eio => Fault::Eio,
            Variant::NoSpace => Fault::NoSpace,
            _ => Fault::Die,
        },
    );
    let (acked, steps) = run_steps(p, &dir, fsync, &faults, v);
    let cut = match v {
        Variant::Cut => faults.power_cut(|_| false),
        Variant::Hole => faults.power_cut(|i| i != 0),
        _ => Ok(()),
    };
    if let Err(e) = cut {
        return Outcome::Violated(format!("power cut: {e}"));
    }
    let outcome = match recover(&dir, fsync) {
        Err(e) => Outcome::Violated(format!("the start failed: {e}")),
        Ok(found) => judge(&steps, base.1, &found, acked, fsync, v),
    };
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&trash);
    outcome
}

fn judge(
    steps: &[Step],
    base: &State,
    found: &State,
    acked: usize,
    fsync: Fsync,
    v: Variant,
) -> Outcome {
    let power = matches!(v, Variant::Cut | Variant::Hole);
    let mut state = base.clone();
    let mut prefixes = vec![state.clone()];
    for s in steps {
        state.apply(s);
        prefixes.push(state.clone());
    }
    match prefixes.iter().rposition(|s| s == found) {
        Some(at) if at >= acked => Outcome::Held { lost: false },
        Some(_) if power && !fsync.per_commit() => Outcome::Held { lost: true },
        Some(at) => Outcome::Violated(format!(
            "recovered the state after {at} steps; {acked} were acknowledged"
        )),
        None => Outcome::Violated(format!(
            "recovered a state no prefix of the steps gives: {found:?} (acknowledged {acked} steps)"
        )),
    }
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
    for p in phases() {
        for &fsync in modes {
            let base = work.path().join(format!("base-{}-{fsync:?}", p.name));
            let state = match build_base(&p, &base, fsync) {
                Ok(s) => s,
                Err(e) => {
                    all.push(format!("{} {fsync:?}: base: {e}", p.name));
                    continue;
                }
            };
            let ops = match count_ops(&p, &base, work.path(), fsync) {
                Ok(n) => n,
                Err(e) => {
                    all.push(format!("{} {fsync:?}: count: {e}", p.name));
                    continue;
                }
            };
            for &v in variants {
                let mut t = Tally::default();
                for n in (0..ops).step_by(stride as usize) {
                    t.points += 1;
                    match case(&p, (&base, &state), work.path(), fsync, v, n) {
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
    let full = std::env::var("PUNCTUAL_CRASH_MATRIX").is_ok_and(|v| v == "full");
    let (table, violations) = if full {
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
    let found = recover(&dir, Fsync::EverySec).expect("recovers");
    assert_eq!(found.pending.get("k"), Some(&7));
}
