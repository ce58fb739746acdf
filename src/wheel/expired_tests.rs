//! The expired list sorted in bounded steps: a poll sorts at most a step, reports more due
//! (with `next_deadline` at or before its `now`) while arrivals wait to be sorted, and the
//! fires of all polls together come in (deadline, arrival) order, checked against a plain
//! `BTreeMap` on generated sequences of overdue inserts, cancels, re-arms and polls.

use super::{Fate, Wheel, SORT_STEP};
use crate::units::UtcMicros;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

/// The wheel's time in these tests; every deadline lies before it, on the expired list.
const ELAPSED: u64 = 10_000_000_000;

/// A scrambled deadline in the last `span` µs for the `i`th arrival, ties included.
fn scrambled(i: u64, span: u64) -> u64 {
    ELAPSED - 1 - i.wrapping_mul(2_654_435_761) % span
}

/// A million overdue timers sorted in one poll held the shard's thread for 75–96 ms. Here a
/// list of four steps and a bit: each of the first four polls sorts at most a step and fires
/// nothing, the fifth fires, and all the fires together are the model's order.
#[test]
fn a_poll_sorts_at_most_a_step_of_overdue_arrivals_and_they_fire_in_order_after() {
    let n = 4 * SORT_STEP + 5;
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(ELAPSED), n);
    let mut model = BTreeMap::new();
    for i in 0..n as u32 {
        let deadline = scrambled(u64::from(i), n as u64 / 3);
        wheel.insert(UtcMicros(deadline), i).expect("in range");
        model.insert((deadline, i), i);
    }
    let now = UtcMicros(ELAPSED);
    let mut fired = Vec::new();
    let mut polls = 0;
    loop {
        let (sorted_before, fired_before) = (wheel.runs.sorted, fired.len());
        let more = wheel.poll_at_most(now, 1024, |_, d, i| fired.push((d.0, i)));
        polls += 1;
        let sorted = wheel.runs.sorted - sorted_before;
        assert!(
            sorted <= SORT_STEP,
            "poll {polls} sorted {sorted} entries, more than a step of {SORT_STEP}"
        );
        if polls <= 4 {
            assert_eq!(
                (more, fired.len(), sorted),
                (true, 0, SORT_STEP),
                "poll {polls}: a full step sorted, nothing fired, more due"
            );
        }
        if polls == 5 {
            assert_eq!((sorted, fired.len() - fired_before), (5, 1024));
        }
        if more {
            assert!(
                wheel.next_deadline().is_some_and(|d| d <= now),
                "poll {polls} stopped with more due, yet next_deadline is {:?}, after {now:?}",
                wheel.next_deadline()
            );
        }
        if !more {
            break;
        }
        assert!(polls < 1_000, "never done");
    }
    let expected: Vec<(u64, u32)> = model.into_iter().map(|((d, _), i)| (d, i)).collect();
    assert!(fired == expected, "fires out of (deadline, arrival) order");
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_deadline(), None);
}

/// The shard parks until `next_deadline` once a poll reports nothing more due. While arrivals
/// wait to be sorted, every poll that may fire reports more due, and `next_deadline` stays at
/// or before its `now`, even when the earliest arrival was cancelled (the bound is then
/// stale, and still below `now`): the shard polls again at once.
#[test]
fn the_wheel_asks_to_be_polled_again_at_once_while_arrivals_wait_to_be_sorted() {
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(ELAPSED), 64);
    wheel.set_sort_step(4);
    let mut refs = Vec::new();
    for i in 0..20u32 {
        // Due from ELAPSED - 20 to ELAPSED - 1, inserted latest first.
        let deadline = ELAPSED - 1 - u64::from(i);
        refs.push(wheel.insert(UtcMicros(deadline), i).expect("in range"));
    }
    // The earliest, cancelled: the lower bound the wheel keeps is now stale.
    assert_eq!(wheel.remove(refs[19]), Some(19));
    let now = UtcMicros(ELAPSED - 5);
    let mut fired = Vec::new();
    let mut polls = 0;
    while wheel.sorting_left() {
        let more = wheel.poll_at_most(now, usize::MAX, |_, _, i| fired.push(i));
        polls += 1;
        if wheel.sorting_left() {
            assert!(
                more,
                "a poll that stops with arrivals to sort reports more due"
            );
            assert!(fired.is_empty(), "fired before all arrivals were sorted");
            let next = wheel.next_deadline().expect("pending");
            assert!(next <= now, "next_deadline {next:?} after now {now:?}");
        } else {
            assert!(!more, "the last step fires all that is due");
        }
        assert!(polls <= 5, "19 entries take 5 steps of 4");
    }
    assert_eq!(polls, 5);
    let due: Vec<u32> = (4..=18).rev().collect();
    assert_eq!(fired, due, "the due ones, earliest first");
    // What is left is not due yet: the wheel reports exactly when it is.
    assert!(!wheel.poll_at_most(now, usize::MAX, |_, _, _| panic!("early")));
    assert_eq!(wheel.next_deadline(), Some(UtcMicros(ELAPSED - 4)));
    // A budget of 0 (the store holds fires back) sorts nothing, and still reports more due.
    wheel.insert(UtcMicros(ELAPSED - 50), 50).expect("in range");
    wheel
        .insert(UtcMicros(ELAPSED - 100), 100)
        .expect("in range");
    assert!(wheel.sorting_left());
    let sorted = wheel.runs.sorted;
    assert!(wheel.poll_at_most(now, 0, |_, _, _| panic!("no budget")));
    assert_eq!(wheel.runs.sorted, sorted);
}

/// One step of generated work between checks.
#[derive(Debug, Clone)]
enum Op {
    /// `n` overdue inserts, `back` µs or less before the wheel's time, in scrambled or in
    /// deadline order.
    Insert { n: u16, back: u64, ordered: bool },
    /// Cancels the `pick`th pending entry (modulo the count), whether fired or not.
    Cancel { pick: u16 },
    /// One bounded poll at `ago` µs before the wheel's time (0: at it).
    Poll { ago: u64, budget: usize },
    /// Polls at the wheel's time until nothing more is due.
    Drain { budget: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u16..400, prop_oneof![Just(8u64), Just(300), Just(5_000)], any::<bool>())
            .prop_map(|(n, back, ordered)| Op::Insert { n, back, ordered }),
        3 => (0u16..1_000).prop_map(|pick| Op::Cancel { pick }),
        6 => (prop_oneof![Just(0u64), 0u64..400], prop_oneof![Just(usize::MAX), 0usize..50])
            .prop_map(|(ago, budget)| Op::Poll { ago, budget }),
        1 => prop_oneof![Just(usize::MAX), 1usize..50].prop_map(|budget| Op::Drain { budget }),
    ]
}

/// The reference: pending entries by (deadline, arrival number).
#[derive(Default)]
struct Model {
    pending: BTreeMap<(u64, u64), u32>,
    /// Each entry's key in `pending`.
    keys: HashMap<u32, (u64, u64)>,
    arrivals: u64,
}

impl Model {
    fn insert(&mut self, id: u32, deadline: u64) {
        let key = (deadline, self.arrivals);
        self.arrivals += 1;
        self.pending.insert(key, id);
        self.keys.insert(id, key);
    }

    fn remove(&mut self, id: u32) -> bool {
        self.keys
            .remove(&id)
            .is_some_and(|key| self.pending.remove(&key).is_some())
    }
}

/// Whether the test re-arms `id` at its fire: every fifth, at most twice.
fn rearms(id: u32, times: u8) -> bool {
    id % 5 == 0 && times < 2
}

/// Polls once at `now` within `budget`, re-arming the fires [`rearms`] names 7 µs after their
/// deadline, and checks the poll against the model; whether to poll again (more due, or
/// re-armed entries that may be).
fn poll_once(
    wheel: &mut Wheel<u32>,
    model: &mut Model,
    times: &mut HashMap<u32, u8>,
    (now, budget, step): (u64, usize, usize),
) -> Result<bool, TestCaseError> {
    let sorted = wheel.runs.sorted;
    let mut fired = Vec::new();
    let mut rearmed = Vec::new();
    let more = wheel.poll_keeping(UtcMicros(now), budget, |_, d, id| {
        fired.push((d.0, id));
        let n = times.entry(id).or_default();
        // Re-armed in the past only: it goes back to the expired list.
        if rearms(id, *n) && d.0 + 7 < ELAPSED {
            *n += 1;
            rearmed.push((id, d.0 + 7));
            Fate::Rearm(UtcMicros(d.0 + 7), id)
        } else {
            Fate::Done
        }
    });
    prop_assert!(
        wheel.runs.sorted - sorted <= step,
        "a poll sorted {} entries, more than a step of {}",
        wheel.runs.sorted - sorted,
        step
    );
    prop_assert!(fired.len() <= budget);
    // Exactly the model's earliest due entries, in (deadline, arrival) order.
    for &(deadline, id) in &fired {
        prop_assert!(deadline <= now, "{} due {} fired at {}", id, deadline, now);
        let first = model.pending.pop_first();
        prop_assert_eq!(
            first.map(|((d, _), i)| (d, i)),
            Some((deadline, id)),
            "fire at {}",
            now
        );
        model.keys.remove(&id);
    }
    // Re-armed entries arrive as the poll ends, in the order they fired, due at the next.
    let due = model.pending.keys().next().is_some_and(|&(d, _)| d <= now);
    let again = more || !rearmed.is_empty();
    for (id, at) in rearmed {
        model.insert(id, at);
    }
    if more {
        let next = wheel.next_deadline().map(|d| d.0);
        prop_assert!(
            next.is_some_and(|n| n <= now),
            "more due, but next_deadline {:?} after now {}",
            next,
            now
        );
    } else {
        prop_assert!(
            !due,
            "the poll reported nothing more due, the model has some"
        );
    }
    if let Some(next) = wheel.next_deadline() {
        let earliest = model.pending.keys().next().map(|&(d, _)| d);
        prop_assert!(earliest.is_some_and(|e| next.0 <= e));
    } else {
        prop_assert!(model.pending.is_empty());
    }
    prop_assert_eq!(wheel.len(), model.pending.len());
    prop_assert_eq!(wheel.occupancy()[super::LEVELS] as usize, wheel.len());
    Ok(again)
}

fn run(ops: &[Op], step: usize) -> Result<(), TestCaseError> {
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(ELAPSED), 64);
    wheel.set_sort_step(step);
    let mut model = Model::default();
    let mut refs = HashMap::new();
    let mut times = HashMap::new();
    let mut next_id = 0u32;
    let elapsed = wheel.elapsed().0;
    for op in ops {
        match *op {
            Op::Insert { n, back, ordered } => {
                for i in 0..u64::from(n) {
                    let deadline = if ordered {
                        elapsed - back + i * back / u64::from(n)
                    } else {
                        elapsed - 1 - i.wrapping_mul(2_654_435_761) % back
                    };
                    let r = wheel.insert(UtcMicros(deadline), next_id);
                    let r = r.map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
                    refs.insert(next_id, r);
                    model.insert(next_id, deadline);
                    next_id += 1;
                }
            }
            Op::Cancel { pick } => {
                if next_id > 0 {
                    let id = u32::from(pick) % next_id;
                    let got = refs.get(&id).and_then(|&r| wheel.remove(r));
                    let pending = model.remove(id);
                    prop_assert_eq!(got, pending.then_some(id), "cancel of {}", id);
                }
            }
            Op::Poll { ago, budget } => {
                poll_once(
                    &mut wheel,
                    &mut model,
                    &mut times,
                    (elapsed - ago, budget, step),
                )?;
            }
            Op::Drain { budget } => {
                let mut polls = 0;
                while poll_once(&mut wheel, &mut model, &mut times, (elapsed, budget, step))? {
                    polls += 1;
                    prop_assert!(polls < 100_000, "never done");
                }
            }
        }
    }
    // Whatever is left fires, in order, once the clock reaches the wheel's time.
    let mut polls = 0;
    while poll_once(&mut wheel, &mut model, &mut times, (elapsed, 64, step))? {
        polls += 1;
        prop_assert!(polls < 100_000, "never done");
    }
    prop_assert!(model.pending.is_empty() && wheel.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Large out-of-order expired lists, sorted a few entries per poll, with cancels between
    /// the steps and between the fires, re-arms in the past, polls before the wheel's time
    /// (the clock stepped back) and budgets down to 0: every fire comes at a poll whose `now`
    /// reaches it, in exactly the model's (deadline, arrival) order.
    #[test]
    fn overdue_arrivals_fire_in_the_models_order_across_bounded_sorting_polls(
        ops in prop::collection::vec(op(), 1..40),
        step in prop_oneof![1usize..8, 8usize..200],
    ) {
        run(&ops, step)?;
    }
}
