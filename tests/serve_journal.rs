//! The journal store in the real service: `punctual serve` on a data directory, SIGKILLed while
//! clients write; every timer it acknowledged is there after the restart with its version,
//! fires once, and stays fired across another crash. And a corrupt journal stops the start
//! with an error that names the file.

mod api_support;
use api_support::{try_request, Server};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The sum over shards of a metric family's samples in a `/metrics` scrape.
fn metric_sum(s: &Server, name: &str) -> u64 {
    s.metric(name) as u64
}

/// Timers each writer of the SIGKILL test puts at most.
const PER_WRITER: u64 = 1_000;

/// Makes every record a shard queued so far durable, on every shard: records commit in the
/// order they were queued, so a write answered means every record before it on its shard is
/// on disk. 32 keys miss one of the two shards with a chance of 2^-31; each is deleted again,
/// answered the same way.
fn barrier(s: &Server) {
    for i in 0..32 {
        let path = format!("/v1/timers/shop/barrier-{i}");
        assert_eq!(s.req("PUT", &path, r#"{"delay_ms": 3600000}"#).status, 201);
        assert_eq!(s.req("DELETE", &path, "").status, 204);
    }
}

#[test]
fn sigkill_under_write_load_keeps_every_acknowledged_timer_and_fires_each_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    let args = ["--data-dir", data, "--shards", "2"];
    let mut first = Server::start(&args);
    let addr = first.addr;
    let fire_at_ms = now_ms() + 12_000;
    let acked: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (acked, stop) = (acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                // At most `PER_WRITER` each: the checks after the restart read every key
                // back before the timers fall due, however fast this host writes.
                while !stop.load(Ordering::Relaxed) && n < PER_WRITER {
                    let key = format!("k-{w}-{n}");
                    n += 1;
                    let body = format!("{{\"fire_at_ms\": {fire_at_ms}, \"payload\": {n}}}");
                    let path = format!("/v1/timers/shop/{key}");
                    let Ok(r) = try_request(addr, "PUT", &path, &[], body.as_bytes()) else {
                        continue;
                    };
                    if r.status == 201 {
                        let v = r.json()["version"].as_u64().expect("version");
                        if let Ok(mut a) = acked.lock() {
                            a.insert(key, v);
                        }
                    }
                }
            })
        })
        .collect();
    // The kill comes in the middle of the load, once a tenth of it is acknowledged, and
    // before the timers are due, so that none fired before it (on a slow host, once the
    // deadline is 6 s away, however much was acknowledged).
    while acked.lock().map(|a| a.len()).unwrap_or(0) < PER_WRITER as usize * 4 / 10
        && now_ms() + 6_000 < fire_at_ms
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    first.child.kill().expect("SIGKILL");
    let killed_ms = now_ms();
    let _ = first.child.wait();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let acked = acked.lock().expect("lock").clone();
    assert!(
        acked.len() > 100,
        "the load was real: {} acknowledged",
        acked.len()
    );

    assert!(
        killed_ms < fire_at_ms,
        "killed after the deadline: the host is too slow"
    );

    // Nothing fired before the kill (never early), so every acknowledged timer is recovered;
    // the restart's fires may have begun, so a timer found gone after its deadline fired.
    let mut second = Server::start(&args);
    let recovered = metric_sum(&second, "punctual_store_recovered_timers");
    assert!(
        recovered >= acked.len() as u64,
        "{recovered} recovered < {} acknowledged",
        acked.len()
    );
    for (key, v) in &acked {
        let (status, body) = second.json("GET", &format!("/v1/timers/shop/{key}"), "");
        if status == 404 && now_ms() >= fire_at_ms {
            continue;
        }
        assert_eq!(status, 200, "{key} lost");
        assert_eq!(body["version"].as_u64(), Some(*v), "{key} changed");
    }
    let give_up = Instant::now() + Duration::from_secs(40);
    while metric_sum(&second, "punctual_timers_fired") < recovered && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        metric_sum(&second, "punctual_timers_fired"),
        recovered,
        "each fires once"
    );
    for key in acked.keys().take(50) {
        assert_eq!(
            second
                .req("GET", &format!("/v1/timers/shop/{key}"), "")
                .status,
            404
        );
    }
    // Once the fires' records are committed, crash again.
    barrier(&second);
    second.child.kill().expect("SIGKILL");
    let _ = second.child.wait();

    let third = Server::start(&args);
    assert_eq!(
        metric_sum(&third, "punctual_timers_pending"),
        0,
        "nothing fires twice"
    );
    assert!(metric_sum(&third, "punctual_store_recoveries") >= 2);
}

#[test]
fn a_corrupt_journal_stops_the_start_with_an_error_that_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data_s = data.to_str().expect("utf-8 path");
    let args = ["--data-dir", data_s, "--shards", "1"];
    let s = Server::start(&args);
    for i in 0..50 {
        let r = s.req(
            "PUT",
            &format!("/v1/timers/shop/k{i}"),
            "{\"delay_ms\": 600000}",
        );
        assert_eq!(r.status, 201);
    }
    drop(s);
    // Flip a bit in the first record after the header of the oldest segment.
    let shard = data.join("gen-1").join("shard-0");
    let mut segs: Vec<_> = std::fs::read_dir(&shard)
        .expect("shard dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segs.sort();
    let seg = segs.first().expect("a segment").clone();
    let mut bytes = std::fs::read(&seg).expect("read");
    bytes[4096 + 30] ^= 0x01;
    std::fs::write(&seg, &bytes).expect("write");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["serve", "--listen", "127.0.0.1:0", "--pinning", "none"])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&seg.display().to_string()), "{err}");
    // The commit at 4096 opens with its 21-byte batch record; the schedule after it is hit.
    assert!(err.contains("offset 4117"), "{err}");

    let s = Server::start(&[&args[..], &["--journal-skip-corrupt"]].concat());
    assert_eq!(metric_sum(&s, "punctual_journal_corrupt_records"), 1);
    assert_eq!(metric_sum(&s, "punctual_timers_pending"), 49);
}

#[test]
fn serve_without_store_flags_keeps_a_journal_in_punctual_data() {
    let cwd = tempfile::tempdir().expect("tempdir");
    let port = api_support::free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["serve", "--listen", &addr.to_string(), "--shards", "1"])
        .args(["--pinning", "none", "--shard-capacity", "1000"])
        .current_dir(cwd.path())
        .env("RUST_LOG", "warn")
        .env_remove("PUNCTUAL_STORE")
        .env_remove("PUNCTUAL_DATA_DIR")
        .env_remove("PUNCTUAL_REDIS")
        .spawn()
        .expect("spawn");
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut healthy = None;
    while Instant::now() < give_up {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("punctual exited: {status}");
        }
        if let Ok(r) = try_request(addr, "GET", "/healthz", &[], b"") {
            if r.status == 200 {
                healthy = Some(r.json());
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let health = healthy.expect("healthy");
    assert_eq!(health["store"], "journal");
    assert!(cwd.path().join("punctual-data").join("CURRENT").exists());
}
