use super::*;
use crate::runtime::cooperate::on_executor;
use crate::store::journal::faults::{Fault, Faults};
use std::collections::BTreeMap;

const SECOND: u64 = 1_000_000;
const T0: u64 = 1_750_000_000 * SECOND;

fn timer(key: &str, payload: &[u8]) -> PackedTimer {
    PackedTimer::with_meta("acme", key, b"m", payload).expect("small")
}

async fn pager(dir: &std::path::Path, horizon_s: u64, disk: Disk) -> Pager {
    Pager::open(
        dir.join("pages"),
        0,
        Duration::from_secs(horizon_s),
        UtcMicros(T0),
        disk,
        false,
        Box::new(|| {}),
    )
    .await
    .expect("pages open")
}

/// Waits (at most 3 s) until the pager has written a page to disk.
async fn until_written(p: &Pager) {
    for _ in 0..3_000 {
        if p.stats().3 > 0 {
            return;
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

/// The one page file under `dir`'s pages.
fn the_page(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(dir.join("pages"))
        .expect("dir")
        .next()
        .expect("one page")
        .expect("entry")
        .path()
}

/// What a test expects: key → (deadline, version, payload).
type Model = BTreeMap<String, (UtcMicros, u64, Vec<u8>)>;

/// Walks `now` from T0 to `until` in `step` steps, loading as the shard does, and returns
/// what went into the wheel; each timer may go in only once.
async fn walk(p: &mut Pager, until: u64, step: u64) -> Model {
    let mut wheel = Model::new();
    let mut now = T0;
    while now <= until {
        // Give the read task its turns, as the shard's passes do.
        for _ in 0..50 {
            let mut went = Vec::new();
            p.load_step(UtcMicros(now), || false, |t, d, v| went.push((t, d, v)));
            for (t, d, v) in went {
                assert!(
                    d.0 >= now,
                    "{} loaded at {now} after its deadline {}",
                    t.key(),
                    d.0
                );
                let old = wheel.insert(t.key().to_string(), (d, v, t.payload().to_vec()));
                assert!(old.is_none(), "{} loaded twice", t.key());
            }
            if p.load.is_none() && p.line >= p.first_unloaded(UtcMicros(now)) {
                break;
            }
            glommio::timer::sleep(Duration::from_micros(200)).await;
        }
        now += step;
    }
    wheel
}

/// Pages, replaces (into the pages and out of them) and cancels, then walks time past every
/// deadline: exactly the timers left are loaded, each once, under its last version, none
/// after its deadline, and the pages are empty and gone from disk.
#[test]
fn loads_exactly_the_paged_timers_each_once_under_its_last_version() {
    let dir = tempfile::tempdir().expect("tmp");
    on_executor(async {
        let mut p = pager(dir.path(), 4, Disk::default()).await;
        let mut model = Model::new();
        let mut rng = fastrand::Rng::with_seed(7);
        let mut version = 0;
        for i in 0..20_000 {
            let key = format!("k{}", rng.u32(0..8_000));
            version += 1;
            let d = UtcMicros(T0 + 4 * SECOND + rng.u64(0..16 * SECOND));
            let payload = vec![b'x'; rng.usize(0..200)];
            if i % 10 == 9 {
                assert_eq!(
                    p.remove(&timer(&key, b"")).is_some(),
                    model.remove(&key).is_some()
                );
                continue;
            }
            assert!(p.is_far(d));
            let old = p.put(&timer(&key, &payload), d, version).expect("paged");
            assert_eq!(
                old.map(|o| o.version),
                model.get(&key).map(|m| m.1),
                "{key}"
            );
            model.insert(key, (d, version, payload));
        }
        assert_eq!(p.len(), model.len());
        // A timer due within the horizon is not paged.
        assert!(!p.is_far(UtcMicros(T0 + 3 * SECOND)));
        let wheel = walk(&mut p, T0 + 21 * SECOND, SECOND / 4).await;
        assert_eq!(wheel, model, "exactly the paged timers, as last put");
        assert_eq!(p.len(), 0);
        // The files go on their I/O thread.
        glommio::timer::sleep(Duration::from_millis(50)).await;
        let left = std::fs::read_dir(dir.path().join("pages"))
            .expect("dir")
            .count();
        assert_eq!(left, 0, "every loaded page removed");
    });
}

/// Timers due more than `MAX_BUCKETS` buckets past the loads stay in the wheel: a tenant
/// spreading timers over decades cannot make a file of each.
#[test]
fn only_the_next_max_buckets_are_paged() {
    let dir = tempfile::tempdir().expect("tmp");
    on_executor(async {
        let mut p = pager(dir.path(), 4, Disk::default()).await;
        let first = p.line;
        let start = |b: u32| UtcMicros(p.origin + u64::from(b) * p.width_us);
        assert!(p.is_far(start(first)));
        assert!(p.is_far(start(first + MAX_BUCKETS - 1)));
        assert!(!p.is_far(start(first + MAX_BUCKETS)), "past the bound");
        assert!(!p.is_far(start(first - 1)), "loading or loaded");
        let t = timer("decades", b"");
        assert!(
            p.put(&t, start(first + MAX_BUCKETS), 1).is_err(),
            "not paged"
        );
        assert_eq!(p.len(), 0);
    });
}

/// A GET reads a paged timer back, from memory before its page is written and from disk
/// after.
#[test]
fn a_paged_timer_reads_back_from_memory_and_from_disk() {
    let dir = tempfile::tempdir().expect("tmp");
    on_executor(async {
        let mut p = pager(dir.path(), 60, Disk::default()).await;
        let d = UtcMicros(T0 + 3_600 * SECOND);
        p.put(&timer("first", b"one"), d, 1).expect("paged");
        let r = p
            .read(timer("first", b"").identity())
            .expect("there")
            .await
            .expect("read");
        assert_eq!(
            (r.timer.payload(), r.version, r.deadline),
            (&b"one"[..], 1, d)
        );
        // Enough to fill the bucket's buffer: it goes to disk.
        let big = vec![b'y'; 1_000];
        for i in 0..200 {
            p.put(&timer(&format!("fill{i}"), &big), d, 2 + i)
                .expect("paged");
        }
        for _ in 0..200 {
            if p.buffered() < files::WRITE_AT {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        assert!(p.stats().3 > 0, "a page was written");
        let r = p
            .read(timer("first", b"").identity())
            .expect("there")
            .await
            .expect("read");
        assert_eq!((r.timer.payload(), r.version), (&b"one"[..], 1));
        assert!(p.read(timer("nobody", b"").identity()).is_none());
    });
}

/// A write that fails loses nothing: the page is written again, and every timer loads.
#[test]
fn a_failed_page_write_is_tried_again_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let trash = dir.path().join("trash");
    std::fs::create_dir(&trash).expect("trash");
    on_executor(async {
        let faults = Faults::new(&trash);
        let mut p = pager(dir.path(), 4, Disk::faulty(faults.clone())).await;
        // The next operation (the page's creation) fails.
        faults.fail_at(faults.count(), Fault::Eio);
        let mut model = Model::new();
        let big = vec![b'z'; 700];
        for i in 0..300u64 {
            let d = UtcMicros(T0 + 5 * SECOND + i);
            p.put(&timer(&format!("k{i}"), &big), d, i + 1)
                .expect("paged");
            model.insert(format!("k{i}"), (d, i + 1, big.clone()));
        }
        // The write fails, waits, and is made again.
        until_written(&p).await;
        assert_eq!(p.stats().0, 1, "the write failed once");
        assert!(p.stats().3 > 0, "and was made again");
        let all = walk(&mut p, T0 + 6 * SECOND, SECOND / 4).await;
        assert_eq!(all, model);
    });
}

/// A page damaged on disk: the records before the damage load, the rest are counted and
/// logged (the journal still holds them), and nothing is read as another timer.
#[test]
fn a_damaged_page_loads_what_precedes_the_damage_and_says_so() {
    let dir = tempfile::tempdir().expect("tmp");
    on_executor(async {
        let mut p = pager(dir.path(), 4, Disk::default()).await;
        let big = vec![b'q'; 1_000];
        let d = UtcMicros(T0 + 5 * SECOND);
        for i in 0..100u64 {
            p.put(&timer(&format!("k{i:03}"), &big), d, i + 1)
                .expect("paged");
        }
        until_written(&p).await;
        let page = the_page(dir.path());
        let mut bytes = std::fs::read(&page).expect("page");
        let cut = bytes.len() / 2;
        bytes[cut] ^= 0xff;
        std::fs::write(&page, &bytes).expect("damaged");
        let wheel = walk(&mut p, T0 + 2 * SECOND, SECOND / 4).await;
        assert!(
            !wheel.is_empty() && wheel.len() < 100,
            "{} loaded",
            wheel.len()
        );
        for (k, (_, v, payload)) in &wheel {
            assert_eq!(format!("k{:03}", v - 1), *k, "each as it was put");
            assert_eq!(payload, &big);
        }
        assert_eq!(p.stats().2, 1, "the damage counted");
    });
}

/// Log lines, captured for a test.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines_with(&self, text: &str) -> usize {
        let bytes = self.0.lock().expect("log");
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| l.contains(text))
            .count()
    }
}

/// A page that cannot be read back for a while (cut short on disk, then whole again): the
/// load waits and tries again, logs the failures in a row at the 1st, 2nd, 4th… only, says
/// when the read succeeds, and then loads every timer, each once.
#[test]
fn a_page_read_that_keeps_failing_is_retried_and_logged_sparsely() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let errors = tracing::subscriber::with_default(subscriber, || {
        on_executor(async {
            let mut p = pager(dir.path(), 4, Disk::default()).await;
            let big = vec![b'r'; 1_000];
            let d = UtcMicros(T0 + 5 * SECOND);
            let mut model = Model::new();
            for i in 0..100u64 {
                p.put(&timer(&format!("k{i:03}"), &big), d, i + 1)
                    .expect("paged");
                model.insert(format!("k{i:03}"), (d, i + 1, big.clone()));
            }
            until_written(&p).await;
            assert!(p.stats().3 > 0, "the page was written");
            let page = the_page(dir.path());
            let whole = std::fs::read(&page).expect("page");
            std::fs::write(&page, &whole[..10]).expect("cut short");
            // The load begins and its reads fail, once a second, until five have.
            let mut went = 0;
            for _ in 0..2_000 {
                went += p.load_step(UtcMicros(T0 + 2 * SECOND), || false, |_, _, _| {});
                if p.stats().1 >= 5 {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            assert!(p.stats().1 >= 5, "{} failed reads", p.stats().1);
            assert_eq!(went, 0, "nothing loads from a page that cannot be read");
            std::fs::write(&page, &whole).expect("whole again");
            // The next try, within `RETRY`, reads it; the load then ends.
            let mut all = Model::new();
            for _ in 0..1_000 {
                let mut went = Vec::new();
                p.load_step(
                    UtcMicros(T0 + 2 * SECOND),
                    || false,
                    |t, d, v| went.push((t, d, v)),
                );
                for (t, d, v) in went {
                    let old = all.insert(t.key().to_string(), (d, v, t.payload().to_vec()));
                    assert!(old.is_none(), "{} loaded twice", t.key());
                }
                if all.len() == model.len() && p.load.is_none() {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            assert!(
                all == model,
                "{} of {} timers loaded",
                all.len(),
                model.len()
            );
            p.stats().1
        })
    });
    let logged = (1..=errors).filter(|n| n.is_power_of_two()).count();
    assert_eq!(
        log.lines_with("could not be read back"),
        logged,
        "{errors} failed reads"
    );
    assert_eq!(log.lines_with("read back after failed tries"), 1);
}

/// The longest step a load holds the shard's thread, against inserting the same records in
/// one go, in one run: a million timers (32-byte keys, 100-byte payloads) in one bucket,
/// loaded into a real table, a `Slice` a step as the shard's loop gives it.
///
/// `cargo test --release --lib page_load_steps_figure -- --ignored --nocapture`
#[test]
#[ignore = "a figure: run in release with --nocapture"]
fn page_load_steps_figure() {
    use crate::wheel::TimerTable;
    const N: u64 = 1_000_000;
    let dir = tempfile::tempdir().expect("tmp");
    on_executor(async {
        let mut p = pager(dir.path(), 4, Disk::default()).await;
        let payload = [b'p'; 100];
        let d = |i: u64| UtcMicros(T0 + 5 * SECOND + i % SECOND);
        for i in 0..N {
            let t = timer(&format!("order-{i:026}"), &payload);
            p.put(&t, d(i), i + 1).expect("paged");
        }
        // Every page written, as it is long before its load.
        for _ in 0..10_000 {
            if p.buffered() == 0 {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        // Baseline, same run: the same records into a table in one go.
        let mut table = TimerTable::new(UtcMicros(T0), 2 * N as usize);
        let whole = std::time::Instant::now();
        for i in 0..N {
            let t = timer(&format!("order-{i:026}"), &payload);
            table.insert_loaded(t, d(i), i + 1).expect("fits");
        }
        let whole = whole.elapsed();
        drop(table);
        let mut table = TimerTable::new(UtcMicros(T0), 2 * N as usize);
        let mut steps = Vec::new();
        let started = std::time::Instant::now();
        let now = UtcMicros(T0 + 2 * SECOND);
        while p.len() > 0 {
            let step = std::time::Instant::now();
            let slice = crate::runtime::cooperate::Slice::begin();
            let n = p.load_step(
                now,
                || slice.is_over(),
                |t, d, v| {
                    table.insert_loaded(t, d, v).expect("fits");
                },
            );
            if n > 0 {
                steps.push(step.elapsed());
            }
            crate::runtime::cooperate::yield_to_reactor().await;
        }
        let total = started.elapsed();
        assert_eq!(table.len(), N as usize, "every record loaded");
        steps.sort_unstable();
        let q = |f: f64| steps[((steps.len() as f64 * f) as usize).min(steps.len() - 1)];
        println!(
            "one go: {:.1} ms | load in {} steps over {:.0} ms: p50 {:?}, p99 {:?}, max {:?}",
            whole.as_secs_f64() * 1e3,
            steps.len(),
            total.as_secs_f64() * 1e3,
            q(0.5),
            q(0.99),
            steps[steps.len() - 1]
        );
    });
}

/// Ops interleaved with the loads, as the shard applies them between passes: schedules that
/// page or go to the wheel (taking the timer out of the other), cancels and reads of timers
/// being loaded, loads cut short after a few records. At every step the wheel and the pages
/// together hold exactly the model's timers, every read answers as the model, and the paged
/// keys list in key order exactly the model's timers that are not in the wheel.
#[test]
fn ops_interleaved_with_loads_keep_the_wheel_and_pages_exact() {
    let dir = tempfile::tempdir().expect("tmp");
    on_executor(async {
        let mut p = pager(dir.path(), 4, Disk::default()).await;
        let mut rng = fastrand::Rng::with_seed(11);
        let mut model = Model::new();
        let mut wheel = Model::new();
        let mut version = 0;
        let mut now = T0;
        let big = vec![b'b'; 3_000];
        for step in 0..4_000u64 {
            now += SECOND / 50;
            for _ in 0..rng.usize(0..12) {
                let key = format!("k{}", rng.u32(0..500));
                let id = timer(&key, b"");
                match rng.u32(0..10) {
                    0..=5 => {
                        version += 1;
                        let d = UtcMicros(now + rng.u64(0..10 * SECOND));
                        let payload = if rng.bool() {
                            big.clone()
                        } else {
                            vec![b's'; rng.usize(0..50)]
                        };
                        let t = timer(&key, &payload);
                        let paged = p.is_far(d) && p.put(&t, d, version).is_ok();
                        if paged {
                            wheel.remove(&key);
                        } else {
                            p.remove(&id);
                            wheel.insert(key.clone(), (d, version, payload.clone()));
                        }
                        model.insert(key, (d, version, payload));
                    }
                    6 | 7 => {
                        let gone = p.remove(&id).is_some() || wheel.remove(&key).is_some();
                        assert_eq!(gone, model.remove(&key).is_some(), "cancel {key}");
                    }
                    _ => match p.read(id.identity()) {
                        Some(read) => {
                            let r = read.await.expect("read back");
                            let m = model.get(&key).expect("paged timers are the model's");
                            assert_eq!(
                                (r.deadline, r.version, r.timer.payload()),
                                (m.0, m.1, &m.2[..]),
                                "read {key}"
                            );
                        }
                        None => {
                            assert_eq!(wheel.contains_key(&key), model.contains_key(&key), "{key}")
                        }
                    },
                }
            }
            // A pass: the load goes on for a few records, then the wheel fires what is due.
            let mut budget = rng.usize(1..64);
            let mut went = Vec::new();
            p.load_step(
                UtcMicros(now),
                || {
                    budget = budget.saturating_sub(1);
                    budget == 0
                },
                |t, d, v| went.push((t, d, v)),
            );
            for (t, d, v) in went {
                assert!(d.0 >= now, "{} loaded after its deadline", t.key());
                let old = wheel.insert(t.key().to_string(), (d, v, t.payload().to_vec()));
                assert!(old.is_none(), "{} loaded while in the wheel", t.key());
            }
            wheel.retain(|k, w| {
                if w.0 .0 > now {
                    return true;
                }
                assert_eq!(
                    model.remove(k).map(|m| m.1),
                    Some(w.1),
                    "{k} fired as the model's"
                );
                false
            });
            assert_eq!(
                wheel.len() + p.len(),
                model.len(),
                "step {step}: wheel and pages hold the model"
            );
            let listed: Vec<(String, u64)> = p
                .keys_from("acme", "", false)
                .map(|(k, paged)| (k.to_string(), paged.version))
                .collect();
            let paged: Vec<(String, u64)> = model
                .iter()
                .filter(|(k, _)| !wheel.contains_key(*k))
                .map(|(k, m)| (k.clone(), m.1))
                .collect();
            assert_eq!(listed, paged, "step {step}: the paged keys");
            if step % 8 == 0 {
                glommio::timer::sleep(Duration::from_micros(100)).await;
            }
        }
    });
}

/// A start clears an earlier run's pages at once, by moving them aside, and a thread of their
/// own removes them, with any a crash left aside before; the journal's files are untouched.
#[test]
fn a_start_moves_the_earlier_pages_aside_and_they_are_removed_behind_it() {
    let data = tempfile::tempdir().expect("data dir");
    let page = data.path().join("pages/shard-1");
    std::fs::create_dir_all(&page).expect("pages");
    std::fs::write(page.join("b-3.page"), [7u8; 4096]).expect("a page");
    let cut_short = data.path().join(format!("{GONE}1-2/shard-0"));
    std::fs::create_dir_all(&cut_short).expect("left aside");
    std::fs::write(cut_short.join("b-9.page"), [1u8; 64]).expect("a page");
    std::fs::create_dir_all(data.path().join("gen-1/shard-0")).expect("a journal");
    clear(data.path()).expect("cleared");
    assert!(
        !data.path().join("pages").exists(),
        "gone from the start's way at once"
    );
    let left = || {
        std::fs::read_dir(data.path())
            .expect("list")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(GONE))
            .count()
    };
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while left() > 0 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        left(),
        0,
        "the pages set aside, this run's and a crashed one's, are removed"
    );
    assert!(
        data.path().join("gen-1/shard-0").is_dir(),
        "the journal stays"
    );
    // Nothing to clear: nothing happens.
    clear(data.path()).expect("nothing to clear");
}
