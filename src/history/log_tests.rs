use super::*;
use crate::history::{Attempt, Event, Outcome, BUFFER_MAX};
use std::time::Instant;

fn event(key: &str, version: u64, attempt: Option<u16>, outcome: Outcome) -> Event {
    let now = now_us();
    Event {
        tenant: "shop".into(),
        key: key.into(),
        version,
        fire_at_us: now - 5,
        at_us: now,
        attempt: attempt.map(|s| Attempt {
            at_us: now,
            status: Some(s),
            error: None,
        }),
        outcome,
    }
}

/// Waits until the history's thread has applied what was sent.
fn wait_for(h: &History, key: &str, outcome: Outcome) -> Page {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let page = h.page("shop", Some(key), None, 10);
        if page.entries.first().is_some_and(|e| e.outcome == outcome) || Instant::now() > until {
            return page;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_log_brings_the_history_back_and_skips_a_torn_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let h = History::open(Some(dir.path()), Duration::from_secs(3600), 100).expect("open");
        let r = h.recorder();
        r.record(event("a", 1, None, Outcome::Retrying));
        r.record(event("a", 1, Some(503), Outcome::Retrying));
        r.record(event("a", 1, Some(200), Outcome::Delivered));
        r.record(event("b", 2, None, Outcome::Fired));
        r.flush();
        assert_eq!(r.held(), 0);
        assert_eq!(wait_for(&h, "a", Outcome::Delivered).entries.len(), 1);
        assert_eq!(wait_for(&h, "b", Outcome::Fired).entries.len(), 1);
    }
    // A kill in the middle of a write leaves a torn last line.
    let path = dir.path().join(LOG_NAME);
    let mut f = OpenOptions::new().append(true).open(&path).expect("log");
    f.write_all(b"{\"tenant\":\"shop\",\"ke")
        .expect("torn write");
    drop(f);
    let h = History::open(Some(dir.path()), Duration::from_secs(3600), 100).expect("reopen");
    let a = h.page("shop", Some("a"), None, 10);
    assert_eq!(a.entries.len(), 1);
    assert_eq!(a.entries[0].outcome, Outcome::Delivered);
    let statuses: Vec<_> = a.entries[0].attempts.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [Some(503), Some(200)]);
    assert_eq!(h.page("shop", None, None, 10).entries.len(), 2);
    // The load rewrote the log: the torn line is gone.
    let text = std::fs::read_to_string(&path).expect("log");
    assert_eq!(text.lines().count(), 4);
    assert!(text.ends_with('\n'));
}

#[test]
fn a_full_buffer_is_handed_over_and_a_full_channel_drops_and_counts() {
    let h = History::open(None, Duration::from_secs(3600), 100_000).expect("open");
    let r = h.recorder();
    for i in 0..(BUFFER_MAX as u64 + 3) {
        r.record(event("k", i, None, Outcome::Fired));
    }
    assert_eq!(r.held(), 3, "the full buffer went to the history's thread");
    r.flush();
    let until = Instant::now() + Duration::from_secs(10);
    while h.entries() < BUFFER_MAX + 3 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!((h.entries(), h.dropped()), (BUFFER_MAX + 3, 0));
    assert!(!h.durable());
    // A channel whose other end is gone (or full) drops the batch, counted.
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    drop(rx);
    let dropped = Arc::new(AtomicU64::new(0));
    let r = Recorder::new(tx, dropped.clone());
    r.record(event("k", 1, None, Outcome::Fired));
    r.flush();
    assert_eq!(dropped.load(Ordering::Relaxed), 1);
}

/// A second process on the same directory leaves the log alone (the journal's own lock then
/// refuses its start): the history opens before that lock is taken, so it holds one of its
/// own, and a history it cannot keep on disk is kept in memory rather than stop a start.
#[test]
fn a_second_opener_of_the_same_directory_leaves_the_log_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let h = History::open(Some(dir.path()), Duration::from_secs(3600), 100).expect("open");
    assert!(h.durable());
    let r = h.recorder();
    r.record(event("a", 1, Some(200), Outcome::Delivered));
    r.flush();
    wait_for(&h, "a", Outcome::Delivered);
    let before = std::fs::read(dir.path().join(LOG_NAME)).expect("log");
    let second = History::open(Some(dir.path()), Duration::from_secs(3600), 100).expect("open");
    assert!(!second.durable(), "held by the first: in memory only");
    second
        .recorder()
        .record(event("b", 2, None, Outcome::Fired));
    drop(second);
    assert_eq!(
        std::fs::read(dir.path().join(LOG_NAME)).expect("log"),
        before
    );
    drop((r, h));
    let again = History::open(Some(dir.path()), Duration::from_secs(3600), 100).expect("open");
    assert!(again.durable(), "free again");
    assert_eq!(again.page("shop", Some("a"), None, 10).entries.len(), 1);
}

/// A directory that cannot be made (here a file is in its place) keeps the history in memory.
#[test]
fn a_history_that_cannot_be_kept_on_disk_is_kept_in_memory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("history");
    std::fs::write(&file, b"not a directory").expect("a file");
    let h = History::open(Some(&file), Duration::from_secs(3600), 100).expect("open");
    assert!(!h.durable());
    let r = h.recorder();
    r.record(event("a", 1, Some(200), Outcome::Delivered));
    r.flush();
    assert_eq!(wait_for(&h, "a", Outcome::Delivered).entries.len(), 1);
}
