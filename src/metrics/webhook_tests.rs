use super::*;

#[test]
fn tenants_past_the_series_bound_share_one_stable_other_entry() {
    let w = WebhookMetrics::default();
    for i in 0..TENANT_SERIES {
        single_writer_add(&w.tenant(&format!("t{i}")).attempts, 1);
    }
    assert_eq!(w.snapshot().len(), TENANT_SERIES, "no other before a fold");
    for i in 0..1_000 {
        single_writer_add(&w.tenant(&format!("late{i}")).attempts, 1);
    }
    // The same late tenant lands in the same entry every time.
    single_writer_add(&w.tenant("late7").attempts, 1);
    single_writer_add(&w.tenant("t3").attempts, 1);
    let snap = w.snapshot();
    assert_eq!(snap.len(), TENANT_SERIES + 1);
    let get = |name: &str| {
        snap.iter()
            .find(|(t, _)| t == name)
            .map(|(_, m)| m.attempts.load(Ordering::Relaxed))
    };
    assert_eq!(get(OTHER_TENANTS), Some(1_001));
    assert_eq!(get("t3"), Some(2));
    assert_eq!(get("late7"), None);
}

/// A tenant's series goes once it has held and counted nothing for the idle time, unless
/// kept; its place then goes to a new tenant instead of `other`.
#[test]
fn an_idle_tenants_series_is_retired_and_its_place_reused() {
    use std::time::{Duration, Instant};
    let w = WebhookMetrics::default();
    for i in 0..TENANT_SERIES {
        single_writer_add(&w.tenant(&format!("t{i}")).attempts, 1);
    }
    DeliveryMetrics::add(&w.tenant("t1").dead, 1);
    let idle = Duration::from_secs(600);
    let t0 = Instant::now();
    let kept = |t: &str| t == "t2";
    // First sweep: every counter moved since the series were made.
    assert!(w.retire_idle(t0, idle, kept).is_empty());
    // t3 counts again; the rest stay still.
    single_writer_add(&w.tenant("t3").successes, 1);
    assert!(w.retire_idle(t0 + idle / 2, idle, kept).is_empty());
    let mut gone = w.retire_idle(t0 + idle, idle, kept);
    gone.sort();
    assert_eq!(gone.len(), TENANT_SERIES - 3, "all but t1, t2 and t3");
    assert!(!gone
        .iter()
        .any(|t| ["t1", "t2", "t3"].contains(&t.as_str())));
    let names: Vec<String> = w.snapshot().into_iter().map(|(t, _)| t).collect();
    assert_eq!(names, ["t1", "t2", "t3"]);
    // t3 goes half an idle time later; a newcomer gets a series of its own, from zero.
    assert_eq!(w.retire_idle(t0 + idle * 3 / 2, idle, kept), ["t3"]);
    assert_eq!(w.tenant("t0").attempts.load(Ordering::Relaxed), 0);
    single_writer_add(&w.tenant("new").attempts, 1);
    let snap = w.snapshot();
    assert!(snap.iter().any(|(t, _)| t == "new"));
    assert!(!snap.iter().any(|(t, _)| t == OTHER_TENANTS));
}

/// A tenant that only has conditional writes refused keeps its series while they count, and
/// each refusal lands under its code.
#[test]
fn refused_conditional_writes_count_by_code_and_keep_the_series() {
    use std::time::{Duration, Instant};
    let w = WebhookMetrics::default();
    let t = w.tenant("t");
    t.conflict("exists");
    t.conflict("version_mismatch");
    t.conflict("version_mismatch");
    t.conflict("no such code");
    let counts: Vec<u64> = t
        .conflicts
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    assert_eq!(counts, [1, 2, 0]);
    let (idle, t0) = (Duration::from_secs(600), Instant::now());
    assert!(w.retire_idle(t0, idle, |_| false).is_empty());
    w.tenant("t").conflict("not_pending");
    assert!(
        w.retire_idle(t0 + idle, idle, |_| false).is_empty(),
        "it counted"
    );
    assert_eq!(w.retire_idle(t0 + idle * 2, idle, |_| false), ["t"]);
}
