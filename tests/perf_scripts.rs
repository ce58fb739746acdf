//! `perf/flamegraph.sh`, `perf/plot_lateness.py` and `perf/proc_sample.py`.
//!
//! The flamegraph test decides at run time which branch it is on: where `perf` can record
//! and inferno is installed, the script must draw a non-empty SVG from a short command;
//! anywhere else it must fail with a clear message and leave no SVG behind. The failure
//! branches are also forced with a missing and a refusing `perf`, on every machine.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A short CPU-bound command that exists on every Linux machine.
const BUSY: [&str; 3] = [
    "sh",
    "-c",
    "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done",
];

fn flamegraph(out: &Path, envs: &[(&str, &str)], command: &[&str]) -> Output {
    Command::new("bash")
        .arg(repo().join("perf/flamegraph.sh"))
        .arg("--out")
        .arg(out)
        .arg("--")
        .args(command)
        .envs(envs.iter().copied())
        .output()
        .expect("bash runs perf/flamegraph.sh")
}

fn perf_can_record(dir: &Path) -> bool {
    Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-g", "-o"])
        .arg(dir.join("probe.data"))
        .args(["--", "true"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn inferno_installed() -> bool {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|c| c.join("bin/inferno-flamegraph"));
    let on_path = Command::new("inferno-flamegraph")
        .arg("--help")
        .output()
        .is_ok();
    on_path || cargo_bin.is_some_and(|p| p.exists())
}

fn assert_clear_failure(out: &Output, svg: &Path, code: i32, words: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "expected {word:?} in: {stderr}");
    }
    assert!(
        stderr.contains("No flamegraph was written")
            || stderr.contains("no flamegraph was written"),
        "{stderr}"
    );
    assert!(!svg.exists(), "a failed run must not leave an SVG");
}

#[test]
fn flamegraph_draws_real_samples_or_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("busy.svg");
    if perf_can_record(dir.path()) && inferno_installed() {
        let out = flamegraph(&svg, &[], &BUSY);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let text = fs::read_to_string(&svg).expect("the SVG exists");
        assert!(
            text.contains("<svg") && text.contains("sh"),
            "an inferno flamegraph of sh: {}",
            &text[..200.min(text.len())]
        );
        let folded = fs::read_to_string(dir.path().join("busy.folded")).unwrap();
        assert!(
            !folded.trim().is_empty(),
            "the folded stacks are kept for diffs"
        );
    } else {
        // No perf, a perf that cannot record here, or no inferno (and no installing it
        // inside a test): each is a clear failure with no SVG.
        let out = flamegraph(&svg, &[("PUNCTUAL_NO_INSTALL", "1")], &BUSY);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(matches!(out.status.code(), Some(3 | 4)), "{stderr}");
        assert!(
            stderr.contains("perf") || stderr.contains("inferno"),
            "{stderr}"
        );
        assert!(!svg.exists());
    }
}

#[test]
fn flamegraph_without_perf_fails_clearly_and_writes_no_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("none.svg");
    let out = flamegraph(&svg, &[("PERF", "/nonexistent/perf")], &BUSY);
    assert_clear_failure(&out, &svg, 3, &["perf is not installed", "linux-perf"]);
}

#[test]
fn flamegraph_with_a_perf_that_cannot_record_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("perf");
    fs::write(
        &fake,
        "#!/bin/sh\necho 'Error: perf_event_open(..., PERF_FLAG_FD_CLOEXEC) failed with unexpected error 1 (Operation not permitted)' >&2\nexit 255\n",
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let svg = dir.path().join("refused.svg");
    let out = flamegraph(&svg, &[("PERF", fake.to_str().unwrap())], &BUSY);
    assert_clear_failure(
        &out,
        &svg,
        3,
        &[
            "cannot record",
            "Operation not permitted",
            "perf_event_paranoid",
        ],
    );
}

#[test]
fn flamegraph_usage_errors_exit_two() {
    let dir = tempfile::tempdir().unwrap();
    let script = repo().join("perf/flamegraph.sh");
    for args in [
        &[][..],
        &["--pid", "notapid"][..],
        &["--pid", "1", "--", "true"][..],
        &["--out", "x.png", "--", "true"][..],
    ] {
        let out = Command::new("bash")
            .arg(&script)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "usage errors write nothing"
    );
}

fn python3() -> Option<&'static str> {
    Command::new("python3")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| "python3")
}

#[test]
fn lateness_plots_come_from_jitter_lines_and_metrics() {
    let Some(python) = python3() else {
        eprintln!("python3 is not installed: perf/plot_lateness.py cannot run here; skipping");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fixtures = repo().join("tests/fixtures/perf");
    let out = Command::new(python)
        .arg(repo().join("perf/plot_lateness.py"))
        .arg(fixtures.join("jitter.out"))
        .arg(fixtures.join("metrics.prom"))
        .arg("--label")
        .arg("punctual-metrics")
        .arg("--out-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (name, must_hold) in [
        (
            "lateness-punctual.svg",
            &["percentile curve", "W1", "W2"][..],
        ),
        ("lateness-tokio.svg", &["percentile curve"][..]),
        (
            "lateness-punctual-metrics.svg",
            &["histogram", "fired 2000"][..],
        ),
        ("lateness-all.svg", &["punctual W1", "tokio W1"][..]),
    ] {
        let svg =
            fs::read_to_string(dir.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{name} is one SVG document"
        );
        for text in must_hold {
            assert!(svg.contains(text), "{name} lacks {text:?}");
        }
    }
}

#[test]
fn lateness_plot_refuses_input_without_lateness() {
    let Some(python) = python3() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("empty.prom");
    fs::write(&input, "punctual_timers_fired_total 3\n").unwrap();
    let out = Command::new(python)
        .arg(repo().join("perf/plot_lateness.py"))
        .arg(&input)
        .arg("--out-dir")
        .arg(dir.path().join("plots"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("punctual_fire_lateness_seconds"));
    assert!(
        !dir.path().join("plots").exists(),
        "nothing is written for bad input"
    );
}

/// `perf/proc_sample.py` runs the command, samples it, and prints its per-thread CPU; its exit
/// status is the command's.
#[test]
fn proc_sample_reports_the_commands_threads_and_passes_on_its_status() {
    let run = |script: &str| {
        Command::new("python3")
            .arg(repo().join("perf/proc_sample.py"))
            .args(["--every", "0.2", "--", "sh", "-c", script])
            .output()
            .expect("python3 runs perf/proc_sample.py")
    };
    let busy = format!("{}; sleep 0.5", BUSY[2]);
    let out = run(&busy);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("wall "), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("sh ")),
        "the command's thread has a row: {stdout}"
    );
    let failed = run("sleep 0.5; exit 3");
    assert_eq!(failed.status.code(), Some(3));
}
