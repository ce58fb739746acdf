//! The key index against a plain `BTreeSet` per tenant, on generated sequences of inserts,
//! removals, moves to another slab entry and sweeps, with runs small enough to split and
//! merge many times; and the memory a large row costs.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// What the table would hold: (tenant, key) by slab index.
#[derive(Default)]
struct Slab {
    entries: Vec<Option<(String, String)>>,
}

impl Slab {
    fn key_of<'a>(&'a self) -> impl Fn(u32) -> &'a [u8] + 'a {
        |h| {
            self.entries[h as usize]
                .as_ref()
                .map_or(&b""[..], |(_, k)| k.as_bytes())
        }
    }

    fn free(&self) -> u32 {
        match self.entries.iter().position(Option::is_none) {
            Some(i) => i as u32,
            None => self.entries.len() as u32,
        }
    }

    fn put(&mut self, h: u32, tenant: &str, key: &str) {
        let h = h as usize;
        if self.entries.len() <= h {
            self.entries.resize(h + 1, None);
        }
        self.entries[h] = Some((tenant.to_string(), key.to_string()));
    }

    fn find(&self, tenant: &str, key: &str) -> Option<u32> {
        self.entries
            .iter()
            .position(|e| e.as_ref().is_some_and(|(t, k)| t == tenant && k == key))
            .map(|i| i as u32)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert {
        t: u8,
        k: u16,
    },
    Remove {
        t: u8,
        k: u16,
    },
    /// The timer moves to another slab entry (a replacement that did not reuse its own).
    Move {
        t: u8,
        k: u16,
    },
    /// Every key divisible by `m` leaves at once (a poll that fired many).
    Sweep {
        m: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..3, 0u16..300).prop_map(|(t, k)| Op::Insert { t, k }),
        4 => (0u8..3, 0u16..300).prop_map(|(t, k)| Op::Remove { t, k }),
        1 => (0u8..3, 0u16..300).prop_map(|(t, k)| Op::Move { t, k }),
        1 => (2u16..7).prop_map(|m| Op::Sweep { m }),
    ]
}

fn name(t: u8) -> String {
    format!("tenant-{t}")
}

fn key(k: u16) -> String {
    // Common prefixes and different lengths, so that byte order is not numeric order.
    format!("order-{}", k * 7 % 301)
}

fn listed(index: &KeyIndex, slab: &Slab, t: &str, start: &str, after: bool) -> Vec<String> {
    let mut out = Vec::new();
    index.walk(t, start.as_bytes(), after, slab.key_of(), |h| {
        out.push(
            slab.entries[h as usize]
                .as_ref()
                .map_or(String::new(), |e| e.1.clone()),
        );
        true
    });
    out
}

fn run(ops: &[Op], run_max: usize) -> Result<(), TestCaseError> {
    let mut index = KeyIndex::default();
    index.set_run_max(run_max);
    let mut slab = Slab::default();
    let mut model: Vec<BTreeSet<String>> = vec![BTreeSet::new(); 3];
    for op in ops {
        match *op {
            Op::Insert { t, k } => {
                let (tn, kn) = (name(t), key(k));
                if slab.find(&tn, &kn).is_none() {
                    let h = slab.free();
                    slab.put(h, &tn, &kn);
                    index.insert(&tn, kn.as_bytes(), h, slab.key_of());
                    model[t as usize].insert(kn);
                }
            }
            Op::Remove { t, k } => {
                if let Some(h) = slab.find(&name(t), &key(k)) {
                    slab.entries[h as usize] = None;
                    index.remove(h);
                    model[t as usize].remove(&key(k));
                }
            }
            Op::Move { t, k } => {
                if let Some(old) = slab.find(&name(t), &key(k)) {
                    let new = slab.entries.len() as u32;
                    slab.put(new, &name(t), &key(k));
                    slab.entries[old as usize] = None;
                    index.replace(old, new);
                }
            }
            Op::Sweep { m } => {
                let gone: Vec<u32> = (0..slab.entries.len() as u32)
                    .filter(|&h| {
                        slab.entries[h as usize]
                            .as_ref()
                            .is_some_and(|(_, k)| k.len() % m as usize == 0)
                    })
                    .collect();
                for &h in &gone {
                    if let Some((t, k)) = slab.entries[h as usize].take() {
                        let t: usize = t["tenant-".len()..].parse().unwrap_or(0);
                        model[t].remove(&k);
                    }
                }
                // As a poll's sweep: the entries are gone before the index hears of it.
                index.retain(|h| !gone.contains(&h));
            }
        }
        let total: usize = model.iter().map(BTreeSet::len).sum();
        prop_assert_eq!(index.len(), total);
        for (t, keys) in model.iter().enumerate() {
            let all: Vec<String> = keys.iter().cloned().collect();
            prop_assert_eq!(&listed(&index, &slab, &name(t as u8), "", false), &all);
            for start in ["order-1", "order-15", "order-299", "order-9", "p"] {
                let from: Vec<String> = keys.range(start.to_string()..).cloned().collect();
                prop_assert_eq!(&listed(&index, &slab, &name(t as u8), start, false), &from);
                let after: Vec<String> = from.iter().filter(|k| *k != start).cloned().collect();
                prop_assert_eq!(&listed(&index, &slab, &name(t as u8), start, true), &after);
            }
        }
    }
    // Runs never over their most, and the index holds no tenant once it is empty.
    prop_assert!(index.runs.iter().all(|r| r.handles.len() <= run_max));
    let live = index.tenants.iter().flatten().count();
    prop_assert_eq!(live, model.iter().filter(|m| !m.is_empty()).count());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn key_index_lists_in_key_order_as_a_btreeset_does(
        ops in prop::collection::vec(op(), 1..400),
        run_max in prop_oneof![Just(4usize), Just(8), 5usize..40],
    ) {
        run(&ops, run_max)?;
    }
}

/// A walk stops where its visitor says, and an unknown tenant lists nothing.
#[test]
fn a_walk_stops_when_told_and_knows_no_other_tenant() {
    let mut index = KeyIndex::default();
    let mut slab = Slab::default();
    for (h, k) in ["b", "a", "c"].iter().enumerate() {
        slab.put(h as u32, "shop", k);
        index.insert("shop", k.as_bytes(), h as u32, slab.key_of());
    }
    let mut seen = Vec::new();
    index.walk("shop", b"", false, slab.key_of(), |h| {
        seen.push(h);
        seen.len() < 2
    });
    assert_eq!(seen, vec![1, 0]);
    index.walk("other", b"", false, slab.key_of(), |_| {
        panic!("no such tenant")
    });
}

/// The memory budget: a tenant of 262,144 keys put in random order, and another put in key
/// order, cost at most 12 bytes a key with their homes (four chunks of them, full).
#[test]
fn a_large_row_costs_at_most_twelve_bytes_a_key() {
    for shuffled in [true, false] {
        let n = 1u32 << 18;
        let mut order: Vec<u32> = (0..n).collect();
        if shuffled {
            let mut rng = fastrand::Rng::with_seed(7);
            rng.shuffle(&mut order);
        }
        let mut slab = Slab::default();
        slab.entries.resize(n as usize, None);
        let mut index = KeyIndex::default();
        for (h, &k) in order.iter().enumerate() {
            let k = format!("order-{k:08}");
            slab.put(h as u32, "shop", &k);
            index.insert("shop", k.as_bytes(), h as u32, slab.key_of());
        }
        let per_key = index.heap_bytes() as f64 / f64::from(n);
        assert!(
            per_key <= 12.0,
            "{per_key:.1} bytes a key (shuffled: {shuffled})"
        );
        let mut all = Vec::new();
        index.walk("shop", b"", false, slab.key_of(), |h| {
            all.push(h);
            true
        });
        assert_eq!(all.len(), n as usize);
    }
}
