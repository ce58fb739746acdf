use super::*;
use proptest::prelude::*;

/// A 232-byte element, the size of a Redis outbox entry.
#[derive(Clone, Debug, PartialEq)]
struct Wide([u64; 29]);

/// No push adds more than one chunk, however long the queue: a `VecDeque` of 200,000
/// such elements doubled by 30 MB in one push.
#[test]
fn a_push_adds_at_most_one_chunk_and_moves_nothing_queued() {
    let mut q = Deque::new();
    let mut largest = 0;
    for i in 0..200_000u64 {
        let before = q.chunk_bytes();
        q.push_back(Wide([i; 29]));
        largest = largest.max(q.chunk_bytes() - before);
    }
    assert!(
        largest <= 72 << 10,
        "one push grew the queue {largest} bytes"
    );
    assert!(q.chunk_bytes() > 40 << 20);
    // The first element stays where it was put while the rest is pushed.
    let first: *const Wide = q.get(0).expect("queued");
    for i in 0..100_000u64 {
        q.push_back(Wide([i; 29]));
    }
    assert_eq!(q.get(0).map(|w| w as *const Wide), Some(first));
    assert_eq!(q.len(), 300_000);
}

/// A queue that holds steady keeps at most its chunks' worth plus one: an emptied chunk
/// is dropped or kept as the spare, never left behind. (Whether the spare is the chunk
/// taken again, rather than a fresh one of the same size, this does not see.)
#[test]
fn a_steady_queue_holds_no_more_than_one_chunk_beyond_its_length() {
    let mut q = Deque::new();
    let chunk = Deque::<u64>::CHUNK;
    for i in 0..chunk as u64 {
        q.push_back(i);
    }
    let bytes = q.chunk_bytes();
    for i in 0..10 * chunk as u64 {
        q.push_back(i);
        assert!(q.pop_front().is_some());
        assert!(q.chunk_bytes() <= 2 * bytes, "{}", q.chunk_bytes());
    }
    assert_eq!(q.len(), chunk);
}

#[derive(Clone, Debug)]
enum Op {
    Push(u32),
    Pop,
    Get(usize),
    Set(usize, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u32>().prop_map(Op::Push),
        3 => Just(Op::Pop),
        1 => (0usize..800).prop_map(Op::Get),
        1 => (0usize..800, any::<u32>()).prop_map(|(i, v)| Op::Set(i, v)),
    ]
}

proptest! {
    /// Pushes, pops and indexing give what a `VecDeque` gives, across chunk boundaries
    /// (a chunk of `u64` holds 8,192; of `[u64; 512]`, 16).
    #[test]
    fn the_deque_does_what_a_vecdeque_does(ops in proptest::collection::vec(op(), 1..1000)) {
        let mut q: Deque<[u64; 512]> = Deque::new();
        let mut m: VecDeque<[u64; 512]> = VecDeque::new();
        let wide = |v: u32| [u64::from(v); 512];
        for o in ops {
            match o {
                Op::Push(v) => {
                    q.push_back(wide(v));
                    m.push_back(wide(v));
                }
                Op::Pop => prop_assert_eq!(q.pop_front(), m.pop_front()),
                Op::Get(i) => prop_assert_eq!(q.get(i), m.get(i)),
                Op::Set(i, v) => {
                    if let (Some(a), Some(b)) = (q.get_mut(i), m.get_mut(i)) {
                        *a = wide(v);
                        *b = wide(v);
                    } else {
                        prop_assert!(q.get(i).is_none() && m.get(i).is_none());
                    }
                }
            }
            prop_assert_eq!(q.len(), m.len());
            prop_assert_eq!(q.back(), m.back());
            prop_assert!(q.iter().map(|a| a[0]).eq(m.iter().map(|a| a[0])));
        }
    }
}
