//! The sink without a network: the host's one slot is taken, so every delivery is held back,
//! and what is tested is the cap's queue as the shard drives it.

use super::*;
use crate::timer::PackedTimer;
use crate::units::{UtcMicros, UtcNanos};

/// Settings whose top-level allow-list permits [`URL`].
fn allowing() -> WebhookSettings {
    let tls = settings::tls_config(None).expect("Mozilla's roots");
    let mut s = WebhookSettings::new(tls);
    s.allow = allow::AllowList::new(&["http://hooks.example/".into()], &[]).expect("valid");
    s
}

fn held_sink() -> (WebhookSink, Arc<ShardMetrics>) {
    let mut s = allowing();
    s.max_in_flight_per_host = 1;
    let metrics = Arc::new(ShardMetrics::default());
    let sink = WebhookSink::new(0, Arc::new(s), metrics.clone(), Followups::default());
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
        firing: firing_of(meta),
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
    assert_eq!(sink.ctx.queues.borrow().len(), 20);
    assert_eq!(sink.ctx.queues.borrow().waiting(&Cap::Host(target())), 20);
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

/// A held timer whose safety net fires while the other cap is the full one moves to that
/// cap's queue: still one timer held back, in the queues and in the tenant's gauge.
#[test]
fn a_held_timer_moved_to_the_other_cap_is_still_counted_once() {
    let (mut sink, metrics) = held_sink();
    let m = match sink.fired(&fire("t", "a", 1, &meta())) {
        Next::Reschedule { meta, .. } => meta,
        other => panic!("not held back: {other:?}"),
    };
    let gauge = || {
        metrics
            .webhooks
            .tenant("t")
            .held_back
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(gauge(), 1);
    // The host has room now, and the tenant is at its cap when a's safety net fires.
    sink.ctx.per_host.borrow_mut().remove(&target());
    let tenant_cap = sink.ctx.settings.max_in_flight_per_tenant;
    sink.ctx
        .per_tenant
        .borrow_mut()
        .insert("t".into(), tenant_cap);
    held_again(&mut sink, "t", "a", &m);
    let q = sink.ctx.queues.borrow();
    assert_eq!(q.len(), 1);
    assert_eq!(q.waiting(&Cap::Tenant("t".into())), 1);
    assert_eq!(q.waiting(&Cap::Host(target())), 0);
    assert_eq!(gauge(), 1, "one timer held back, counted once");
}

/// The keys of the wakes the sink has gathered.
fn woken(sink: &mut WebhookSink) -> Vec<String> {
    let mut out = std::collections::VecDeque::new();
    sink.ctx.followups.take(&mut out);
    out.iter()
        .map(|f| {
            assert_eq!(f.next, Next::Wake);
            f.timer.key().to_string()
        })
        .collect()
}

/// A wake whose timer went (cancelled between the slot's release and the wake's follow-up)
/// passes the slot to the next timer waiting, once, and only while the slot is still free.
#[test]
fn a_wake_left_unused_wakes_the_next_held_timer_while_the_slot_is_free() {
    let (mut sink, _) = held_sink();
    let m = meta();
    let mut held = Vec::new();
    for k in ["a", "b", "c"] {
        match sink.fired(&fire("t", k, 1, &m)) {
            Next::Reschedule { meta, .. } => held.push(meta),
            other => panic!("not held back: {other:?}"),
        }
    }
    // The slot comes free: a is woken.
    sink.ctx.per_host.borrow_mut().remove(&target());
    deliver::wake_next(&sink.ctx, &target(), "t");
    assert_eq!(woken(&mut sink), ["a"]);
    // a was cancelled before its wake applied: the shard hands the wake back, and b gets it.
    let a = PackedTimer::with_meta("t", "a", &held[0], b"").expect("short");
    sink.wake_unused(&a);
    assert_eq!(woken(&mut sink), ["b"]);
    // Once another delivery has taken the slot, an unused wake wakes nobody: c keeps its
    // place in the queue.
    sink.ctx.per_host.borrow_mut().insert(target(), 1);
    let b = PackedTimer::with_meta("t", "b", &held[1], b"").expect("short");
    sink.wake_unused(&b);
    assert!(woken(&mut sink).is_empty());
    assert_eq!(sink.ctx.queues.borrow().len(), 1);
}

/// Fires `key` of `tenant`, which a cap holds back.
fn held_again(sink: &mut WebhookSink, tenant: &str, key: &str, meta: &[u8]) {
    let next = sink.fired(&fire(tenant, key, 1, meta));
    assert!(matches!(next, Next::Reschedule { .. }), "{next:?}");
}

/// A host slot comes free and wakes the host's first held timer, but that timer's tenant is
/// at its own cap: it waits on its tenant's queue, and the host slot goes to the next timer
/// waiting on the host (another tenant's), not to anyone's safety net. The reverse too: a
/// tenant slot whose woken timer finds its host full passes to the tenant's next timer.
#[test]
fn a_slot_the_woken_timer_cannot_use_for_its_other_cap_goes_to_the_next() {
    let mut s = allowing();
    s.max_in_flight_per_host = 1;
    s.max_in_flight_per_tenant = 1;
    let metrics = Arc::new(ShardMetrics::default());
    let mut sink = WebhookSink::new(0, Arc::new(s), metrics, Followups::default());
    let m = meta();
    // The host's one slot is taken (by tenant "busy"): a of "busy" and b of "calm" wait on
    // the host.
    sink.ctx.per_host.borrow_mut().insert(target(), 1);
    sink.ctx.per_tenant.borrow_mut().insert("busy".into(), 1);
    let mut held = Vec::new();
    for (tenant, key) in [("busy", "a"), ("calm", "b")] {
        match sink.fired(&fire(tenant, key, 1, &m)) {
            Next::Reschedule { meta, .. } => held.push(meta),
            other => panic!("not held back: {other:?}"),
        }
    }
    assert!(woken(&mut sink).is_empty(), "both caps full: nobody woken");
    // The host slot comes free; "busy" still has a delivery elsewhere, so it is at its cap.
    sink.ctx.per_host.borrow_mut().remove(&target());
    deliver::wake_next(&sink.ctx, &target(), "other");
    assert_eq!(woken(&mut sink), ["a"]);
    // a fires: held again, now by its tenant's cap; the host slot passes on to b.
    held_again(&mut sink, "busy", "a", &held[0]);
    assert_eq!(
        woken(&mut sink),
        ["b"],
        "the free host slot went to the next tenant"
    );
    assert_eq!(
        sink.ctx.queues.borrow().len(),
        1,
        "a waits on its tenant, b was woken"
    );

    // The reverse. c of "busy" fires while the host has room: it waits on its tenant, behind
    // a (the host queue is empty, so nobody is woken).
    held_again(&mut sink, "busy", "c", &m);
    assert!(woken(&mut sink).is_empty());
    assert_eq!(
        sink.ctx
            .queues
            .borrow()
            .waiting(&Cap::Tenant("busy".into())),
        2
    );
    // b's delivery takes the host slot; then "busy"'s slot comes free and wakes a.
    sink.ctx.per_host.borrow_mut().insert(target(), 1);
    sink.ctx.per_tenant.borrow_mut().remove("busy");
    deliver::wake_next(&sink.ctx, &target(), "busy");
    assert_eq!(woken(&mut sink), ["a"]);
    // a fires into a full host: it waits on the host, and "busy"'s slot passes to c.
    held_again(&mut sink, "busy", "a", &held[0]);
    assert_eq!(
        woken(&mut sink),
        ["c"],
        "the free tenant slot went to the tenant's next"
    );
    assert_eq!(
        sink.ctx.queues.borrow().waiting(&Cap::Host(target())),
        1,
        "a waits on the host"
    );
}

#[test]
fn a_held_timers_safety_net_grows_with_the_queue_ahead_up_to_a_minute() {
    let mut s = allowing();
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

/// A sink whose every lookup our own resolver refuses at once (`Busy`: a webhook lane with no
/// room in its queue), as when other lookups fill it.
fn refused_sink() -> (WebhookSink, Arc<ShardMetrics>) {
    use crate::resolve::{LaneLimits, Limits, Resolver};
    let full = Limits {
        webhook: LaneLimits {
            threads: 1,
            queue: 0,
            per_owner: 0,
            per_owner_running: 0,
            reserved: 0,
        },
        ..Limits::default()
    };
    let resolver = Resolver::new(full, Box::new(|_| Err("never asked".into())));
    let metrics = Arc::new(ShardMetrics::default());
    let sink = WebhookSink::with_resolver(
        0,
        Arc::new(allowing()),
        metrics.clone(),
        Followups::default(),
        Box::leak(Box::new(resolver)),
    );
    (sink, metrics)
}

/// Fires `meta` into the sink and waits (on its executor, at most 10 s) for the attempt's
/// outcome.
async fn attempt_outcome(sink: &mut WebhookSink, meta: &[u8]) -> Next {
    let started = sink.fired(&fire("t", "k", 1, meta));
    assert!(matches!(started, Next::Reschedule { .. }), "{started:?}");
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while sink.ctx.followups.is_empty() && std::time::Instant::now() < give_up {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    let mut out = std::collections::VecDeque::new();
    sink.ctx.followups.take(&mut out);
    assert_eq!(out.len(), 1, "the attempt reported within 10 s");
    out.pop_front().expect("one, as asserted").next
}

/// With a budget of one attempt, a delivery whose lookup our own resolver refuses is not
/// a dead letter: each refusal in a row up to MAX_BUSY is made again with no attempt used,
/// and the next counts, so a resolver that stays busy still ends it.
#[test]
fn a_lookup_our_resolver_refuses_uses_no_attempt_up_to_a_bound() {
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor");
    ex.run(async {
        let (mut sink, metrics) = refused_sink();
        let once = meta::RetryPolicy {
            max_attempts: 1,
            base_delay_ms: 1,
            max_delay_ms: 1,
        };
        let mut m = Delivery::new(URL.into(), once, 1).encode();
        for n in 1..=meta::MAX_BUSY {
            match attempt_outcome(&mut sink, &m).await {
                Next::Reschedule { meta, .. } => {
                    let d = Delivery::decode(&meta).expect("decodes");
                    assert_eq!((d.state, d.attempts, d.busy), (State::Waiting, 0, n));
                    m = meta;
                }
                other => panic!("refusal {n} spent the only attempt: {other:?}"),
            }
        }
        match attempt_outcome(&mut sink, &m).await {
            Next::Dead { meta, .. } => {
                let d = Delivery::decode(&meta).expect("decodes");
                assert_eq!(d.attempts, 1);
                assert!(
                    matches!(&d.last, Last::Error(e) if e.starts_with("resolver busy: ")),
                    "{:?}",
                    d.last
                );
            }
            other => panic!("refusals in a row never counted: {other:?}"),
        }
        let t = metrics.webhooks.tenant("t");
        let busy = t.resolver_busy.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(busy, u64::from(meta::MAX_BUSY) + 1);
    });
}

/// The sink retires an idle tenant's series from its own map and from the exposition, and
/// keeps one whose tenant has a table of its own.
#[test]
fn an_idle_tenants_series_leaves_the_sink_and_the_exposition() {
    let mut s = allowing();
    s.tenants
        .insert("kept".into(), settings::TenantWebhooks::default());
    let metrics = Arc::new(ShardMetrics::default());
    let sink = WebhookSink::new(0, Arc::new(s), metrics.clone(), Followups::default());
    for t in ["gone", "kept"] {
        crate::metrics::single_writer_add(&sink.ctx.tenant(t).attempts, 1);
    }
    let names = || -> Vec<String> {
        let mut n: Vec<String> = metrics
            .webhooks
            .snapshot()
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        n.sort();
        n
    };
    let now = std::time::Instant::now();
    // The first sweep (after SWEEP_EVERY) sees both counted; the one an idle time later
    // retires the tenant without a table.
    sink.ctx.sweep_series(now + SWEEP_EVERY);
    assert_eq!(names(), ["gone", "kept"]);
    let later = now + SWEEP_EVERY + crate::metrics::SERIES_IDLE + SWEEP_EVERY;
    sink.ctx.sweep_series(later);
    assert_eq!(names(), ["kept"]);
    assert!(!sink.ctx.tenant_metrics.borrow().contains_key("gone"));
    // Back again: a series of its own, counted from zero, in the sink and the exposition.
    crate::metrics::single_writer_add(&sink.ctx.tenant("gone").attempts, 1);
    assert_eq!(names(), ["gone", "kept"]);
    let gone = metrics.webhooks.tenant("gone");
    assert_eq!(gone.attempts.load(std::sync::atomic::Ordering::Relaxed), 1);
}
