//! Model check: the timer table (wheel + index) against a plain `BTreeMap`, on generated
//! sequences of insert, reschedule, cancel, advance, backward clock steps and the walks that
//! warm the next cascades, with and without fired timers re-armed at their fire; and the key
//! order, whose runs are kept small enough to split and merge, listing the model's keys.

use super::table::TimerTable;
use super::tests::{packed, poll_all, poll_keeping_all, Fire, Rearm};
use crate::units::{UtcMicros, TEN_YEARS_US};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone)]
enum Op {
    /// Upsert key `k` at `now + offset` (or `now - offset` when `past`).
    Upsert {
        k: u8,
        offset: u64,
        past: bool,
    },
    Cancel {
        k: u8,
    },
    Advance {
        by: u64,
    },
    /// The clock steps back by `by` (a backward step of the system clock).
    StepBack {
        by: u64,
    },
    /// The next cascades' lists walked ahead of time, `steps` entries, as at `now + ahead`:
    /// it must change nothing a poll sees.
    Warm {
        ahead: u64,
        steps: usize,
    },
}

fn scale() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..70,
        4 => 0u64..5_000,
        3 => 0u64..400_000,
        2 => 0u64..100_000_000,
        1 => 0u64..TEN_YEARS_US,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..40, scale(), prop::bool::weighted(0.1))
            .prop_map(|(k, offset, past)| Op::Upsert { k, offset, past }),
        2 => (0u8..40).prop_map(|k| Op::Cancel { k }),
        4 => scale().prop_map(|by| Op::Advance { by }),
        1 => (0u64..10_000).prop_map(|by| Op::StepBack { by }),
        2 => (scale(), 1usize..20).prop_map(|(ahead, steps)| Op::Warm { ahead, steps }),
    ]
}

/// The reference: pending timers ordered by (deadline, key), with their version and the times
/// they were re-armed.
#[derive(Default)]
struct Model {
    by_deadline: BTreeMap<(u64, u8), (u64, u8)>,
    by_key: HashMap<u8, (u64, u64)>,
}

impl Model {
    fn upsert(&mut self, k: u8, deadline: u64, version: u64) -> bool {
        self.rearm((k, deadline, version, 0))
    }

    /// Pending under `k` again (a re-arm after its fire, or an upsert with no re-arms).
    fn rearm(&mut self, (k, deadline, version, n): Rearm) -> bool {
        let replaced = self.cancel(k).is_some();
        self.by_deadline.insert((deadline, k), (version, n));
        self.by_key.insert(k, (deadline, version));
        replaced
    }

    fn cancel(&mut self, k: u8) -> Option<(u64, u64)> {
        let (deadline, version) = self.by_key.remove(&k)?;
        self.by_deadline.remove(&(deadline, k));
        Some((deadline, version))
    }

    /// Everything due at or before `now`, in deadline order (ties by key).
    fn fire(&mut self, now: u64) -> Vec<Fire> {
        let later = self.by_deadline.split_off(&(now + 1, 0));
        let due = std::mem::replace(&mut self.by_deadline, later);
        due.into_iter()
            .map(|((d, k), (v, n))| {
                self.by_key.remove(&k);
                (d, k, v, n)
            })
            .collect()
    }
}

/// `move_ns`: the cascade cost per entry and level that sets how far ahead slots cascade
/// (large values make a handful of entries cascade milliseconds ahead of their slot).
/// `sweep`: fired timers leave the index by a sweep whenever a poll fires more than two.
/// `rearm`: the fired timers [`keeps`] names are re-armed this many µs after their fire.
/// `sort_step`: expired timers one poll sorts at most (a few, so that the expired list is
/// sorted over many polls, in runs merged as they fire).
fn run(
    start: u64,
    ops: &[Op],
    (budget, sort_step): (usize, usize),
    (move_ns, sweep): (u64, bool),
    rearm: Option<u64>,
) -> Result<(), TestCaseError> {
    let mut now = start;
    let mut table = TimerTable::new(UtcMicros(now), 64);
    table.set_key_run_max(4 + ops.len() % 5);
    table.set_move_ns(move_ns);
    table.set_sort_step(sort_step);
    if sweep {
        table.set_record_min(0);
    }
    let mut model = Model::default();
    for op in ops {
        match *op {
            Op::Upsert { k, offset, past } => {
                let deadline = if past {
                    now.saturating_sub(offset)
                } else {
                    now + offset
                };
                let got = table.upsert(packed(k), UtcMicros(deadline), UtcMicros(now));
                let got = got.map_err(|e| TestCaseError::fail(format!("upsert {k}: {e:?}")))?;
                let replaced = model.upsert(k, deadline, got.version);
                prop_assert_eq!(got.replaced, replaced, "replaced flag for key {}", k);
            }
            Op::Cancel { k } => {
                let got = table
                    .cancel(packed(k).identity())
                    .map(|(d, r)| (d.0, r.version));
                prop_assert_eq!(got, model.cancel(k), "cancel of key {}", k);
            }
            Op::Advance { by } => now += by,
            Op::StepBack { by } => now = now.saturating_sub(by).max(start),
            Op::Warm { ahead, steps } => {
                let walked = table.warm(UtcMicros(now + ahead), steps);
                prop_assert!(walked <= steps, "walked {} of at most {}", walked, steps);
            }
        }
        let (mut fired, rearmed) = poll_keeping_all(&mut table, now, budget, rearm);
        for &(deadline, k, ..) in &fired {
            prop_assert!(
                deadline <= now,
                "key {} due {} fired early at {}",
                k,
                deadline,
                now
            );
        }
        prop_assert!(
            fired.windows(2).all(|w| w[0].0 <= w[1].0),
            "fired out of deadline order: {:?}",
            fired
        );
        // Ties in deadline may fire in any order; compare as (deadline, key)-sorted sets.
        fired.sort_unstable();
        prop_assert_eq!(&fired, &model.fire(now), "fired set at now={}", now);
        for r in rearmed {
            model.rearm(r);
            let (k, at, version, _) = r;
            let view = table
                .get(packed(k).identity())
                .map(|v| (v.deadline.0, v.version));
            prop_assert_eq!(view, Some((at, version)), "key {} re-armed", k);
        }
        prop_assert_eq!(table.len(), model.by_key.len());
        prop_assert_eq!(
            table.index_len(),
            table.len(),
            "index entries vs pending timers"
        );
        prop_assert_eq!(table.keys_len(), table.len(), "key order vs pending timers");
        let mut keys: Vec<String> = model.by_key.keys().map(|k| format!("key-{k}")).collect();
        keys.sort_unstable();
        let mut walked = Vec::new();
        table.walk_keys("tenant", "", false, |v| {
            walked.push(v.timer.key().to_string());
            true
        });
        prop_assert_eq!(walked, keys, "the key order's walk");
        prop_assert_eq!(
            table.occupancy().iter().map(|&n| n as usize).sum::<usize>(),
            table.len(),
            "occupancy {:?} does not add up to the pending count",
            table.occupancy()
        );
        if let Some(next) = table.next_deadline() {
            let earliest = model.by_deadline.keys().next().map(|&(d, _)| d);
            prop_assert!(
                earliest.is_some_and(|e| next.0 <= e),
                "next_deadline {} after model {:?}",
                next.0,
                earliest
            );
        } else {
            prop_assert!(
                model.by_key.is_empty(),
                "wheel says empty, model holds {}",
                model.by_key.len()
            );
        }
    }
    // Drain: everything left fires once time runs far enough, and nothing is lost.
    let end = now + TEN_YEARS_US + 1;
    let mut rest = poll_all(&mut table, end, budget);
    rest.sort_unstable();
    prop_assert_eq!(rest, model.fire(end));
    prop_assert!(table.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Half the cases re-arm every third key at its fire (three times, `rearm` µs later),
    /// keeping its version and its slab entry: it fires again exactly at its new deadline,
    /// with the metadata it was re-armed with, and the index, the occupancy and
    /// `next_deadline` stay exact. Most cases sort the expired list a few timers per poll.
    #[test]
    fn table_fires_and_re_arms_exactly_as_a_btreemap_model_does(
        start in prop_oneof![Just(0u64), 1_000_000u64..2_000_000_000_000_000],
        ops in prop::collection::vec(op(), 1..150),
        budget in prop_oneof![3 => Just(usize::MAX), 1 => 1usize..5],
        move_ns in prop_oneof![Just(super::MOVE_NS), Just(0), 1_000u64..50_000_000],
        sweep in any::<bool>(),
        rearm in prop::option::weighted(0.5, scale().prop_map(|a| a + 1)),
        sort_step in prop_oneof![1 => Just(super::SORT_STEP), 3 => 1usize..5],
    ) {
        run(start, &ops, (budget, sort_step), (move_ns, sweep), rearm)?;
    }
}
