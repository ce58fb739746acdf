//! A message's life on one shard, on a fake clock: it holds its tenant's quota slot from its
//! fire until its ack (given back once), comes back ready with one more receive when its lease
//! passes, and becomes a dead letter, still holding its slot, after `max_receives`.

use crate::clock::FakeSource;
use crate::op::{reply_channel, Op};
use crate::queue::{MessageState, PullQueues, QueueSettings, Received, Settled, Settlement};
use crate::shard::tests::shard;
use crate::timer::PackedTimer;
use crate::units::{UtcMicros, UtcNanos};
use std::sync::Arc;
use std::time::Duration;

struct Q {
    src: FakeSource,
    s: crate::shard::Shard<FakeSource>,
    quota: Arc<crate::quota::Quota>,
}

impl Q {
    fn new(max_receives: u32) -> Q {
        Q::with(max_receives.into())
    }

    fn with(settings: QueueSettings) -> Q {
        let src = FakeSource::new(UtcNanos(1_750_000_000_000_000_000), 2_900);
        let (mut s, _) = shard(&src);
        s.quotas = Arc::new(crate::quota::Quotas::new([("t".to_string(), 10)], 1));
        let shared = Arc::new(PullQueues::new([("t".to_string(), settings)]));
        s.queues = crate::shard::ShardQueues::new(shared);
        let quota = s.quotas.get("t").cloned().expect("a quota");
        Q { src, s, quota }
    }

    fn schedule(&mut self, key: &str) {
        self.put(key, b"{\"n\":1}", 1_000);
    }

    /// A plain timer under `key`, due `after_us` from now (a PUT through the timer routes).
    fn put(&mut self, key: &str, payload: &[u8], after_us: u64) {
        let timer = PackedTimer::new("t", key, payload).expect("small");
        let at = UtcMicros(self.s.clock.now().as_micros().0 + after_us);
        self.s.apply(Op::Schedule {
            timer,
            deadline: at,
            reply: None,
            slot: None,
            home: true,
        });
    }

    fn pass(&mut self, ms: u64) {
        self.src.advance(Duration::from_millis(ms));
        self.s.fire_due(usize::MAX, None);
    }

    fn receive(&mut self, visibility_ms: u64) -> Vec<Received> {
        let (tx, mut rx) = reply_channel();
        self.s.apply(Op::QueueReceive {
            tenant: "t".into(),
            max: 10,
            visibility_ms,
            reply: tx,
        });
        rx.try_recv().expect("answered").expect("sent").expect("ok")
    }

    fn settle(&mut self, m: &Received, how: Settlement) -> Settled {
        let (tx, mut rx) = reply_channel();
        self.s.apply(Op::QueueSettle {
            timer: PackedTimer::new("t", &m.key, b"").expect("small"),
            version: m.version,
            lease: m.lease,
            how,
            reply: tx,
        });
        rx.try_recv().expect("answered").expect("sent").expect("ok")
    }
}

#[test]
fn a_message_holds_its_slot_until_its_ack_which_gives_it_back_once() {
    let mut q = Q::new(5);
    q.schedule("a");
    assert_eq!(q.quota.pending(), 1);
    assert!(q.receive(1000).is_empty(), "not fired yet");
    q.pass(2);
    assert_eq!(
        (q.quota.pending(), q.s.pending()),
        (1, 1),
        "queued: still held"
    );
    let got = q.receive(1000);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].key.as_str(), got[0].receive_count), ("a", 1));
    assert!(q.receive(1000).is_empty(), "leased: not received twice");
    assert_eq!(q.settle(&got[0], Settlement::Ack), Settled::Done);
    assert_eq!(
        (q.quota.pending(), q.s.pending()),
        (0, 0),
        "acked: released"
    );
    assert_eq!(q.settle(&got[0], Settlement::Ack), Settled::LeaseExpired);
    assert_eq!(q.quota.pending(), 0, "a second ack releases nothing");
}

#[test]
fn a_lease_that_passes_brings_it_back_and_the_last_makes_a_dead_letter() {
    let mut q = Q::new(2);
    q.schedule("a");
    q.pass(2);
    let first = q.receive(50);
    q.pass(60);
    assert_eq!(
        q.settle(&first[0], Settlement::Ack),
        Settled::LeaseExpired,
        "too late"
    );
    let second = q.receive(50);
    assert_eq!(second[0].receive_count, 2);
    q.pass(60);
    assert!(q.receive(50).is_empty(), "two receives: dead");
    assert!(q.s.deliveries.dead.get("t", "a").is_some());
    assert_eq!(
        (q.quota.pending(), q.s.pending()),
        (1, 0),
        "the letter holds the slot"
    );
}

#[test]
fn a_nack_with_a_delay_hides_it_until_then_and_an_extend_keeps_the_receipt() {
    let mut q = Q::new(5);
    q.schedule("a");
    q.pass(2);
    let first = q.receive(50);
    assert_eq!(
        q.settle(&first[0], Settlement::Extend { visibility_ms: 500 }),
        Settled::Done
    );
    q.pass(100);
    assert!(
        q.receive(50).is_empty(),
        "extended past its first visibility"
    );
    assert_eq!(
        q.settle(&first[0], Settlement::Nack { delay_ms: 200 }),
        Settled::Done
    );
    assert!(q.receive(50).is_empty(), "delayed");
    q.pass(210);
    let again = q.receive(50);
    assert_eq!((again.len(), again[0].receive_count), (1, 2));
    let c = q.s.queue_lengths("t");
    assert_eq!((c.ready, c.in_flight, c.delayed), (0, 1, 0));
}

#[test]
fn a_message_past_its_tenants_retention_at_its_leases_end_is_a_dead_letter_and_counted() {
    let mut q = Q::with(QueueSettings {
        retention: Duration::from_secs(2),
        ..QueueSettings::default()
    });
    q.schedule("a");
    q.schedule("b");
    q.pass(2);
    assert_eq!(q.s.queue_lengths("t").ready, 2);
    q.pass(1_000);
    assert_eq!(q.s.queue_lengths("t").ready, 2, "not yet 2 s old");
    // Received: a lease that ends after the retention makes each a dead letter.
    assert_eq!(q.receive(1_500).len(), 2);
    q.pass(1_100);
    let c = q.s.queue_lengths("t");
    assert_eq!((c.ready, c.in_flight), (0, 2), "both leased");
    q.pass(500);
    let c = q.s.queue_lengths("t");
    assert_eq!((c.ready, c.in_flight), (0, 0), "both dead, none ready");
    assert_eq!(q.quota.pending(), 2, "a dead letter keeps its slot");
    let f = q.s.queues.shared.figures("t").expect("figures");
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!((get(&f.received), get(&f.expired), get(&f.dead)), (2, 2, 2));
}

#[test]
fn the_waiting_receives_of_a_tenant_are_capped_and_freed_as_they_end() {
    let shared = Arc::new(PullQueues::new([
        (
            "t".to_string(),
            QueueSettings {
                max_waiting: 2,
                ..QueueSettings::default()
            },
        ),
        ("u".to_string(), QueueSettings::default()),
    ]));
    let a = shared.start_waiting("t").expect("first");
    let b = shared.start_waiting("t").expect("second");
    assert_eq!(shared.start_waiting("t").err(), Some(2));
    assert!(shared.start_waiting("u").is_ok(), "another tenant's cap");
    assert_eq!(shared.waiting("t"), 2);
    drop(a);
    let c = shared.start_waiting("t").expect("a place freed");
    drop((b, c));
    assert_eq!(shared.waiting("t"), 0);
    assert!(shared.start_waiting("none").is_err(), "no queue");
}

/// The messages of `keys` in the table, by state (ready, leased, delayed): what the index's
/// lengths must say, counted without the index.
fn in_table(q: &Q, keys: &[&str]) -> (u64, u64, u64) {
    let mut c = (0, 0, 0);
    for key in keys {
        match super::message_at(&q.s.table, "t", key).map(|(m, ..)| m.state) {
            Some(MessageState::Ready) => c.0 += 1,
            Some(MessageState::Leased) => c.1 += 1,
            Some(MessageState::Delayed) => c.2 += 1,
            None => {}
        }
    }
    c
}

/// The figures `GET /v1/queues` and a scrape read are the index's lengths, no walk: the
/// queue's own transitions must keep them equal to the table's messages at every step (an
/// acked key left in the leased set would count as in flight).
#[test]
fn a_scrapes_lengths_follow_each_transition_as_a_walk_counts_them() {
    let mut q = Q::new(5);
    let both = |q: &mut Q| {
        let l = q.s.queue_lengths("t");
        let lengths = (l.ready, l.in_flight, l.delayed);
        assert_eq!(
            lengths,
            in_table(q, &["a", "b", "c"]),
            "the lengths and the table disagree"
        );
        lengths
    };
    for key in ["a", "b", "c"] {
        q.schedule(key);
    }
    q.pass(2);
    assert_eq!(both(&mut q), (3, 0, 0));
    let got = q.receive(50);
    assert_eq!(both(&mut q), (0, 3, 0));
    assert_eq!(q.settle(&got[0], Settlement::Ack), Settled::Done);
    assert_eq!(both(&mut q), (0, 2, 0), "the acked one is gone");
    let delay = Settlement::Nack { delay_ms: 200 };
    assert_eq!(q.settle(&got[1], delay), Settled::Done);
    assert_eq!(both(&mut q), (0, 1, 1), "one leased, one delayed");
    assert_eq!(
        q.settle(&got[1], Settlement::Ack),
        Settled::LeaseExpired,
        "nacked: its receipt is spent"
    );
    q.pass(60);
    assert_eq!(both(&mut q), (1, 0, 1), "the lease ended: ready again");
    q.pass(200);
    assert_eq!(both(&mut q), (2, 0, 0), "the delay ended");
    let again = q.receive(50);
    assert_eq!(again.len(), 2);
    let nack = Settlement::Nack { delay_ms: 0 };
    assert_eq!(q.settle(&again[0], nack), Settled::Done);
    assert_eq!(both(&mut q), (1, 1, 0), "nacked at once: ready");
}

/// A message that leaves the queue otherwise than through it (deleted or replaced through
/// the timer routes, in any state, or a ready one whose retention ends) leaves the counts at
/// once, with no walk; a receive then passes its stale entry and hands out only the live ones.
#[test]
fn the_counts_follow_messages_deleted_replaced_or_expired_without_a_walk() {
    let keys = ["a", "b", "c", "d", "e", "f"];
    let mut q = Q::with(QueueSettings {
        retention: Duration::from_millis(500),
        ..QueueSettings::from(5)
    });
    let counts = |q: &mut Q| {
        let l = q.s.queue_lengths("t");
        let lengths = (l.ready, l.in_flight, l.delayed);
        assert_eq!(
            lengths,
            in_table(q, &keys),
            "the lengths and the table disagree"
        );
        lengths
    };
    let cancel = |q: &mut Q, key: &str| {
        let (tx, _rx) = reply_channel();
        let timer = PackedTimer::new("t", key, b"").expect("small");
        q.s.apply(Op::Cancel { timer, reply: tx });
    };
    let replace = |q: &mut Q, key: &str| q.put(key, b"{}", 60_000_000);
    for key in ["a", "b", "c", "d"] {
        q.schedule(key);
    }
    q.pass(2);
    assert_eq!(counts(&mut q), (4, 0, 0));
    cancel(&mut q, "a");
    assert_eq!(counts(&mut q), (3, 0, 0), "a ready one deleted");
    replace(&mut q, "b");
    assert_eq!(counts(&mut q), (2, 0, 0), "a ready one replaced by a timer");
    let got = q.receive(10_000);
    let mut names: Vec<&str> = got.iter().map(|m| m.key.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["c", "d"], "the receive passes the stale entries");
    assert_eq!(counts(&mut q), (0, 2, 0));
    replace(&mut q, "c");
    assert_eq!(counts(&mut q), (0, 1, 0), "a leased one replaced");
    cancel(&mut q, "d");
    assert_eq!(counts(&mut q), (0, 0, 0), "a leased one deleted");
    q.schedule("e");
    q.pass(2);
    let e = q.receive(10_000);
    assert_eq!(
        q.settle(&e[0], Settlement::Nack { delay_ms: 10_000 }),
        Settled::Done
    );
    assert_eq!(counts(&mut q), (0, 0, 1));
    cancel(&mut q, "e");
    assert_eq!(counts(&mut q), (0, 0, 0), "a delayed one deleted");
    // A ready message whose retention ends becomes a dead letter: out of the counts.
    q.schedule("f");
    q.pass(2);
    assert_eq!(counts(&mut q), (1, 0, 0));
    q.pass(600);
    assert_eq!(counts(&mut q), (0, 0, 0), "a ready one past its retention");
    // Nothing left counted stale: a new message counts once, and is received.
    q.schedule("a");
    q.pass(2);
    assert_eq!(counts(&mut q), (1, 0, 0));
    assert_eq!(q.receive(10_000).len(), 1);
    assert_eq!(counts(&mut q), (0, 1, 0));
}
