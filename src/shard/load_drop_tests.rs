//! A shard's partitions loaded and dropped at run time a slice at a time: the purge, the load's
//! chunks, what falls due while a partition loads, and a drop's dead letters.

use super::gate::tests::{dead_keys, gated, get, load_two, schedule, timer, two, Held};
use super::tests::{callback_meta, DEAD};
use super::*;
use crate::clock::FakeSource;
use crate::error::Error;
use crate::op::{reply_channel, Control, LoadedTimer, Op};
use crate::partition::partition_of;
use crate::timer::PackedTimer;
use crate::units::{UtcMicros, UtcNanos};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A purge stopped by its slice goes on at the next pass; meanwhile the partition is closed
/// (no op admitted, no follow-up applied, which could re-arm one of its timers out of the
/// purge's reach), the other partition is served, and the load waiting on it applies only once
/// every old timer is gone.
#[test]
fn a_purge_goes_on_in_slices_and_its_partition_stays_closed_until_it_ends() {
    use crate::runtime::cooperate::Slice;
    use crate::sink::{Followup, Next};
    use crate::wheel::PURGE_CHECK;
    let n = 3 * PURGE_CHECK as usize;
    let (src, held, (p, keys), (q, other)) = two(n);
    let (mut s, store, quota) = gated(&src, &held);
    let later = UtcMicros(s.clock.now().as_micros().0 + 60_000_000);
    load_two(&mut s, (p, &keys), (q, &other), later);
    assert_eq!(quota.pending(), n as i64 + 1);
    let over = || {
        let slice = Slice::begin();
        while !slice.is_over() {
            std::hint::spin_loop();
        }
        Some(slice)
    };
    s.ring.control(p, Control::Load(Vec::new(), 0));
    assert_eq!(s.take_controls(over()), 1, "under way");
    assert!(s.purging.is_some());
    let left = s.table.len();
    assert!(left > 1 && left < n + 1, "stopped part way: {left} left");
    assert_eq!(
        get(&mut s, &keys[n - 1]),
        Err(Error::PartitionNotHeld { partition: p })
    );
    assert!(schedule(&mut s, &keys[0], later).is_err());
    assert_eq!(get(&mut s, &other), Ok(true), "q is served meanwhile");
    s.deliveries.inbox.send(Followup {
        timer: timer(&keys[n - 1]),
        version: 5,
        next: Next::Reschedule {
            after: Duration::from_secs(1),
            meta: Vec::new(),
        },
    });
    assert_eq!(s.follow_up(None), 1);
    assert!(store.0.borrow().is_empty(), "the follow-up was not applied");
    let mut passes = 1;
    while s.purging.is_some() {
        s.take_controls(over());
        passes += 1;
        assert!(passes <= n, "the purge ends");
    }
    assert!(passes >= 3, "{passes} passes");
    assert_eq!((s.table.len(), quota.pending()), (1, 1));
    assert_eq!(get(&mut s, &keys[0]), Ok(false), "loaded (empty) and open");
    assert_eq!(schedule(&mut s, &keys[0], later), Ok(()));
}

/// A slice already over: a pass given it does the least it may before it looks.
fn over() -> Option<crate::runtime::cooperate::Slice> {
    let slice = crate::runtime::cooperate::Slice::begin();
    while !slice.is_over() {
        std::hint::spin_loop();
    }
    Some(slice)
}

/// A record of `key` due at `at`, a dead letter when `dead`.
fn record(key: &str, at: UtcMicros, dead: bool) -> LoadedTimer {
    let timer = if dead {
        PackedTimer::with_meta("t", key, &callback_meta(DEAD), b"{}").expect("small")
    } else {
        timer(key)
    };
    LoadedTimer {
        timer,
        version: 5,
        deadline: at,
    }
}

/// A load handed a slice that is over inserts one chunk of records a pass: the partition
/// stays closed (its ops refused) until the last is in, a load of another partition that
/// arrives meanwhile waits on the ring until then, and in the end every record is in once,
/// those the table cannot take left out, and the quota and the gauges count what is in.
#[test]
fn a_load_goes_in_a_chunk_a_pass_and_its_partition_opens_once_every_record_is_in() {
    use super::load_drop::LOAD_CHECK;
    let n = 4 * LOAD_CHECK + 10;
    let (src, held, (p, keys), (q, other)) = two(n);
    let (mut s, _, quota) = gated(&src, &held);
    let later = UtcMicros(s.clock.now().as_micros().0 + 60_000_000);
    // The last key is a dead letter; two deadlines lie past the wheel's range.
    let out_of_range = [&keys[7], &keys[n - 2]];
    let records = keys
        .iter()
        .map(|k| match k {
            k if out_of_range.contains(&k) => record(k, UtcMicros(u64::MAX), false),
            k if *k == keys[n - 1] => record(k, UtcMicros(1), true),
            k => record(k, later, false),
        })
        .collect();
    s.ring.control(p, Control::Load(records, 0));
    let refused = Err(Error::PartitionNotHeld { partition: p });
    let mut passes = 0;
    loop {
        let before = s.table.len();
        assert_eq!(s.take_controls(over()), 1);
        passes += 1;
        if s.purging.is_none() {
            break;
        }
        assert!(
            s.table.len() > before && s.table.len() < n - 3,
            "part of the records in after pass {passes}: {}",
            s.table.len()
        );
        assert_eq!(get(&mut s, &keys[0]), refused, "closed while it loads");
        assert_eq!(s.gate.loaded_count(), 0);
        if passes == 1 {
            s.ring
                .control(q, Control::Load(vec![record(&other, later, false)], 0));
        }
        assert!(get(&mut s, &other).is_err(), "q waits behind p's load");
        assert!(passes <= n, "the load ends");
    }
    assert_eq!(passes, n.div_ceil(LOAD_CHECK));
    assert_eq!(s.table.len(), n - 3, "every timer in the range, once");
    for k in &keys[..n - 1] {
        assert_eq!(get(&mut s, k), Ok(!out_of_range.contains(&k)), "{k}");
    }
    assert_eq!(dead_keys(&mut s), [keys[n - 1].clone()]);
    assert_eq!(quota.pending(), n as i64 - 2, "the refused take no slot");
    assert_eq!(s.metrics.pending.load(Ordering::Relaxed), n as u64 - 3);
    assert_eq!(s.metrics.partitions_loaded.load(Ordering::Relaxed), 1);
    assert!(get(&mut s, &other).is_err(), "q's load is still to take");
    assert_eq!(s.take_controls(None), 1);
    assert_eq!(get(&mut s, &other), Ok(true));
    assert_eq!(s.metrics.partitions_loaded.load(Ordering::Relaxed), 2);
}

/// A record that is due while its partition loads (due on arrival, or falling due after it
/// went in) is neither fired nor dropped: it waits out of the wheel and goes in as the
/// partition opens, then fires once.
#[test]
fn a_record_due_while_its_partition_loads_fires_once_the_partition_is_open() {
    use super::load_drop::LOAD_CHECK;
    let n = 3 * LOAD_CHECK;
    let (src, held, (p, keys), _) = two(n);
    let (mut s, store, quota) = gated(&src, &held);
    let now = s.clock.now().as_micros().0;
    let later = UtcMicros(now + 60_000_000);
    let mut records = vec![
        record(&keys[0], UtcMicros(now + 1_000), false),
        record(&keys[1], UtcMicros(now - 1_000_000), false),
    ];
    records.extend(keys[2..].iter().map(|k| record(k, later, false)));
    s.ring.control(p, Control::Load(records, 0));
    assert_eq!(s.take_controls(over()), 1);
    let soon = s.table.get(timer(&keys[0]).identity()).map(|v| v.deadline);
    assert_eq!(soon, Some(UtcMicros(now + 1_000)), "in the table, due soon");
    assert!(
        s.table.get(timer(&keys[1]).identity()).is_none(),
        "due: set aside"
    );
    src.advance(Duration::from_millis(2));
    while s.purging.is_some() {
        s.fire_due(usize::MAX, None);
        assert!(
            store.0.borrow().is_empty(),
            "nothing of p fires while it loads"
        );
        s.take_controls(over());
    }
    assert_eq!(s.metrics.unfired_total.load(Ordering::Relaxed), 0);
    assert_eq!((s.table.len(), quota.pending()), (n, n as i64));
    assert_eq!(get(&mut s, &keys[0]), Ok(true));
    assert_eq!(s.fire_due(usize::MAX, None).0, 2);
    assert_eq!(
        *store.0.borrow(),
        [
            format!("fired t/{}", keys[1]),
            format!("fired t/{}", keys[0])
        ],
        "each fired once, in deadline order"
    );
    assert_eq!((s.table.len(), quota.pending()), (n - 2, n as i64 - 2));
}

/// A drop of a partition with many dead letters takes them out a slice at a time: each
/// leaves once, its quota slot and its dead-letter count given back once, a letter of
/// another partition discarded between two slices is not given back again, and the others
/// stay.
#[test]
fn a_drop_s_dead_letters_leave_in_slices_each_given_back_once() {
    use super::dead::PURGE_CHECK;
    let n = 2 * PURGE_CHECK + 10;
    let (src, held, (p, keys), (q, other)) = two(n);
    let second = (0..)
        .map(|i| format!("q{i}"))
        .find(|k| partition_of("t", k) == q)
        .unwrap_or_default();
    let (mut s, _, quota) = gated(&src, &held);
    let letters: Vec<LoadedTimer> = keys.iter().map(|k| record(k, UtcMicros(1), true)).collect();
    s.ring.control(p, Control::Load(letters, 0));
    let q_letters = vec![
        record(&other, UtcMicros(1), true),
        record(&second, UtcMicros(1), true),
    ];
    s.ring.control(q, Control::Load(q_letters, 0));
    assert_eq!(s.take_controls(None), 2);
    let dead = s.metrics.webhooks.tenant("t");
    let counted = || dead.dead.load(Ordering::Relaxed);
    assert_eq!((quota.pending(), counted()), (n as i64 + 2, n as i64 + 2));
    s.ring.control(p, Control::Drop);
    let mut passes = 0;
    while passes == 0 || s.purging.is_some() {
        assert_eq!(s.take_controls(over()), 1);
        passes += 1;
        let left = s.deliveries.dead.len();
        if s.purging.is_some() {
            assert!(left > 2, "part of them left after pass {passes}: {left}");
        }
        if passes == 1 {
            let (tx, mut rx) = reply_channel();
            s.apply(Op::DeadDiscard {
                timer: timer(&second),
                reply: tx,
            });
            assert!(matches!(rx.try_recv(), Ok(Some(Ok(_)))), "q is served");
        }
        assert!(passes <= n, "the purge ends");
    }
    assert!(passes >= 3, "{passes} passes");
    assert_eq!(dead_keys(&mut s), [other]);
    assert_eq!((quota.pending(), counted()), (1, 1));
    assert_eq!(
        get(&mut s, &keys[0]),
        Err(Error::PartitionNotHeld { partition: p })
    );
    assert_eq!(s.gate.loaded_count(), 1);
}

/// The CPU time this thread has run.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "the thread's CPU clock");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The longest step on a shard's thread while a rebalance hands it a million records across
/// 512 partitions: the whole load in one step (no slice: how it went before), against the
/// load in 200 µs slices, as a shard sharing its thread takes it now. Each step's wall time
/// and the thread's CPU time in it (the difference: the thread was preempted). Three rounds,
/// a fresh shard each time.
///
/// `cargo test --release --lib load_steps_figure -- --ignored --nocapture`
#[test]
#[ignore = "a figure, not a check: run it with --ignored --nocapture"]
fn load_steps_figure() {
    use crate::runtime::cooperate::Slice;
    use crate::wheel::TimerTable;
    use std::collections::BTreeMap;
    use std::time::Instant;
    const RECORDS: usize = 1_000_000;
    const SPREAD: u32 = 512;
    let mut by_partition: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut found = 0;
    for i in 0.. {
        let k = format!("order-{i:08}");
        let p = partition_of("t", &k);
        if p < SPREAD {
            by_partition.entry(p).or_default().push(k);
            found += 1;
            if found == RECORDS {
                break;
            }
        }
    }
    let held = Arc::new(Held::default());
    held.set(&(0..SPREAD).collect::<Vec<_>>());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for round in 0..3 {
        let mut line = format!("round {round}:");
        for sliced in [false, true] {
            let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
            let (mut s, _, _) = gated(&src, &held);
            let now = s.clock.now().as_micros().0;
            s.table = TimerTable::new(UtcMicros(now), 2 * RECORDS);
            let mut i = 0u64;
            for (&p, keys) in &by_partition {
                let records = keys
                    .iter()
                    .map(|k| {
                        i += 1;
                        let at = UtcMicros(now + 60_000_000 + i * 7_919 % 3_600_000_000);
                        record(k, at, false)
                    })
                    .collect();
                s.ring.control(p, Control::Load(records, 0));
            }
            let (mut wall, mut cpu, mut total, mut steps, mut over_ms) =
                (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0, 0);
            loop {
                let (t, c) = (Instant::now(), thread_cpu());
                s.take_controls(sliced.then(Slice::begin));
                let (took, ran) = (t.elapsed(), thread_cpu().saturating_sub(c));
                (wall, cpu, total) = (wall.max(took), cpu.max(ran), total + took);
                steps += 1;
                over_ms += usize::from(took > Duration::from_millis(1));
                if s.purging.is_none() {
                    break;
                }
            }
            assert_eq!(s.table.len(), RECORDS);
            assert_eq!(s.gate.loaded_count(), u64::from(SPREAD));
            if sliced {
                line += &format!(
                    " in {steps} slices: longest {:.3} ms wall ({:.3} ms CPU), \
                     {over_ms} over 1 ms, all {:.1} ms",
                    ms(wall),
                    ms(cpu),
                    ms(total)
                );
            } else {
                line += &format!(" one step {:.1} ms ({:.1} ms CPU);", ms(total), ms(cpu));
            }
        }
        println!("{line}");
    }
}
