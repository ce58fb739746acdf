use super::*;
use crate::units::UtcMicros;

/// Level-2 slots are 4,096 µs wide: a wheel at `START` puts deadlines 3 slots on, in one
/// level-2 slot.
const START: u64 = 1 << 30;
const SLOT: u64 = START + 3 * 4_096;

/// Warms at `now`, `steps` at a time, until a call walks nothing; every entry walked.
fn warm_all(wheel: &mut Wheel<u32>, now: u64, steps: usize) -> usize {
    let mut walked = 0;
    for _ in 0..100_000 {
        match wheel.warm(now, steps) {
            0 => return walked,
            n => walked += n,
        }
    }
    panic!("warming never ran out of work");
}

#[test]
fn a_slot_is_walked_once_its_cascade_comes_within_reach_and_then_not_again() {
    let n = 1_000u32;
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(START), n as usize);
    for i in 0..n {
        wheel
            .insert(UtcMicros(SLOT + 100 + u64::from(i)), i)
            .expect("in range");
    }
    assert_eq!(wheel.occupancy()[2], n, "all on level 2, in one slot");
    let due = wheel.next_deadline().expect("pending").0;
    let ahead = u64::from(n) * WARM_NS_PER_ENTRY / 1_000;
    assert_eq!(
        warm_all(&mut wheel, due - ahead - 1, 8),
        0,
        "not within reach yet"
    );
    assert_eq!(warm_all(&mut wheel, due - ahead, 8), n as usize);
    assert_eq!(wheel.warm(due - ahead + 1, 8), 0, "walked already");
    // Warming changed nothing: the cascade and the fires are as without it.
    let mut fired = Vec::new();
    wheel.poll(UtcMicros(SLOT + 100 + u64::from(n)), |_, d, v| {
        fired.push((d.0, v))
    });
    let want: Vec<(u64, u32)> = (0..n).map(|i| (SLOT + 100 + u64::from(i), i)).collect();
    assert_eq!(fired, want);
}

/// A wheel at `START` with `n` entries in the level-2 slot at `SLOT`, in deadline order.
fn one_slot(n: u32) -> (Wheel<u32>, Vec<crate::wheel::EntryRef>) {
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(START), n as usize);
    let refs = (0..n)
        .map(|i| {
            wheel
                .insert(UtcMicros(SLOT + u64::from(i)), i)
                .expect("in range")
        })
        .collect();
    (wheel, refs)
}

#[test]
fn a_walk_whose_last_entry_left_the_list_starts_again_from_the_head() {
    let (mut wheel, refs) = one_slot(64);
    assert_eq!(wheel.warm(SLOT, 10), 10, "entries 0 to 9");
    // Entries 5 to 63 go, the last one walked with them, latest first: the freed entry 9
    // now points on through the free list to 10, 11, … 63, which a walk that followed it
    // would take for the list.
    for r in refs[5..].iter().rev() {
        wheel.remove(*r).expect("pending");
    }
    assert_eq!(
        warm_all(&mut wheel, SLOT, 3),
        5,
        "entries 0 to 4, from the head"
    );
}

#[test]
fn a_walk_whose_last_entry_went_to_another_timer_starts_again_from_the_head() {
    let (mut wheel, refs) = one_slot(64);
    assert_eq!(wheel.warm(SLOT, 10), 10, "entries 0 to 9");
    // Entry 9's index goes to a new timer in the same slot, at the list's tail: a walk
    // that went on from it would end there and miss entries 10 to 63.
    wheel.remove(refs[9]).expect("pending");
    let again = wheel.insert(UtcMicros(SLOT + 1_000), 99).expect("in range");
    assert_eq!(again.index, refs[9].index, "the index was given again");
    assert_eq!(
        warm_all(&mut wheel, SLOT, 8),
        64,
        "the whole list, from the head"
    );
}

#[test]
fn entries_appended_after_a_walk_are_walked_next() {
    let (mut wheel, _) = one_slot(64);
    assert_eq!(warm_all(&mut wheel, SLOT, 8), 64);
    assert_eq!(wheel.warm(SLOT, 8), 0, "nothing left");
    wheel.insert(UtcMicros(SLOT + 1_000), 99).expect("in range");
    wheel
        .insert(UtcMicros(SLOT + 1_001), 100)
        .expect("in range");
    assert_eq!(warm_all(&mut wheel, SLOT, 8), 2, "only the two new ones");
    let mut fired = Vec::new();
    wheel.poll(UtcMicros(SLOT + 1_001), |_, _, v| fired.push(v));
    let want: Vec<u32> = (0..64).chain([99, 100]).collect();
    assert_eq!(fired, want, "warming changed nothing a poll sees");
}

#[test]
fn a_slot_too_large_to_keep_cached_is_left_alone() {
    let n = WARM_MAX + 1;
    let mut wheel: Wheel<u32> = Wheel::new(UtcMicros(START), n as usize);
    for i in 0..n {
        wheel.insert(UtcMicros(SLOT), i).expect("in range");
    }
    assert_eq!(warm_all(&mut wheel, SLOT, 64), 0);
}
