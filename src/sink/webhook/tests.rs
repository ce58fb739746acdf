//! The sink without a network: the host's one slot is taken, so every delivery is held back,
//! and what is tested is the cap's queue as the shard drives it.

use super::*;
use crate::units::{UtcMicros, UtcNanos};
use crate::wheel::table::PackedTimer;

fn held_sink() -> (WebhookSink, Arc<ShardMetrics>) {
    let tls = settings::tls_config(None).expect("Mozilla's roots");
    let mut s = WebhookSettings::new(tls);
    s.max_in_flight_per_host = 1;
    let metrics = Arc::new(ShardMetrics::default());
    let sink = WebhookSink::new(0, Arc::new(s), metrics.clone(), Box::new(|| {}));
    sink.ctx.per_host.borrow_mut().insert(target(), 1);
    (sink, metrics)
}

fn target() -> Target {
    Target::parse(URL).expect("a URL").0
}

const URL: &str = "http://hooks.example/x";

fn meta() -> Vec<u8> {
    Delivery::new(URL.into(), settings::DEFAULT_RETRY, 1).encode()
}

fn fire<'a>(tenant: &'a str, key: &'a str, version: u64, meta: &'a [u8]) -> FiredTimer<'a> {
    FiredTimer {
        shard: 0,
        tenant,
        key,
        version,
        deadline: UtcMicros(1),
        fired_at: UtcNanos(1_000),
        meta,
        payload: b"",
    }
}

#[test]
fn safety_net_refires_of_a_held_timer_keep_one_queue_entry() {
    let (mut sink, metrics) = held_sink();
    let mut m = meta();
    for _ in 0..50 {
        for k in 0..20 {
            let key = format!("k{k}");
            match sink.fired(&fire("t", &key, 7, &m)) {
                Next::Reschedule { meta, .. } => m = meta,
                other => panic!("not held back: {other:?}"),
            }
        }
    }
    assert_eq!(sink.ctx.queues.borrow().tickets(), 20);
    assert_eq!(sink.ctx.queues.borrow().len(), 20);
    let t = metrics.webhooks.tenant("t");
    assert_eq!(t.held_back.load(std::sync::atomic::Ordering::Relaxed), 20);
}

#[test]
fn a_cancelled_or_replaced_held_timer_leaves_its_queue() {
    let (mut sink, metrics) = held_sink();
    let m = meta();
    for k in ["a", "b"] {
        assert!(matches!(
            sink.fired(&fire("t", k, 1, &m)),
            Next::Reschedule { .. }
        ));
    }
    let cancelled = PackedTimer::with_meta("t", "a", b"", b"").expect("short");
    sink.forget(&cancelled);
    let t = metrics.webhooks.tenant("t");
    assert_eq!(sink.ctx.queues.borrow().len(), 1);
    assert_eq!(t.held_back.load(std::sync::atomic::Ordering::Relaxed), 1);
    // The only one left to wake is b.
    let next = sink.ctx.queues.borrow_mut().pop(&Cap::Host(target()));
    assert_eq!(
        next.map(|h| h.timer.key().to_string()).as_deref(),
        Some("b")
    );
}

#[test]
fn a_held_timers_safety_net_grows_with_the_queue_ahead_up_to_a_minute() {
    let tls = settings::tls_config(None).expect("Mozilla's roots");
    let mut s = WebhookSettings::new(tls);
    s.timeout = Duration::from_secs(2);
    let turn = Duration::from_secs(3);
    let jitter = Duration::from_secs(1);
    for draw in [0, 999_999, u64::MAX] {
        let first = held_back_for(&s, draw, 0, 4);
        assert!(first >= turn && first <= turn + jitter, "{first:?}");
        let tenth = held_back_for(&s, draw, 39, 4);
        assert!(
            tenth >= turn * 10 && tenth <= turn * 10 + jitter,
            "{tenth:?}"
        );
        let far = held_back_for(&s, draw, usize::MAX, 0);
        assert!(
            far >= HELD_BACK_MAX && far <= HELD_BACK_MAX + jitter,
            "{far:?}"
        );
    }
}
