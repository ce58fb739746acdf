//! `tuning/apply.sh` against copies of the doctor's fixture trees, and the example unit.
//!
//! The script's sysfs/proc root is injected with `PUNCTUAL_SYSROOT`. `--dry-run` must
//! leave the tree byte-for-byte and timestamp-for-timestamp as it was; a real run must
//! write exactly the values `punctual doctor` asks for.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of a doctor fixture tree (an untuned or a tuned host) to run the script on.
fn tree(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("tests/fixtures/doctor").join(name), dir.path());
    dir
}

/// Every path under `root` with its contents and modification time.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (Vec<u8>, Option<SystemTime>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (Vec<u8>, Option<SystemTime>)>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let meta = entry.metadata().unwrap();
            let key = path.strip_prefix(root).unwrap().to_owned();
            if meta.is_dir() {
                out.insert(key, (Vec::new(), None));
                walk(root, &path, out);
            } else {
                out.insert(key, (fs::read(&path).unwrap(), meta.modified().ok()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn apply(root: &Path, args: &[&str]) -> Output {
    Command::new("bash")
        .arg(repo().join("tuning/apply.sh"))
        .args(args)
        .env("PUNCTUAL_SYSROOT", root)
        .output()
        .expect("bash runs tuning/apply.sh")
}

fn read(root: &Path, host_path: &str) -> String {
    fs::read_to_string(root.join(host_path.trim_start_matches('/')))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn dry_run_writes_nothing_and_prints_every_change() {
    let root = tree("bad");
    let before = snapshot(root.path());
    let out = apply(root.path(), &["--cores", "2-3", "--dry-run"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        snapshot(root.path()),
        before,
        "--dry-run changed the tree:\n{text}"
    );
    for expected in [
        "would set cpu2 governor: powersave -> performance",
        "would set cpu3 C6 (133 us) disable: 0 -> 1",
        "would set IRQ 24 affinity: 0-3 -> 0-1",
        "would set THP enabled",
        "isolcpus=managed_irq,domain,2-3 nohz_full=2-3 rcu_nocbs=2-3 irqaffinity=0-1",
        "nothing was written",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn apply_writes_governor_cstates_irq_affinity_and_thp() {
    let root = tree("bad");
    let out = apply(root.path(), &["--cores", "2-3"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cpu = "/sys/devices/system/cpu";
    for core in [2, 3] {
        assert_eq!(
            read(
                root.path(),
                &format!("{cpu}/cpu{core}/cpufreq/scaling_governor")
            ),
            "performance"
        );
        assert_eq!(
            read(
                root.path(),
                &format!("{cpu}/cpu{core}/cpuidle/state2/disable")
            ),
            "1"
        );
        assert_eq!(
            read(
                root.path(),
                &format!("{cpu}/cpu{core}/cpuidle/state1/disable")
            ),
            "0",
            "C1 stays"
        );
    }
    for housekeeping in [0, 1] {
        let governor = read(
            root.path(),
            &format!("{cpu}/cpu{housekeeping}/cpufreq/scaling_governor"),
        );
        assert_eq!(governor, "powersave", "housekeeping cores are left alone");
    }
    for irq in [0, 1, 24, 25, 26] {
        assert_eq!(
            read(root.path(), &format!("/proc/irq/{irq}/smp_affinity_list")),
            "0-1"
        );
    }
    assert_eq!(read(root.path(), "/proc/irq/default_smp_affinity"), "3");
    assert_eq!(
        read(root.path(), "/sys/kernel/mm/transparent_hugepage/enabled"),
        "madvise"
    );

    // A second run finds nothing left to do.
    let again = apply(root.path(), &["--cores", "2-3", "--dry-run"]);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("0 change(s) would be made"), "{text}");
}

#[test]
fn a_tuned_tree_needs_no_changes() {
    let root = tree("good");
    let before = snapshot(root.path());
    let out = apply(root.path(), &["--cores", "2-3"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("0 change(s) applied"), "{text}");
    assert_eq!(snapshot(root.path()), before);
}

#[test]
fn skip_leaves_a_group_alone() {
    let root = tree("bad");
    let out = apply(root.path(), &["--cores", "2-3", "--skip", "irq,thp"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(read(root.path(), "/proc/irq/24/smp_affinity_list"), "0-3");
    assert_eq!(
        read(root.path(), "/sys/kernel/mm/transparent_hugepage/enabled"),
        "[always] madvise never"
    );
    assert_eq!(
        read(
            root.path(),
            "/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor"
        ),
        "performance"
    );
}

#[test]
fn usage_errors_exit_two_and_write_nothing() {
    let root = tree("bad");
    let before = snapshot(root.path());
    for (args, message) in [
        (&[][..], "--cores LIST is required"),
        (&["--cores", "2-9"][..], "CPU 4 in --cores is not online"),
        (&["--cores", "0-3"][..], "leaves no housekeeping core"),
        (&["--cores", "two"][..], "not a CPU list"),
        (&["--cores", "2-3", "--bogus"][..], "unknown argument"),
    ] {
        let out = apply(root.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: expected {message:?} in {stderr}"
        );
    }
    assert_eq!(snapshot(root.path()), before);
}

#[test]
fn example_unit_matches_the_cli_and_the_doctor() {
    let unit = fs::read_to_string(repo().join("tuning/punctual.service")).unwrap();
    for line in [
        "ExecStart=/usr/local/bin/punctual serve",
        "ExecStartPre=/usr/local/bin/punctual doctor",
        "Environment=PUNCTUAL_CORES=2-5",
        "CPUAffinity=",
        "LimitMEMLOCK=infinity",
        "TimerSlackNSec=1",
        "Nice=",
        "CPUSchedulingPolicy=",
        "After=network-online.target time-sync.target",
    ] {
        assert!(
            unit.lines().any(|l| l.starts_with(line)),
            "punctual.service lacks {line:?}"
        );
    }
    let tuning = fs::read_to_string(repo().join("tuning/punctual-tuning.service")).unwrap();
    assert!(
        tuning.contains("--cores 2-5"),
        "the tuning unit uses the service's cores"
    );
}
