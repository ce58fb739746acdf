//! A fired timer's end, walked on a shard: each way out gives the tenant's quota slot back
//! exactly once, and each state between holds it.
//!
//! The quota's count is checked after every step against what the shard holds (pending timers
//! and dead letters of the tenant), and is 0 at each end: a second release of one slot leaves
//! it at −1, a missing one at 1. What the store heard is checked too, step by step.

use super::tests::{callback_meta, shard, Told, DEAD, WAITING};
use super::*;
use crate::clock::FakeSource;
use crate::op::{reply_channel, Op};
use crate::quota::Quota;
use crate::sink::{Followup, Next};
use crate::timer::{FiredTimer, PackedTimer};
use crate::units::{UtcMicros, UtcNanos};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

/// The state byte of a callback's metadata for an attempt under way (`webhook/meta.rs`).
const IN_FLIGHT: u8 = 1;
/// And for a timer whose own firing has not come yet.
const NEW: u8 = 0;

/// A sink that answers each fire with the next of its script (`Done` once it runs out).
#[derive(Clone, Default)]
struct Script(Rc<RefCell<VecDeque<Next>>>);

impl Sink for Script {
    fn fired(&mut self, _: &FiredTimer<'_>) -> Next {
        self.0.borrow_mut().pop_front().unwrap_or(Next::Done)
    }
}

/// A shard whose tenant `t` has a quota of 10, a scripted sink and a store that notes what it
/// hears.
struct Walk {
    src: FakeSource,
    s: Shard<FakeSource>,
    quota: Arc<Quota>,
    script: Script,
    store: Told,
}

/// The delivery metadata a sink keeps a timer with, in `state`.
fn kept(state: u8) -> Next {
    Next::Reschedule {
        after: Duration::from_secs(1),
        meta: callback_meta(state),
    }
}

fn dead() -> Next {
    Next::Dead {
        meta: callback_meta(DEAD),
        fire_at: UtcMicros(1),
    }
}

fn named(key: &str) -> PackedTimer {
    PackedTimer::new("t", key, b"").expect("small")
}

impl Walk {
    fn new() -> Walk {
        let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
        let (mut s, _) = shard(&src);
        let store = Told::default();
        let script = Script::default();
        s.store = Box::new(store.clone());
        s.sinks = vec![Box::new(script.clone())];
        s.quotas = Arc::new(crate::quota::Quotas::new([("t".to_string(), 10)], 1));
        let quota = s.quotas.get("t").cloned().expect("a quota");
        Walk {
            src,
            s,
            quota,
            script,
            store,
        }
    }

    /// The quota counts what the shard holds of the tenant, `holds` of them; what the store
    /// heard since the last check is `told`.
    fn check(&self, step: &str, holds: i64, told: &[&str]) {
        let held = (self.s.pending() + self.s.deliveries.dead.len()) as i64;
        assert_eq!(
            (self.quota.pending(), held),
            (holds, holds),
            "{step}: (the quota's count, timers and dead letters held)"
        );
        let heard: Vec<String> = self.store.0.borrow_mut().drain(..).collect();
        assert_eq!(heard, told, "{step}: what the store heard");
    }

    /// Schedules `key` with a callback that has not fired yet, due in a millisecond.
    fn schedule(&mut self, key: &str) {
        let timer = PackedTimer::with_meta("t", key, &callback_meta(NEW), b"{}").expect("small");
        let at = UtcMicros(self.s.clock.now().as_micros().0 + 1_000);
        self.s.apply(Op::Schedule {
            timer,
            deadline: at,
            reply: None,
            slot: None,
            home: true,
        });
    }

    /// Fires what is due within the next `ms`, each answered by the sink with `next`.
    fn fire(&mut self, ms: u64, next: Next) {
        self.script.0.borrow_mut().push_back(next);
        self.src.advance(Duration::from_millis(ms));
        self.s.fire_due(usize::MAX, None);
        assert!(self.script.0.borrow().is_empty(), "a fire took the answer");
    }

    /// The sink's follow-up of `key` as the table holds it now.
    fn follow_up(&mut self, key: &str, next: Next) {
        let now = self.s.table.get(named(key).identity()).expect("pending");
        let timer = PackedTimer::with_meta("t", key, now.timer.meta(), b"").expect("small");
        let version = now.version;
        self.s.deliveries.inbox.send(Followup {
            timer,
            version,
            next,
        });
        self.s.follow_up(None);
    }

    fn cancel(&mut self, key: &str) {
        let (tx, _rx) = reply_channel();
        self.s.apply(Op::Cancel {
            timer: named(key),
            reply: tx,
        });
    }

    fn redrive(&mut self, key: &str) {
        let (tx, _rx) = reply_channel();
        self.s.apply(Op::DeadRedrive {
            timer: named(key),
            reply: tx,
        });
    }

    fn discard(&mut self, key: &str) {
        let (tx, _rx) = reply_channel();
        self.s.apply(Op::DeadDiscard {
            timer: named(key),
            reply: tx,
        });
    }
}

#[test]
fn delivered_after_a_retry_releases_the_slot_once() {
    let mut w = Walk::new();
    w.schedule("k");
    w.check("scheduled", 1, &["schedule t/k"]);
    w.fire(2, kept(IN_FLIGHT));
    w.check("fired, kept for delivery", 1, &["fired_kept t/k"]);
    w.follow_up("k", kept(WAITING));
    w.check("retried", 1, &["schedule t/k"]);
    w.fire(1_001, kept(IN_FLIGHT));
    w.check("fired again, kept", 1, &["schedule t/k"]);
    w.follow_up("k", Next::Done);
    w.check("delivered", 0, &["cancel t/k"]);
}

#[test]
fn dead_then_discarded_releases_the_slot_once() {
    let mut w = Walk::new();
    w.schedule("k");
    w.fire(2, kept(IN_FLIGHT));
    w.check("kept", 1, &["schedule t/k", "fired_kept t/k"]);
    w.follow_up("k", dead());
    w.check("dead: the letter holds the slot", 1, &["cancel t/k"]);
    w.discard("k");
    w.check("discarded", 0, &[]);
    w.discard("k");
    w.check(
        "discarded again: nothing to give back",
        0,
        &["answer_after_writes t/"],
    );
}

#[test]
fn dead_then_redriven_then_delivered_releases_the_slot_once() {
    let mut w = Walk::new();
    w.schedule("k");
    w.fire(2, kept(IN_FLIGHT));
    w.follow_up("k", dead());
    w.check("dead", 1, &["schedule t/k", "fired_kept t/k", "cancel t/k"]);
    w.redrive("k");
    w.check("re-driven: the timer holds the slot", 1, &["schedule t/k"]);
    w.fire(2, kept(IN_FLIGHT));
    w.check("fired, kept", 1, &["schedule t/k"]);
    w.follow_up("k", Next::Done);
    w.check("delivered", 0, &["cancel t/k"]);
}

#[test]
fn cancelled_while_kept_releases_the_slot_once() {
    let mut w = Walk::new();
    w.schedule("k");
    w.fire(2, kept(IN_FLIGHT));
    w.check("kept", 1, &["schedule t/k", "fired_kept t/k"]);
    w.cancel("k");
    w.check("cancelled", 0, &["cancel t/k"]);
    // The delivery's outcome arrives after the cancel: not the state it was meant for.
    let timer = PackedTimer::with_meta("t", "k", &callback_meta(IN_FLIGHT), b"").expect("small");
    w.s.deliveries.inbox.send(Followup {
        timer,
        version: 1,
        next: Next::Done,
    });
    w.s.follow_up(None);
    w.check("its late outcome", 0, &[]);
}

/// The delivery runs out of attempts at a fire (the sink answers `Dead` there): as the
/// timer's own firing, and as a step after a retry; each letter is then discarded.
#[test]
fn dead_at_a_fire_for_want_of_attempts_then_discarded_releases_the_slot_once() {
    let mut w = Walk::new();
    w.schedule("own");
    w.fire(2, dead());
    w.check(
        "dead at its own firing",
        1,
        &["schedule t/own", "fired t/own", "cancel t/own"],
    );
    w.discard("own");
    w.check("discarded", 0, &[]);
    w.schedule("step");
    w.fire(2, kept(IN_FLIGHT));
    w.follow_up("step", kept(WAITING));
    w.check(
        "retried",
        1,
        &["schedule t/step", "fired_kept t/step", "schedule t/step"],
    );
    w.fire(1_001, dead());
    w.check("dead at a step's fire", 1, &["cancel t/step"]);
    w.discard("step");
    w.check("discarded", 0, &[]);
}

/// Retired at the fire: done, or kept with metadata a timer cannot hold.
#[test]
fn retired_at_its_fire_releases_the_slot_once() {
    let mut w = Walk::new();
    w.schedule("done");
    w.fire(2, Next::Done);
    w.check("retired", 0, &["schedule t/done", "fired t/done"]);
    w.schedule("big");
    w.fire(
        2,
        Next::Reschedule {
            after: Duration::from_secs(1),
            meta: vec![0; 70_000],
        },
    );
    w.check("unkeepable: retired", 0, &["schedule t/big", "fired t/big"]);
}

/// A key that dies again while its letter is kept: the later letter replaces the earlier,
/// whose slot goes back; the later one's goes back when it is discarded.
#[test]
fn a_letter_replaced_by_a_later_one_releases_its_slot_once() {
    let mut w = Walk::new();
    w.schedule("k");
    w.fire(2, dead());
    w.check("dead", 1, &["schedule t/k", "fired t/k", "cancel t/k"]);
    w.schedule("k");
    w.check("the key again, beside its letter", 2, &["schedule t/k"]);
    w.fire(2, dead());
    w.check("dead again: one letter", 1, &["fired t/k", "cancel t/k"]);
    w.discard("k");
    w.check("discarded", 0, &[]);
}

/// Every slot a timer or a dead letter gives back goes through `fate::release`: no other file
/// of the shard gives one back, so a new way out cannot release a slot on its own.
#[test]
fn only_the_timers_end_gives_a_quota_slot_back() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/shard");
    // Spelled in two parts, so that this file does not hold it.
    let call = [".rel", "ease()"].concat();
    let mut files = 0;
    for entry in std::fs::read_dir(dir).expect("the shard's sources") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).expect("readable");
        let calls = text.matches(&call).count();
        let expected = usize::from(path.ends_with("fate.rs"));
        assert_eq!(calls, expected, "{}: quota releases", path.display());
    }
    assert!(files > 10, "read the shard's files");
}

/// A recurring schedule's timer (`@k`, its record as payload) due at its first occurrence.
fn put_schedule(w: &mut Walk, def: &str) -> u64 {
    use crate::schedule::{Limits, ScheduleRecord};
    let now = w.s.clock.now().as_micros();
    let (r, s) = ScheduleRecord::create(def, now, &Limits::default()).expect("valid");
    let at = r.armed_at(&s, now).expect("an occurrence");
    let timer = PackedTimer::new("t", "@k", &r.encode()).expect("small");
    w.s.apply(Op::Schedule {
        timer,
        deadline: at,
        reply: None,
        slot: None,
        home: true,
    });
    at.0
}

/// Fires what is due within the next `ms` without a sink's answer (a schedule's own timer
/// asks none).
fn fire_schedule(w: &mut Walk, ms: u64) {
    w.src.advance(Duration::from_millis(ms));
    w.s.fire_due(usize::MAX, None);
}

#[test]
fn a_schedule_arms_each_occurrence_before_itself_and_its_end_releases_the_slot_once() {
    let mut w = Walk::new();
    let first = put_schedule(&mut w, r#"{"every_ms": 1000, "max_occurrences": 2}"#);
    w.check("scheduled", 1, &["schedule t/@k"]);
    fire_schedule(&mut w, 1_001);
    let o1 = format!("schedule t/@k@{first}");
    w.check(
        "fired: its occurrence, then itself",
        2,
        &[&o1, "schedule t/@k"],
    );
    w.fire(0, Next::Done);
    w.check(
        "the occurrence delivered",
        1,
        &[&format!("fired t/@k@{first}")],
    );
    fire_schedule(&mut w, 1_000);
    let o2 = format!("schedule t/@k@{}", first + 1_000_000);
    w.check(
        "the last occurrence: the schedule ends",
        1,
        &[&o2, "cancel t/@k"],
    );
    w.fire(0, Next::Done);
    w.check(
        "all delivered",
        0,
        &[&format!("fired t/@k@{}", first + 1_000_000)],
    );
}

#[test]
fn a_schedule_whose_record_does_not_read_is_removed_and_gives_its_slot_back() {
    let mut w = Walk::new();
    let at = UtcMicros(w.s.clock.now().as_micros().0 + 1_000);
    w.s.apply(Op::Schedule {
        timer: PackedTimer::new("t", "@k", b"{\"order\": 1}").expect("small"),
        deadline: at,
        reply: None,
        slot: None,
        home: true,
    });
    w.check("scheduled", 1, &["schedule t/@k"]);
    fire_schedule(&mut w, 2);
    w.check("removed", 0, &["cancel t/@k"]);
}
