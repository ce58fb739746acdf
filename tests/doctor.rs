//! `punctual doctor` against fixture trees.
//!
//! `tests/fixtures/doctor/good` is a tuned bare-metal host on which every check passes for
//! shard cores 2-3; `tests/fixtures/doctor/bad` is an untuned VM on which every check
//! warns or fails. Further cases copy the good tree and change one file. The binary is
//! run for the exit status and the JSON.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use punctual::doctor::{collect, Check, Context, CpuSet, Host, Report, Status};

const ALL_CHECKS: [&str; 17] = [
    "clock.tsc",
    "clock.clocksource",
    "clock.hypervisor",
    "cores.available",
    "cores.isolation",
    "cores.governor",
    "cores.cstates",
    "cores.irq",
    "memory.thp",
    "memory.swap",
    "memory.memlock",
    "io_uring.kernel",
    "io_uring.enabled",
    "time.sync",
    "time.daemon",
    "time.step",
    "process.timerslack",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/doctor")
        .join(name)
}

fn report(root: &Path, cores: &str) -> Report {
    let cores = CpuSet::parse(cores).expect("test core list parses");
    collect(&Context::new(Host::new(root), Some(cores), None))
}

fn find<'a>(report: &'a Report, id: &str) -> &'a Check {
    report
        .checks
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no check {id} in {report:#?}"))
}

/// Copies a fixture tree into a fresh temporary directory, to change one file in it.
fn copy_of(name: &str) -> tempfile::TempDir {
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
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture(name), dir.path());
    dir
}

fn write(root: &Path, host_path: &str, text: &str) {
    let path = root.join(host_path.trim_start_matches('/'));
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn remove(root: &Path, host_path: &str) {
    let path = root.join(host_path.trim_start_matches('/'));
    if path.is_dir() {
        fs::remove_dir_all(path).unwrap();
    } else {
        fs::remove_file(path).unwrap();
    }
}

#[test]
fn every_check_passes_on_the_tuned_tree() {
    let report = report(&fixture("good"), "2-3");
    let ids: Vec<&str> = report.checks.iter().map(|c| c.id).collect();
    assert_eq!(
        ids, ALL_CHECKS,
        "the check list changed; update ALL_CHECKS and the fixtures"
    );
    for check in &report.checks {
        assert_eq!(check.status, Status::Pass, "{check:#?}");
        assert!(
            check.fix.is_none(),
            "a passing check carries no fix: {check:#?}"
        );
        assert!(
            !check.why.is_empty() && !check.found.is_empty(),
            "{check:#?}"
        );
    }
    assert!(report.ok);
}

#[test]
fn every_check_flags_the_untuned_tree() {
    let expected: BTreeMap<&str, Status> = [
        ("clock.tsc", Status::Warn),
        ("clock.clocksource", Status::Warn),
        ("clock.hypervisor", Status::Warn),
        ("cores.available", Status::Fail),
        ("cores.isolation", Status::Warn),
        ("cores.governor", Status::Warn),
        ("cores.cstates", Status::Warn),
        ("cores.irq", Status::Warn),
        ("memory.thp", Status::Warn),
        ("memory.swap", Status::Warn),
        ("memory.memlock", Status::Fail),
        ("io_uring.kernel", Status::Fail),
        ("io_uring.enabled", Status::Fail),
        ("time.sync", Status::Fail),
        ("time.daemon", Status::Warn),
        ("time.step", Status::Warn),
        ("process.timerslack", Status::Warn),
    ]
    .into_iter()
    .collect();
    let report = report(&fixture("bad"), "2-3");
    for check in &report.checks {
        assert_eq!(Some(&check.status), expected.get(check.id), "{check:#?}");
        if check.status != Status::Pass {
            let fix = check.fix.as_deref().unwrap_or("");
            assert!(
                !fix.is_empty(),
                "a check that did not pass must say how to fix it: {check:#?}"
            );
        }
    }
    assert!(!report.ok);
}

#[test]
fn cores_that_are_not_online_fail() {
    let report = report(&fixture("good"), "2-5");
    let check = find(&report, "cores.available");
    assert_eq!(check.status, Status::Fail, "{check:#?}");
    assert!(
        check.found.contains("4-5"),
        "names the offline CPUs: {check:#?}"
    );
}

#[test]
fn cores_outside_the_inherited_affinity_fail() {
    let tree = copy_of("good");
    write(
        tree.path(),
        "/proc/self/status",
        "Name:\tpunctual\nCpus_allowed_list:\t0-1\n",
    );
    let check = find(&report(tree.path(), "2-3"), "cores.available").clone();
    assert_eq!(check.status, Status::Fail, "{check:#?}");
    assert!(
        check.fix.as_deref().unwrap_or("").contains("CPUAffinity"),
        "{check:#?}"
    );
}

#[test]
fn default_cores_follow_the_inherited_affinity_like_serve() {
    let tree = copy_of("good");
    write(
        tree.path(),
        "/proc/self/status",
        "Name:\tpunctual\nCpus_allowed_list:\t1-3\n",
    );
    let report = collect(&Context::new(Host::new(tree.path()), None, None));
    assert_eq!(report.cores, "1-3");
    assert_eq!(report.shards, 3);
}

#[test]
fn all_cores_as_shards_leaves_no_housekeeping_core() {
    let report = report(&fixture("good"), "0-3");
    assert_eq!(find(&report, "cores.isolation").status, Status::Warn);
}

#[test]
fn default_cores_are_every_online_core() {
    let report = collect(&Context::new(Host::new(fixture("good")), None, None));
    assert_eq!(report.cores, "0-3");
    assert_eq!(report.shards, 4);
    assert!(!report.cores_given);
}

#[test]
fn one_missing_isolation_parameter_warns_and_names_it() {
    let tree = copy_of("good");
    write(
        tree.path(),
        "/proc/cmdline",
        "ro isolcpus=2-3 nohz_full=2-3\n",
    );
    let report = report(tree.path(), "2-3");
    let check = find(&report, "cores.isolation");
    assert_eq!(check.status, Status::Warn);
    assert!(check.found.contains("rcu_nocbs"), "{check:#?}");
    assert!(
        check.fix.as_deref().unwrap_or("").contains("nohz_full=2-3"),
        "{check:#?}"
    );
}

#[test]
fn isolation_lists_that_miss_a_shard_core_warn() {
    let tree = copy_of("good");
    write(
        tree.path(),
        "/proc/cmdline",
        "isolcpus=domain,3 nohz_full=2-3 rcu_nocbs=all\n",
    );
    let check = find(&report(tree.path(), "2-3"), "cores.isolation").clone();
    assert_eq!(check.status, Status::Warn);
    assert!(check.found.contains("isolcpus=3 misses 2"), "{check:#?}");
}

#[test]
fn clocksource_without_tsc_available_points_at_the_bios() {
    let tree = copy_of("good");
    let dir = "/sys/devices/system/clocksource/clocksource0";
    write(tree.path(), &format!("{dir}/current_clocksource"), "hpet\n");
    write(
        tree.path(),
        &format!("{dir}/available_clocksource"),
        "hpet acpi_pm\n",
    );
    let check = find(&report(tree.path(), "2-3"), "clock.clocksource").clone();
    assert_eq!(check.status, Status::Warn);
    assert!(
        check.fix.as_deref().unwrap_or("").contains("unstable"),
        "{check:#?}"
    );
}

#[test]
fn vm_with_invariant_tsc_passes() {
    let tree = copy_of("good");
    let cpuinfo = fs::read_to_string(fixture("good/proc/cpuinfo"))
        .unwrap()
        .replace("pclmulqdq", "pclmulqdq hypervisor");
    write(tree.path(), "/proc/cpuinfo", &cpuinfo);
    let check = find(&report(tree.path(), "2-3"), "clock.hypervisor").clone();
    assert_eq!(check.status, Status::Pass);
    assert!(check.found.starts_with("VM"), "{check:#?}");
}

#[test]
fn irq_that_reaches_one_shard_core_warns_with_its_name() {
    let tree = copy_of("good");
    write(tree.path(), "/proc/irq/26/smp_affinity_list", "3\n");
    let check = find(&report(tree.path(), "2-3"), "cores.irq").clone();
    assert_eq!(check.status, Status::Warn);
    assert!(check.found.contains("26 nvme0q0 -> 3"), "{check:#?}");
}

#[test]
fn no_cpuidle_driver_passes_and_no_cpufreq_driver_warns() {
    let tree = copy_of("good");
    for cpu in 0..4 {
        remove(
            tree.path(),
            &format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle"),
        );
        remove(
            tree.path(),
            &format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq"),
        );
    }
    let report = report(tree.path(), "2-3");
    assert_eq!(find(&report, "cores.cstates").status, Status::Pass);
    let governor = find(&report, "cores.governor");
    assert_eq!(governor.status, Status::Warn);
    assert!(governor.found.contains("no cpufreq"), "{governor:#?}");
}

#[test]
fn swap_falls_back_to_meminfo() {
    let tree = copy_of("good");
    remove(tree.path(), "/proc/swaps");
    assert_eq!(
        find(&report(tree.path(), "2-3"), "memory.swap").status,
        Status::Pass
    );
    write(
        tree.path(),
        "/proc/meminfo",
        "MemTotal: 1 kB\nSwapTotal: 2048 kB\n",
    );
    assert_eq!(
        find(&report(tree.path(), "2-3"), "memory.swap").status,
        Status::Warn
    );
}

#[test]
fn memlock_between_glommio_minimum_and_shard_need_warns() {
    let tree = copy_of("good");
    let limits = "Limit  Soft Limit  Hard Limit  Units\nMax locked memory         8388608              8388608              bytes\n";
    write(tree.path(), "/proc/self/limits", limits);
    let check = find(&report(tree.path(), "2-3"), "memory.memlock").clone();
    assert_eq!(
        check.status,
        Status::Warn,
        "2 shards want 64 MiB: {check:#?}"
    );
}

#[test]
fn io_uring_restricted_to_a_group_warns_and_an_old_kernel_without_the_knob_passes() {
    let tree = copy_of("good");
    write(tree.path(), "/proc/sys/kernel/io_uring_disabled", "1\n");
    write(tree.path(), "/proc/sys/kernel/io_uring_group", "997\n");
    let check = find(&report(tree.path(), "2-3"), "io_uring.enabled").clone();
    assert_eq!(check.status, Status::Warn);
    assert!(check.found.contains("997"), "{check:#?}");

    remove(tree.path(), "/proc/sys/kernel/io_uring_disabled");
    write(
        tree.path(),
        "/proc/sys/kernel/osrelease",
        "6.1.0-18-amd64\n",
    );
    assert_eq!(
        find(&report(tree.path(), "2-3"), "io_uring.enabled").status,
        Status::Pass
    );
}

#[test]
fn chrony_without_makestep_warns_and_ntpd_tinker_step_zero_passes() {
    let tree = copy_of("good");
    remove(tree.path(), "/etc/chrony/conf.d/punctual.conf");
    let check = find(&report(tree.path(), "2-3"), "time.step").clone();
    assert_eq!(check.status, Status::Warn);
    assert!(check.found.contains("no makestep"), "{check:#?}");

    remove(tree.path(), "/etc/chrony");
    write(
        tree.path(),
        "/etc/ntp.conf",
        "server 0.pool.ntp.org\ntinker step 0\n",
    );
    assert_eq!(
        find(&report(tree.path(), "2-3"), "time.step").status,
        Status::Pass
    );
    write(tree.path(), "/etc/ntp.conf", "server 0.pool.ntp.org\n");
    assert_eq!(
        find(&report(tree.path(), "2-3"), "time.step").status,
        Status::Warn
    );
}

#[test]
fn no_time_daemon_warns() {
    let tree = copy_of("good");
    remove(tree.path(), "/proc/812");
    assert_eq!(
        find(&report(tree.path(), "2-3"), "time.daemon").status,
        Status::Warn
    );
}

#[test]
fn an_empty_tree_warns_unknown_and_never_panics() {
    let empty = tempfile::tempdir().unwrap();
    let report = report(empty.path(), "2-3");
    assert_eq!(report.checks.len(), ALL_CHECKS.len());
    for check in &report.checks {
        // Nothing can be read, so nothing may pass, and nothing may fail on a guess
        // (except the cores, which are then unknown too).
        assert_eq!(check.status, Status::Warn, "{check:#?}");
        assert!(
            check.found.contains("unknown") || check.found.contains("no "),
            "{check:#?}"
        );
    }
}

/// Every file of the good tree replaced, one at a time and then all at once, by
/// garbage: the doctor must still report every check and not panic.
#[test]
fn garbage_in_any_file_never_panics() {
    let garbage: [&[u8]; 6] = [
        b"",
        b"\xff\xfe\x00garbage\x00",
        b"[[[ ]]] ::: === ,,, ---",
        b"99999999999999999999999999 -1 0-4294967295",
        b"Max locked memory\nflags:\nmakestep\nunsync=\n",
        b"  \n\n\t",
    ];
    let files: Vec<PathBuf> = {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out)
                } else {
                    out.push(path)
                }
            }
        }
        let mut files = Vec::new();
        walk(&fixture("good"), &mut files);
        files
    };
    for bytes in garbage {
        let tree = copy_of("good");
        for file in &files {
            let relative = file.strip_prefix(fixture("good")).unwrap();
            fs::write(tree.path().join(relative), bytes).unwrap();
        }
        let report = report(tree.path(), "2-3");
        assert_eq!(report.checks.len(), ALL_CHECKS.len(), "{report:#?}");
    }
    let tree = copy_of("good");
    for file in files.iter().step_by(3) {
        let relative = file.strip_prefix(fixture("good")).unwrap();
        fs::write(tree.path().join(relative), garbage[3]).unwrap();
        let report = report(tree.path(), "2-3");
        assert_eq!(report.checks.len(), ALL_CHECKS.len(), "{report:#?}");
    }
}

fn doctor(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_punctual"))
        .arg("doctor")
        .args(args)
        .env_remove("PUNCTUAL_CORES")
        .env_remove("PUNCTUAL_SHARDS")
        .output()
        .expect("the punctual binary runs")
}

fn root_arg(name: &str) -> String {
    fixture(name).display().to_string()
}

#[test]
fn exit_status_is_zero_when_nothing_fails_and_one_otherwise() {
    let good = doctor(&["--root", &root_arg("good"), "--cores", "2-3"]);
    let text = String::from_utf8_lossy(&good.stdout);
    assert_eq!(good.status.code(), Some(0), "{text}");
    assert!(text.contains("PASS  clock.tsc"), "{text}");

    let bad = doctor(&["--root", &root_arg("bad"), "--cores", "2-3"]);
    let text = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  time.sync") && text.contains("fix:"),
        "{text}"
    );

    // Warnings alone do not fail the preflight.
    let tree = copy_of("good");
    write(
        tree.path(),
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "[always] madvise never\n",
    );
    let warned = doctor(&[
        "--root",
        &tree.path().display().to_string(),
        "--cores",
        "2-3",
    ]);
    assert_eq!(
        warned.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&warned.stdout)
    );
}

#[test]
fn json_output_parses_and_matches_the_checks() {
    let out = doctor(&["--root", &root_arg("bad"), "--cores", "2-3", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--json prints one JSON object");
    assert_eq!(json["ok"], false);
    assert_eq!(json["cores"], "2-3");
    assert_eq!(json["shards"], 2);
    let checks = json["checks"].as_array().expect("checks is an array");
    let ids: Vec<&str> = checks.iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, ALL_CHECKS);
    for check in checks {
        let status = check["status"].as_str().unwrap_or("");
        assert!(["pass", "warn", "fail"].contains(&status), "{check}");
        assert!(
            check["found"].is_string() && check["why"].is_string(),
            "{check}"
        );
        assert_eq!(check["fix"].is_string(), status != "pass", "{check}");
    }
    let fails = checks.iter().filter(|c| c["status"] == "fail").count();
    assert_eq!(json["summary"]["fail"], fails);
}

#[test]
fn cores_come_from_the_environment_like_serve() {
    let out = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["doctor", "--json", "--root", &root_arg("good")])
        .env("PUNCTUAL_CORES", "3")
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["cores"], "3");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_malformed_core_list_is_a_usage_error() {
    let out = doctor(&["--root", &root_arg("good"), "--cores", "two-three"]);
    assert_eq!(out.status.code(), Some(2), "clap's usage-error status");
    assert!(String::from_utf8_lossy(&out.stderr).contains("two-three"));
}

#[test]
fn the_live_host_is_checked_without_panicking() {
    let out = doctor(&["--json"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("JSON on the live host");
    assert_eq!(
        json["checks"].as_array().map(Vec::len),
        Some(ALL_CHECKS.len())
    );
}
