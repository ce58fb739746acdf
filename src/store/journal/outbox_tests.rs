use super::*;

fn push(o: &mut Outbox, n: usize) {
    o.push(
        |b| {
            b.extend(std::iter::repeat_n(7u8, n));
            n
        },
        Ack::None,
        "",
    );
}

#[test]
fn a_batch_takes_whole_records_within_its_bounds() {
    let mut o = Outbox::new(10, 10, Duration::from_secs(2));
    push(&mut o, 10);
    push(&mut o, 20);
    push(&mut o, 30);
    assert_eq!(
        o.batch(10, 35),
        Batch {
            records: 2,
            bytes: 30,
            frames: 2
        }
    );
    assert_eq!(o.batch(1, 1).records, 1, "one record always goes");
    let b = o.batch(2, 1000);
    o.complete(b, Ok(()));
    assert_eq!(o.len(), 1);
    assert_eq!(
        o.batch(10, 1000),
        Batch {
            records: 1,
            bytes: 30,
            frames: 1
        }
    );
    assert_eq!(
        o.bytes(o.batch(10, 1000)).map(<[u8]>::len).sum::<usize>(),
        30
    );
}

/// A commit's pop leaves the records queued after it where they are: with one buffer
/// drained from the front, every commit moved the whole backlog behind it.
#[test]
fn a_pop_moves_none_of_the_bytes_queued_after_it() {
    let mut o = Outbox::new(10, 10, Duration::from_secs(2));
    push(&mut o, 1_000);
    push(&mut o, 100_000);
    let all = o.batch(2, usize::MAX);
    let second_at = o.bytes(all).next().expect("bytes")[1_000..].as_ptr();
    let first = o.batch(1, usize::MAX);
    o.complete(first, Ok(()));
    let rest = o.batch(1, usize::MAX);
    assert_eq!(o.bytes(rest).map(<[u8]>::len).sum::<usize>(), 100_000);
    let now_at = o.bytes(rest).next().expect("bytes").as_ptr();
    assert_eq!(now_at, second_at, "the queued record was moved");
}

/// A batch's bytes are its records' frames in order: small frames inside a chunk, frames
/// that straddle two, frames larger than a chunk. A commit's pop leaves the rest as it
/// was, and the chunks held stay those the backlog needs, plus one spare.
#[test]
fn a_batch_shows_its_frames_in_order_across_chunks_and_chunks_are_reused() {
    let mut o = Outbox::new(1_000, 1_000, Duration::from_secs(2));
    let mut queued: VecDeque<u8> = VecDeque::new();
    let mut next = 1u32;
    for round in 0..120usize {
        for _ in 0..(round % 7 + 1) {
            let len = match next % 3 {
                0 => (next as usize * 104_729) % (BYTES_CHUNK * 3 / 2) + 1,
                _ => (next as usize * 13) % 50 + 1,
            };
            let frame: Vec<u8> = (0..len).map(|i| (i as u32 ^ next) as u8).collect();
            queued.extend(&frame);
            o.push(
                |b| {
                    b.extend_from_slice(&frame);
                    len
                },
                Ack::None,
                "",
            );
            next += 1;
        }
        let batch = o.batch(round % 5 + 1, BYTES_CHUNK);
        let got: Vec<u8> = o.bytes(batch).flatten().copied().collect();
        let want: Vec<u8> = queued.drain(..batch.bytes).collect();
        assert!(got == want, "round {round}: the batch's bytes differ");
        o.complete(batch, Ok(()));
        let backlog = queued.len();
        assert_eq!(o.end() - o.committed(), backlog as u64);
        let most = (backlog.div_ceil(BYTES_CHUNK) + 2) * BYTES_CHUNK;
        assert!(
            o.bytes.capacity() <= most,
            "round {round}: {}",
            o.bytes.capacity()
        );
    }
}

/// Behind a 64 MiB backlog, no push adds more than a chunk: a `VecDeque` doubled the
/// whole backlog into fresh pages in one push.
#[test]
fn a_push_behind_a_long_backlog_adds_at_most_one_chunk() {
    let mut o = Outbox::new(1_000_000, 1_000_000, Duration::from_secs(2));
    let mut largest = 0;
    for _ in 0..(64 << 10) {
        let before = o.bytes.capacity();
        push(&mut o, 1_024);
        largest = largest.max(o.bytes.capacity() - before);
    }
    assert!(
        largest <= BYTES_CHUNK,
        "one push grew the outbox {largest} bytes"
    );
    assert!(o.end() - o.committed() >= 64 << 20);
}
