//! Crashes during recovery itself. A start changes the data directory before it serves: it
//! deletes the files a snapshot covers and unfinished snapshots, cuts a torn tail and syncs
//! it, removes a newest segment that holds no record, syncs the newest segment, resumes a
//! re-partition, and creates its own segment. Each of those can be cut short by a crash or a
//! power cut, and the start after that one must still recover every acknowledged step.
//!
//! ```text
//!   for each phase, and each crash point N of its run (every `stride`-th):
//!     the run faulted at N as the matrix does (always: the process dies; never: the power
//!     goes with a hole), which leaves a directory that needs recovery's work
//!     a first start on a counting disk: it does R file operations
//!     for M in 0..R: a first start that dies at M and loses the power, then a second start
//!       on the real disk, judged as the matrix judges (a prefix of the steps past every
//!       acknowledged one, a version floor at least every version it carried)
//! ```

use super::super::faults::{Fault, Faults};
use super::super::io::Disk;
use super::super::Fsync;
use super::model::{phases, Phase, State};
use super::{
    build_base, copy_dir, count_ops, judge, recover, recover_on, resurrected, run_steps, Outcome,
    Variant,
};
use std::path::Path;

/// A scratch directory under `work` named `name`: emptied, with an empty trash beside it.
fn fresh(work: &Path, name: &str) -> Result<(std::path::PathBuf, std::path::PathBuf), String> {
    let (dir, trash) = (work.join(name), work.join(format!("{name}-trash")));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&trash);
    std::fs::create_dir_all(&trash).map_err(|e| format!("{}: {e}", trash.display()))?;
    Ok((dir, trash))
}

/// Counts for one (phase, mode): first crash points that left a directory, recovery crash
/// points tried, violations.
#[derive(Default)]
struct Tally {
    left: u64,
    points: u64,
    violations: Vec<String>,
}

/// Every crash point of every start after the phase's crash point `n` (see the module doc).
fn after_point(p: &Phase, base: (&Path, &State), work: &Path, fsync: Fsync, n: u64) -> Tally {
    let mut t = Tally::default();
    let first = if fsync.per_commit() {
        Variant::Crash
    } else {
        Variant::Hole
    };
    let violated = |t: &mut Tally, m: &str, why: String| {
        let name = p.name;
        t.violations.push(format!(
            "{name} / {fsync:?} / crash at {n}, then in recovery at {m}: {why}"
        ));
    };
    let Ok((left, trash)) = fresh(work, "left") else {
        return t;
    };
    if let Err(e) = copy_dir(base.0, &left) {
        violated(&mut t, "-", format!("setup: {e}"));
        return t;
    }
    let faults = Faults::new(&trash);
    faults.fail_at(n, first.fault());
    let (run, steps) = run_steps(p, &left, fsync, &faults, first);
    if !faults.hit() {
        // Its interleaving strayed from the clean run's: the matrix tries such a case again;
        // here another point covers the same work.
        return t;
    }
    if first == Variant::Hole {
        if let Err(e) = faults.power_cut(|i| i != 0) {
            violated(&mut t, "-", format!("power cut: {e}"));
            return t;
        }
    }
    t.left = 1;
    let sizes = (p.shards, p.payload);
    let ops = match fresh(work, "count") {
        Ok((dir, trash)) => {
            let counting = Faults::new(&trash);
            let counted = copy_dir(&left, &dir)
                .map_err(|e| e.to_string())
                .and_then(|()| recover_on(&dir, fsync, Disk::faulty(counting.clone()), sizes));
            if let Err(why) = counted {
                violated(&mut t, "-", format!("the first start failed: {why}"));
                return t;
            }
            counting.count()
        }
        Err(why) => {
            violated(&mut t, "-", why);
            return t;
        }
    };
    for m in 0..ops {
        t.points += 1;
        let Ok((dir, trash)) = fresh(work, "again") else {
            continue;
        };
        if let Err(e) = copy_dir(&left, &dir) {
            violated(&mut t, &m.to_string(), format!("setup: {e}"));
            continue;
        }
        let dies = Faults::new(&trash);
        dies.fail_at(m, Fault::Die);
        // It dies at M: what it returns is of no account, what it left on disk is.
        let _ = recover_on(&dir, fsync, Disk::faulty(dies.clone()), sizes);
        if let Err(e) = dies.power_cut(|_| false) {
            violated(&mut t, &m.to_string(), format!("power cut: {e}"));
            continue;
        }
        let lost_allowed = !fsync.per_commit();
        let outcome = match recover(&dir, fsync, sizes) {
            Err(why) => Outcome::Violated(format!("the second start failed: {why}")),
            Ok(found) => match judge(&steps, base.1, &found, &run.acked, lost_allowed) {
                Outcome::Held { .. } if !lost_allowed => resurrected(&found, &run.delivered)
                    .map_or(Outcome::Held { lost: false }, Outcome::Violated),
                judged => judged,
            },
        };
        if let Outcome::Violated(why) = outcome {
            violated(&mut t, &m.to_string(), why);
        }
    }
    t
}

#[test]
fn a_crash_or_power_cut_during_recovery_loses_nothing_the_next_start_owes() {
    // `PUNCTUAL_CRASH_MATRIX=full`: after every crash point of the runs, in `always` and
    // `never`; else after every eighth, in `always` (about 0.15 s a recovery crash point in
    // a debug build: 1,900 for the full run).
    let full = std::env::var("PUNCTUAL_CRASH_MATRIX").is_ok_and(|m| m == "full");
    let (stride, modes) = if full {
        (1, &[Fsync::Always, Fsync::Never][..])
    } else {
        (8, &[Fsync::Always][..])
    };
    let only = std::env::var("PUNCTUAL_CRASH_PHASE").ok();
    let work = tempfile::tempdir().expect("tempdir");
    let mut table = String::from(
        "| phase | fsync | first crash | directories left | recovery crash points | violations |\n|---|---|---|---|---|---|\n",
    );
    let mut all = Vec::new();
    for p in phases() {
        if only.as_deref().is_some_and(|name| name != p.name) {
            continue;
        }
        for &fsync in modes {
            let base = work.path().join(format!("base-{}-{fsync:?}", p.name));
            let state = build_base(&p, &base, fsync).expect("the base");
            let ops = count_ops(&p, &base, work.path(), fsync)
                .expect("a clean run")
                .len();
            let mut sum = Tally::default();
            for n in (0..ops as u64).step_by(stride) {
                let t = after_point(&p, (&base, &state), work.path(), fsync, n);
                sum.left += t.left;
                sum.points += t.points;
                sum.violations.extend(t.violations);
            }
            let first = if fsync.per_commit() {
                "crash"
            } else {
                "power cut, hole"
            };
            table.push_str(&format!(
                "| {} | {} | {first} | {} | {} | {} |\n",
                p.name,
                format!("{fsync:?}").to_lowercase(),
                sum.left,
                sum.points,
                sum.violations.len()
            ));
            all.extend(sum.violations);
        }
    }
    println!("{table}");
    assert!(
        all.is_empty(),
        "{} violations:\n{}",
        all.len(),
        all.join("\n")
    );
}
