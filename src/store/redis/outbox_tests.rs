use super::*;
use crate::store::acks::tests::sched;

#[test]
fn prefix_respects_the_command_budget_but_never_splits_a_fire() {
    let mut o = Outbox::new(10, 10, Duration::from_secs(2));
    o.push(redis::cmd("HSET"), None, Ack::None, "", None);
    o.push(
        redis::cmd("XADD"),
        Some(redis::cmd("HDEL")),
        Ack::None,
        "",
        None,
    );
    o.push(redis::cmd("HSET"), None, Ack::None, "", None);
    let batch = |skip, commands| o.batch(skip, commands, usize::MAX).count();
    assert_eq!(batch(0, 2), 1);
    assert_eq!(batch(0, 3), 2);
    assert_eq!(batch(0, 1), 1);
    assert_eq!(batch(1, 100), 2);
    assert_eq!(batch(3, 100), 0);
}

/// Writes of 100 KiB: a pipeline stops at the byte bound, not at 4,096 commands, but
/// always takes its first entry, however large, and never splits a fire.
#[test]
fn a_pipeline_of_large_writes_stops_at_its_byte_bound() {
    let mut o = Outbox::new(10_000, 10_000, Duration::from_secs(2));
    let hset = || {
        redis::cmd("HSET")
            .arg("key")
            .arg(vec![7u8; 100 << 10])
            .clone()
    };
    for i in 0..100 {
        let second = (i % 3 == 0).then(|| redis::cmd("HDEL").arg("key").clone());
        o.push(hset(), second, Ack::None, "", None);
    }
    let e = o.batch(0, 1, usize::MAX).next().expect("one");
    assert!(
        (100 << 10..(100 << 10) + 100).contains(&e.bytes()),
        "{}",
        e.bytes()
    );
    let mut skip = 0;
    while skip < 100 {
        let batch: Vec<&Entry> = o.batch(skip, 4096, PIPELINE_BYTES).collect();
        let bytes: usize = batch.iter().map(|e| e.bytes()).sum();
        assert!(bytes <= PIPELINE_BYTES, "{bytes} bytes in one pipeline");
        assert!(!batch.is_empty());
        if skip + batch.len() < 100 {
            let next = o
                .batch(skip + batch.len(), 1, usize::MAX)
                .next()
                .expect("next");
            assert!(bytes + next.bytes() > PIPELINE_BYTES, "stopped early");
        }
        skip += batch.len();
    }
    assert_eq!(
        o.batch(0, 4096, 1).count(),
        1,
        "the first entry goes, whatever its size"
    );
}

#[test]
fn completion_answers_in_order() {
    let mut o = Outbox::new(1, 1, Duration::from_secs(2));
    let (ack, rx) = sched();
    o.push(redis::cmd("HSET"), None, ack, "t", None);
    assert_eq!(o.acks.room_for("u"), crate::store::acks::Room::Full);
    o.complete([Ok(())]);
    assert!(matches!(futures_lite::future::block_on(rx), Ok(Ok(s)) if s.version == 1));
}

/// One pipeline's encoding, a step on the shard's thread, with 4,096 writes of 64 KiB
/// waiting: bounded by commands alone (before) against the byte bound too (now). Five
/// rounds, alternated.
///
/// `cargo test --release --lib pipeline_encoding_figure -- --ignored --nocapture`
#[test]
#[ignore = "a figure, not a check: run it with --ignored --nocapture"]
fn pipeline_encoding_figure() {
    use std::time::Instant;
    let mut o = Outbox::new(10_000, 10_000, Duration::from_secs(2));
    for i in 0..4096 {
        let key = format!("{{p{}}}:order-{i:06}", i % 1024);
        let cmd = redis::cmd("HSET")
            .arg(key)
            .arg("t")
            .arg(vec![7u8; 64 << 10])
            .clone();
        o.push(cmd, None, Ack::None, "", None);
    }
    let encode = |max_bytes: usize| {
        let t = Instant::now();
        let mut out = Vec::new();
        let mut n = 0;
        for e in o.batch(0, 4096, max_bytes) {
            e.first.write_packed_command(&mut out);
            n += 1;
        }
        (t.elapsed(), n, out.len())
    };
    for round in 0..5 {
        let (whole, n1, b1) = encode(usize::MAX);
        let (capped, n2, b2) = encode(PIPELINE_BYTES);
        println!(
            "round {round}: commands only {:.2} ms ({n1} writes, {} MiB); with the byte bound {:.0} µs ({n2} writes, {:.1} MiB)",
            whole.as_secs_f64() * 1e3,
            b1 >> 20,
            capped.as_secs_f64() * 1e6,
            b2 as f64 / f64::from(1 << 20)
        );
    }
}

/// An occurrence's write holds its timer's fire until Redis answered it, and only its own:
/// writes pushed otherwise, older or newer versions, never hold one.
#[test]
fn a_write_pushed_unfired_holds_its_version_until_answered() {
    let mut o = Outbox::new(10, 10, Duration::from_secs(2));
    o.push(redis::cmd("HSET"), None, Ack::None, "", None);
    o.push_unfired(redis::cmd("HSET"), Ack::None, "", None, 7);
    o.push(redis::cmd("HSET"), None, Ack::None, "", None);
    o.push_unfired(redis::cmd("HSET"), Ack::None, "", None, 9);
    assert!(!o.written(7) && !o.written(9));
    assert!(o.written(6) && o.written(8) && o.written(10));
    o.complete([Ok(())]);
    assert!(!o.written(7), "the entry before it was answered, not it");
    o.complete([Ok(()), Ok(())]);
    assert!(o.written(7) && !o.written(9));
    // Refused for good is answered too: nothing waits for it any more.
    o.complete([Err(Error::StoreUnavailable { retry_after_s: 1 })]);
    assert!(o.written(9) && o.is_empty());
}

/// The occurrences a schedule's fire armed wait for the schedule's record written after them
/// too; an occurrence pushed earlier, before some other write, does not.
#[test]
fn occurrences_wait_for_the_cursor_written_after_them() {
    let mut o = Outbox::new(10, 10, Duration::from_secs(2));
    o.push_unfired(redis::cmd("HSET"), Ack::None, "", None, 3);
    o.push(redis::cmd("HSET"), None, Ack::None, "", None);
    o.push_unfired(redis::cmd("HSET"), Ack::None, "", None, 5);
    o.push_unfired(redis::cmd("HSET"), Ack::None, "", None, 6);
    o.push_cursor(redis::cmd("HSET"), Ack::None, "", None);
    o.complete([Ok(()), Ok(()), Ok(()), Ok(())]);
    assert!(
        o.written(3),
        "its own write was answered, and no cursor followed it"
    );
    assert!(
        !o.written(5) && !o.written(6),
        "their cursor is not answered yet"
    );
    o.complete([Ok(())]);
    assert!(o.written(5) && o.written(6) && o.is_empty());
}
