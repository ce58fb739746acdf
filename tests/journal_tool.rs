//! `punctual journal check` and `punctual journal dump` on real data directories that the real
//! service wrote: a good one (exit 0, every record dumped as JSON), one with a sealed segment
//! cut short, and one that lost a middle segment (exit 1, naming the file and offset, and
//! what --journal-skip-corrupt would skip; the server refuses to start and names the tool).

mod api_support;

use api_support::Server;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn serve(data: &Path) -> Server {
    let dir = data.to_string_lossy().into_owned();
    Server::start(&["--store", "journal", "--data-dir", &dir, "--shards", "1"])
}

/// SIGTERM, and wait for the clean exit (the last segment is trimmed to its records).
fn stop(mut s: Server) {
    let pid = s.child.id() as i32;
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let _ = s.child.wait();
}

fn put(s: &Server, key: &str) {
    let (st, r) = s.json(
        "PUT",
        &format!("/v1/timers/shop/{key}"),
        &json!({"delay_ms": 3_600_000, "payload": {"key": key}}).to_string(),
    );
    assert_eq!(st, 201, "{r}");
}

/// `punctual journal <args>`, bounded.
fn tool(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .arg("journal")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn punctual journal");
    let give_up = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > give_up {
            let _ = child.kill();
            panic!("punctual journal {args:?} did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Three runs of the service on `data`: `a` and `b` scheduled, then `a` cancelled and `c`
/// scheduled, then `d` scheduled; each run writes its own segment (1, 2, 3).
fn three_runs(data: &Path) -> PathBuf {
    let s = serve(data);
    put(&s, "a");
    put(&s, "b");
    stop(s);
    let s = serve(data);
    assert_eq!(s.req("DELETE", "/v1/timers/shop/a", "").status, 204);
    put(&s, "c");
    stop(s);
    let s = serve(data);
    put(&s, "d");
    stop(s);
    data.join("gen-1").join("shard-0")
}

fn seg(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("seg-{seq:016x}.log"))
}

#[test]
fn a_good_directory_checks_clean_and_dumps_every_record_as_json() {
    let data = tempfile::tempdir().expect("data dir");
    let dir = three_runs(data.path());
    let d = data.path().to_string_lossy().into_owned();
    let out = tool(&["check", &d]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    for part in [
        "CURRENT: generation 1, 1 shards",
        "seg-0000000000000001.log",
        "seg-0000000000000002.log",
        "seg-0000000000000003.log",
        "lossless: 3 pending timers, 0 dead letters",
    ] {
        assert!(report.contains(part), "{part:?} not in:\n{report}");
    }
    let out = tool(&["dump", &d, "--shard", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let of = |t: &str| lines.iter().filter(|l| l["type"] == t).collect::<Vec<_>>();
    assert_eq!(of("header").len(), 3);
    let keys: Vec<&str> = of("schedule")
        .iter()
        .filter_map(|l| l["key"].as_str())
        .collect();
    assert_eq!(keys, ["a", "b", "c", "d"]);
    assert_eq!(of("cancel").len(), 1);
    assert_eq!(of("cancel")[0]["key"], "a");
    let batches: Vec<u64> = of("batch")
        .iter()
        .filter_map(|l| l["seq"].as_u64())
        .collect();
    let expected: Vec<u64> = (1..=batches.len() as u64).collect();
    assert_eq!(batches, expected, "the batch sequence runs on across runs");
    assert!(of("damage").is_empty());
    assert!(seg(&dir, 1).exists());
    let out = tool(&["dump", &d, "--shard", "1"]);
    assert!(out.stdout.is_empty(), "no shard 1: {}", text(&out));
}

#[test]
fn a_lost_middle_segment_is_named_by_check_and_refused_by_the_server() {
    let data = tempfile::tempdir().expect("data dir");
    let dir = three_runs(data.path());
    std::fs::remove_file(seg(&dir, 2)).expect("lose the segment that cancelled a");
    let d = data.path().to_string_lossy().into_owned();
    let out = tool(&["check", &d]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    for part in [
        "a start refuses",
        "seg-0000000000000003.log is corrupt at offset 0",
        "segments 2 to 2 are missing",
        "with --journal-skip-corrupt a start skips",
    ] {
        assert!(report.contains(part), "{part:?} not in:\n{report}");
    }
    let refused = server_refusal(data.path());
    assert!(refused.contains("segments 2 to 2 are missing"), "{refused}");
    assert!(
        refused.contains(&format!("punctual journal check {d}")),
        "{refused}"
    );
}

#[test]
fn a_sealed_segment_cut_short_is_named_with_its_offset() {
    let data = tempfile::tempdir().expect("data dir");
    let dir = three_runs(data.path());
    let first = seg(&dir, 1);
    let len = std::fs::metadata(&first).expect("stat").len();
    assert!(len > 4096, "segment 1 holds a commit");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .expect("open");
    f.set_len(4096 + 30).expect("cut inside the first commit");
    drop(f);
    let d = data.path().to_string_lossy().into_owned();
    let out = tool(&["check", &d]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    // The first record after the commit's 21-byte batch record is cut.
    for part in [
        "seg-0000000000000001.log is corrupt at offset 4117",
        "damage at offset 4117",
        "with --journal-skip-corrupt a start skips",
        "seg-0000000000000001.log from offset 4117 to its end",
        "and recovers 2 pending timers",
    ] {
        assert!(report.contains(part), "{part:?} not in:\n{report}");
    }
    let out = tool(&["dump", &d]);
    let dump = String::from_utf8_lossy(&out.stdout);
    assert!(
        dump.lines()
            .any(|l| l.contains("\"type\":\"damage\"") && l.contains("\"offset\":4117")),
        "{dump}"
    );
}

#[test]
fn check_refuses_to_run_beside_a_server_and_reports_a_missing_directory() {
    let data = tempfile::tempdir().expect("data dir");
    let s = serve(data.path());
    let d = data.path().to_string_lossy().into_owned();
    let out = tool(&["check", &d]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("in use by a running punctual"),
        "{}",
        text(&out)
    );
    stop(s);
    let out = tool(&["check", &format!("{d}/nothing-here")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// `punctual serve` on `data`, which must refuse to start: its stderr.
fn server_refusal(data: &Path) -> String {
    let dir = data.to_string_lossy().into_owned();
    let (status, err) =
        Server::refused(&["--store", "journal", "--data-dir", &dir, "--shards", "1"]);
    assert!(!status.success(), "{err}");
    err
}

#[test]
fn a_torn_tail_of_the_newest_segment_is_lossless() {
    let data = tempfile::tempdir().expect("data dir");
    let dir = three_runs(data.path());
    // What a crash in the middle of a commit leaves: bytes that never became a whole commit.
    let newest = seg(&dir, 3);
    let mut bytes = std::fs::read(&newest).expect("read");
    let end = bytes.len();
    bytes.extend_from_slice(&[0x5a; 300]);
    std::fs::write(&newest, bytes).expect("tear");
    let d = data.path().to_string_lossy().into_owned();
    let out = tool(&["check", &d]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(report.contains("seg-0000000000000003.log"), "{report}");
    assert!(report.contains("torn tail at offset"), "{report}");
    assert!(report.contains("lossless: 3 pending timers"), "{report}");
    assert_eq!(
        std::fs::metadata(&newest).expect("stat").len(),
        end as u64 + 300,
        "check changed the file"
    );
}

/// A file system that mirrors `root` at `mnt` and answers EIO to reads of the file `name` at
/// `offset` or past it (`support/eio_fs.py`, FUSE; root only); unmounted on drop.
struct EioFs {
    mnt: PathBuf,
    child: std::process::Child,
}

impl EioFs {
    fn mount(root: &Path, mnt: &Path, name: &str, offset: u64) -> Result<EioFs, String> {
        std::fs::create_dir_all(mnt).map_err(|e| e.to_string())?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/eio_fs.py");
        let child = Command::new("/usr/bin/python3")
            .arg(script)
            .arg(root)
            .arg(mnt)
            .arg(name)
            .arg(offset.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("python3: {e}"))?;
        let mut fs = EioFs {
            mnt: mnt.to_path_buf(),
            child,
        };
        let give_up = Instant::now() + Duration::from_secs(10);
        while Instant::now() < give_up {
            if let Ok(Some(status)) = fs.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = fs.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!("the FUSE file system exited ({status}): {err}"));
            }
            if std::fs::read_dir(&fs.mnt).is_ok_and(|mut d| d.next().is_some()) {
                return Ok(fs);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        fs.unmount();
        Err("the FUSE file system did not come up".into())
    }

    fn unmount(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for EioFs {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// A segment whose blocks the disk cannot read (EIO) makes `journal check` and the server's
/// start fail naming the file, never die of SIGBUS, as a read of a mapped page that fails does.
#[test]
fn a_segment_the_disk_cannot_read_fails_the_check_and_the_start_without_a_crash() {
    let data = tempfile::tempdir().expect("data dir");
    let root = data.path().join("root");
    let s = serve(&root);
    put(&s, "a");
    put(&s, "b");
    stop(s);
    let name = "seg-0000000000000001.log";
    let mnt = data.path().join("mnt");
    let _fs = match EioFs::mount(&root, &mnt, name, 4096) {
        Ok(fs) => fs,
        Err(why) if std::env::var_os("PUNCTUAL_SKIP_ROOT_TESTS").is_some() => {
            eprintln!("\n!!! SKIPPED (PUNCTUAL_SKIP_ROOT_TESTS): the EIO test needs root, FUSE and python3-fusepy: {why}\n");
            return;
        }
        Err(why) => panic!(
            "the EIO test needs root, /dev/fuse and Debian's python3-fusepy to mount a file system that fails reads: {why}. Run as root with them installed, or set PUNCTUAL_SKIP_ROOT_TESTS=1 to skip it knowingly"
        ),
    };
    let d = mnt.to_string_lossy().into_owned();
    let out = tool(&["check", &d]);
    let report = text(&out);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        None,
        "killed by a signal: {report}"
    );
    assert_ne!(out.status.code(), Some(0), "{report}");
    assert!(
        report.contains(name) && report.contains("Input/output error"),
        "{report}"
    );
    let (status, err) = Server::refused(&["--store", "journal", "--data-dir", &d, "--shards", "1"]);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        None,
        "killed by a signal: {err}"
    );
    assert!(
        !status.success() && err.contains(name) && err.contains("Input/output error"),
        "{err}"
    );
}
