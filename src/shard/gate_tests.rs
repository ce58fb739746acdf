//! A shard handed the lease holders: its gate, and partitions loaded and dropped at run time.

use super::super::tests::{callback_meta, shard, Told, DEAD};
use super::super::*;
use crate::clock::FakeSource;
use crate::error::Error;
use crate::op::{reply_channel, Control, LoadedTimer, Op};
use crate::partition::partition_of;
use crate::store::redis::clustered::Holders;
use crate::timer::PackedTimer;
use crate::units::{UtcMicros, UtcNanos};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

/// Holds the partitions in its set.
#[derive(Default)]
pub(in crate::shard) struct Held(Mutex<Vec<u32>>);

impl Held {
    pub(in crate::shard) fn set(&self, partitions: &[u32]) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = partitions.to_vec();
    }
}

impl Holders for Held {
    fn holder(&self, partition: u32) -> Option<std::sync::Arc<str>> {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.contains(&partition)
            .then(|| format!("n:{partition}").into())
    }
}

/// `n` keys of tenant `t` in partition `p` (`k…`), and one key in another partition.
pub(in crate::shard) fn keys_in(p: u32, n: usize) -> (Vec<String>, String) {
    let mut same = Vec::new();
    let mut other = None;
    for i in 0.. {
        let k = format!("k{i}");
        if partition_of("t", &k) == p {
            same.push(k);
        } else if other.is_none() {
            other = Some(k);
        }
        if same.len() == n && other.is_some() {
            break;
        }
    }
    (same, other.unwrap_or_default())
}

pub(in crate::shard) fn timer(key: &str) -> PackedTimer {
    PackedTimer::new("t", key, b"{}").expect("small")
}

/// Applies a schedule of `key` due at `at`; the shard's answer.
pub(in crate::shard) fn schedule(
    s: &mut Shard<FakeSource>,
    key: &str,
    at: UtcMicros,
) -> Result<(), Error> {
    let (tx, mut rx) = reply_channel();
    s.apply(Op::Schedule {
        timer: timer(key),
        deadline: at,
        reply: Some(tx),
        slot: None,
        home: true,
    });
    match rx.try_recv() {
        Ok(Some(answer)) => answer.map(|_| ()),
        other => panic!("no answer: {other:?}"),
    }
}

pub(in crate::shard) fn get(s: &mut Shard<FakeSource>, key: &str) -> Result<bool, Error> {
    let (tx, mut rx) = reply_channel();
    s.apply(Op::Get {
        timer: timer(key),
        reply: tx,
    });
    match rx.try_recv() {
        Ok(Some(answer)) => answer.map(|info| info.is_some()),
        other => panic!("no answer: {other:?}"),
    }
}

pub(in crate::shard) fn load(s: &mut Shard<FakeSource>, p: u32, keys: &[&str], at: UtcMicros) {
    let records = keys
        .iter()
        .map(|k| LoadedTimer {
            timer: timer(k),
            version: 5,
            deadline: at,
        })
        .collect();
    s.ring.control(p, Control::Load(records, 0));
    assert_eq!(s.take_controls(None), 1);
}

/// Loads `keys` into `p` and `other` into `q`, all due at `at`.
pub(in crate::shard) fn load_two(
    s: &mut Shard<FakeSource>,
    (p, keys): (u32, &[String]),
    (q, other): (u32, &str),
    at: UtcMicros,
) {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    load(s, p, &keys, at);
    load(s, q, &[other], at);
}

/// A shard on the fake clock with a quota of 100 for tenant `t`, a store that notes what it
/// hears, and a gate over `held`.
pub(in crate::shard) fn gated(
    src: &FakeSource,
    held: &Arc<Held>,
) -> (Shard<FakeSource>, Told, Arc<crate::quota::Quota>) {
    let (mut s, _) = shard(src);
    let store = Told::default();
    s.store = Box::new(store.clone());
    s.quotas = Arc::new(crate::quota::Quotas::new([("t".to_string(), 100)], 1));
    s.gate = gate::Gate::new(Some(held.clone()));
    let quota = s.quotas.get("t").cloned().expect("a quota");
    (s, store, quota)
}

/// A partition and its keys.
type Keyed<K> = (u32, K);

/// A fake clock, and holders of two partitions: `p` with `n` keys, `q` with one.
pub(in crate::shard) fn two(
    n: usize,
) -> (FakeSource, Arc<Held>, Keyed<Vec<String>>, Keyed<String>) {
    let p = partition_of("t", "k0");
    let (keys, other) = keys_in(p, n);
    let q = partition_of("t", &other);
    let held = Arc::new(Held::default());
    held.set(&[p, q]);
    let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
    (src, held, (p, keys), (q, other))
}

#[test]
fn keyed_ops_of_a_partition_not_loaded_or_not_held_are_refused_naming_it() {
    let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
    let held = Arc::new(Held::default());
    let p = partition_of("t", "k0");
    let (keys, _) = keys_in(p, 1);
    let (mut s, store, _) = gated(&src, &held);
    let later = UtcMicros(s.clock.now().as_micros().0 + 60_000_000);
    let refused = Err(Error::PartitionNotHeld { partition: p });
    let not_held = Err(Error::PartitionNotHeld { partition: p });
    assert_eq!(schedule(&mut s, &keys[0], later), refused, "not held");
    held.set(&[p]);
    assert_eq!(
        schedule(&mut s, &keys[0], later),
        refused,
        "held, not loaded"
    );
    assert_eq!(get(&mut s, &keys[0]), not_held);
    for op in ["cancel", "redrive", "discard"] {
        let (tx, mut rx) = reply_channel();
        let (tx2, mut rx2) = reply_channel();
        let t = timer(&keys[0]);
        match op {
            "cancel" => s.apply(Op::Cancel {
                timer: t,
                reply: tx,
            }),
            "discard" => s.apply(Op::DeadDiscard {
                timer: t,
                reply: tx,
            }),
            _ => s.apply(Op::DeadRedrive {
                timer: t,
                reply: tx2,
            }),
        }
        let answer = match op {
            "redrive" => rx2.try_recv().ok().flatten().map(|a| a.map(|_| ())),
            _ => rx.try_recv().ok().flatten().map(|a| a.map(|_| ())),
        };
        assert_eq!(answer, Some(refused.clone()), "{op}");
    }
    load(&mut s, p, &[], later);
    assert_eq!(schedule(&mut s, &keys[0], later), Ok(()), "loaded and held");
    assert_eq!(get(&mut s, &keys[0]), Ok(true));
    held.set(&[]);
    assert_eq!(get(&mut s, &keys[0]), not_held, "the lease lapsed");
    assert_eq!(*store.0.borrow(), [format!("schedule t/{}", keys[0])]);
}

#[test]
fn a_due_timer_of_a_lapsed_partition_is_dropped_unfired_and_the_partition_waits_for_a_load() {
    let (src, held, (p, keys), (q, other)) = two(2);
    let (mut s, store, quota) = gated(&src, &held);
    let soon = UtcMicros(s.clock.now().as_micros().0 + 1_000);
    load_two(&mut s, (p, &keys[..2]), (q, &other), soon);
    assert_eq!((s.table.len(), quota.pending()), (3, 3));
    held.set(&[q]);
    src.advance(Duration::from_millis(2));
    assert_eq!(
        s.fire_due(usize::MAX, None).0,
        3,
        "all three left the wheel"
    );
    assert_eq!(
        *store.0.borrow(),
        [format!("fired t/{other}")],
        "only the held partition's timer fired; the store heard nothing of the others"
    );
    assert_eq!((s.table.len(), quota.pending()), (0, 0));
    assert_eq!(s.metrics.unfired_total.load(Ordering::Relaxed), 2);
    held.set(&[p, q]);
    assert!(
        get(&mut s, &keys[0]).is_err(),
        "renewed, but not acted on before a fresh load"
    );
    // The loop tells the lapse (a drop) and the regain (a load): the records come back.
    s.ring.control(p, Control::Drop);
    load(&mut s, p, &[&keys[0]], soon);
    assert_eq!(get(&mut s, &keys[0]), Ok(true));
    assert_eq!((s.table.len(), quota.pending()), (1, 1));
}

#[test]
fn a_load_replaces_the_partition_and_a_drop_forgets_it_without_firing_or_writing() {
    let (src, held, (p, keys), (q, other)) = two(3);
    let (mut s, store, quota) = gated(&src, &held);
    let later = UtcMicros(s.clock.now().as_micros().0 + 60_000_000);
    load_two(&mut s, (p, &keys[..2]), (q, &other), later);
    assert_eq!(schedule(&mut s, &keys[2], later), Ok(()));
    assert_eq!((s.table.len(), quota.pending()), (4, 4));
    // A reload holds exactly what was read: a key scheduled since is gone, one kept stays.
    load(&mut s, p, &[&keys[1]], later);
    assert_eq!(
        [&keys[0], &keys[1], &keys[2], &other].map(|k| get(&mut s, k)),
        [Ok(false), Ok(true), Ok(false), Ok(true)]
    );
    assert_eq!((s.table.len(), quota.pending()), (2, 2));
    // While a load or a drop waits, the partition is not acted on: what the shard holds of it
    // is about to be replaced.
    s.ring.control(p, Control::Drop);
    assert!(get(&mut s, &keys[1]).is_err() && get(&mut s, &other) == Ok(true));
    load(&mut s, p, &[&keys[1]], later);
    assert_eq!(get(&mut s, &keys[1]), Ok(true));
    // A drop and then a load waiting together: the load wins.
    s.ring.control(p, Control::Drop);
    load(&mut s, p, &[&keys[0]], later);
    assert_eq!((s.table.len(), quota.pending()), (2, 2));
    s.ring.control(p, Control::Drop);
    assert_eq!(s.take_controls(None), 1);
    assert_eq!((s.table.len(), quota.pending()), (1, 1));
    assert!(get(&mut s, &keys[0]).is_err() && get(&mut s, &other) == Ok(true));
    src.advance(Duration::from_secs(61));
    assert_eq!(s.fire_due(usize::MAX, None).0, 1);
    assert_eq!(
        *store.0.borrow(),
        [
            format!("schedule t/{}", keys[2]),
            format!("fired t/{other}")
        ],
        "a load and a drop write nothing"
    );
}

#[test]
fn a_shard_without_holders_ignores_loads_and_drops() {
    let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
    let (mut s, _) = shard(&src);
    let later = UtcMicros(s.clock.now().as_micros().0 + 60_000_000);
    assert_eq!(schedule(&mut s, "a", later), Ok(()));
    s.ring.control(partition_of("t", "a"), Control::Drop);
    assert_eq!(s.take_controls(None), 0);
    assert_eq!(get(&mut s, "a"), Ok(true));
}

/// The tenant `t`'s dead letters, keys only.
pub(in crate::shard) fn dead_keys(s: &mut Shard<FakeSource>) -> Vec<String> {
    let (tx, mut rx) = reply_channel();
    s.apply(Op::DeadList {
        tenant: "t".into(),
        after: None,
        through: None,
        limit: 100,
        bodies: false,
        reply: tx,
    });
    match rx.try_recv() {
        Ok(Some(Ok(list))) => list.into_iter().map(|d| d.key).collect(),
        other => panic!("no listing: {other:?}"),
    }
}

#[test]
fn a_loaded_dead_letter_is_listed_and_a_drop_takes_it_out_of_the_listing_and_the_quota() {
    let (src, held, (p, keys), _) = two(1);
    let (mut s, store, quota) = gated(&src, &held);
    let dead = callback_meta(DEAD);
    assert!(crate::sink::webhook::is_dead(&dead));
    let letter = PackedTimer::with_meta("t", &keys[0], &dead, b"{}").expect("small");
    let loaded = LoadedTimer {
        timer: letter,
        version: 9,
        deadline: UtcMicros(1),
    };
    s.ring.control(p, Control::Load(vec![loaded], 0));
    assert_eq!(s.take_controls(None), 1);
    assert_eq!(dead_keys(&mut s), [keys[0].clone()]);
    assert_eq!(
        (s.table.len(), quota.pending()),
        (0, 1),
        "a letter, not a timer"
    );
    s.ring.control(p, Control::Drop);
    assert_eq!(s.take_controls(None), 1);
    assert!(dead_keys(&mut s).is_empty());
    assert_eq!(quota.pending(), 0);
    assert!(store.0.borrow().is_empty(), "nothing written");
}

#[test]
fn a_listing_step_says_which_partitions_were_open_and_when_the_gate_changed() {
    let (src, held, (p, keys), (q, other)) = two(3);
    let query = crate::op::ListQuery {
        tenant: "t".to_string(),
        prefix: String::new(),
        after: None,
        limit: 10,
        payloads: false,
    };
    let (open, _) = shard(&src);
    assert!(open.list_step(&query).0.open.is_full(), "an open gate");
    let (mut s, _, _) = gated(&src, &held);
    let later = UtcMicros(s.clock.now().as_micros().0 + 60_000_000);
    let before = s.list_step(&query).0;
    assert!(before.open.members().is_empty());
    load_two(&mut s, (p, &keys), (q, &other), later);
    let loaded = s.list_step(&query).0;
    let mut both = vec![p, q];
    both.sort_unstable();
    assert_eq!((loaded.open.members(), loaded.timers.len()), (both, 4));
    assert!(loaded.changes > before.changes);
    // A lease gone: not open, though still loaded; a drop on its way: not open either.
    held.set(&[q]);
    let lapsed = s.list_step(&query).0;
    assert_eq!(
        (lapsed.open.members(), lapsed.changes),
        (vec![q], loaded.changes)
    );
    s.ring.control(q, Control::Drop);
    assert!(s.list_step(&query).0.open.members().is_empty());
    assert_eq!(s.take_controls(None), 1);
    assert!(
        s.list_step(&query).0.changes > loaded.changes,
        "a drop is a change"
    );
}

/// The gate alone, without a shard.
mod unit {
    use super::super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Holds every partition while `held` is set.
    struct All(AtomicBool);

    impl Holders for All {
        fn holder(&self, _: u32) -> Option<std::sync::Arc<str>> {
            self.0.load(Ordering::Relaxed).then(|| "n:1".into())
        }
    }

    fn ring() -> Ring {
        Ring::new(0, 4).expect("ring").0
    }

    #[test]
    fn an_open_gate_admits_and_fires_everything() {
        let mut g = Gate::default();
        let t = PackedTimer::new("shop", "a", b"").expect("short");
        let r = ring();
        r.control(partition_of("shop", "a"), crate::op::Control::Drop);
        assert!(!g.is_closed());
        assert_eq!(g.admit(&t, &r), Ok(()));
        assert!(g.may_fire("shop", "a", &r));
    }

    #[test]
    fn a_partition_is_open_only_loaded_and_held_and_a_lapse_unloads_it_at_its_first_fire() {
        let holders = Arc::new(All(AtomicBool::new(true)));
        let mut g = Gate::new(Some(holders.clone()));
        let t = PackedTimer::new("shop", "a", b"").expect("short");
        let p = partition_of("shop", "a");
        let r = ring();
        assert_eq!(
            g.admit(&t, &r),
            Err(Error::PartitionNotHeld { partition: p }),
            "held, not loaded"
        );
        g.loaded(p);
        g.loaded(p);
        assert!(g.is_filled(p));
        assert_eq!(g.loaded_count(), 1);
        assert_eq!(g.admit(&t, &r), Ok(()));
        assert!(g.may_fire("shop", "a", &r));
        holders.0.store(false, Ordering::Relaxed);
        assert!(g.admit(&t, &r).is_err(), "loaded, lease lapsed");
        assert!(!g.may_fire("shop", "a", &r));
        assert_eq!(g.loaded_count(), 0);
        holders.0.store(true, Ordering::Relaxed);
        assert!(
            g.admit(&t, &r).is_err(),
            "a renewal alone does not reopen it: it waits for a fresh load"
        );
        assert!(
            g.is_filled(p),
            "its timers are still in the table: purge them"
        );
        g.dropped(p);
        assert!(!g.is_filled(p) && g.admit(&t, &r).is_err());
    }

    /// A recurring schedule's missed occurrences are judged from its partition's last load on
    /// a node among others; an open gate has watched every partition from the start.
    #[test]
    fn a_partition_is_watched_from_its_last_load() {
        let open = Gate::default();
        assert_eq!(open.seen_from("shop", "a"), UtcMicros(0));
        let mut g = Gate::new(Some(Arc::new(All(AtomicBool::new(true)))));
        let (p, q) = (partition_of("shop", "a"), partition_of("shop", "b"));
        assert_ne!(p, q);
        g.loaded(p);
        g.loaded_at(p, UtcMicros(5_000_000));
        assert_eq!(g.seen_from("shop", "a"), UtcMicros(5_000_000));
        assert_eq!(
            g.seen_from("shop", "@a@17"),
            UtcMicros(5_000_000),
            "its occurrences too"
        );
        assert_eq!(g.seen_from("shop", "b"), UtcMicros(0));
        g.loaded_at(p, UtcMicros(9_000_000));
        assert_eq!(g.seen_from("shop", "@a"), UtcMicros(9_000_000));
    }
}
