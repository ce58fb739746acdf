use super::*;
use crate::history::{Attempt, Event, Outcome};

const HOUR_US: u64 = 3_600_000_000;

fn fire(tenant: &str, key: &str, version: u64, at_us: u64, outcome: Outcome) -> Event {
    Event {
        tenant: tenant.into(),
        key: key.into(),
        version,
        fire_at_us: at_us - 10,
        at_us,
        attempt: None,
        outcome,
    }
}

fn attempt(e: &Event, at_us: u64, status: Option<u16>, outcome: Outcome) -> Event {
    Event {
        at_us,
        attempt: Some(Attempt {
            at_us,
            status,
            error: status.is_none().then(|| "connect".into()),
        }),
        outcome,
        ..e.clone()
    }
}

#[test]
fn a_fire_and_its_attempts_make_one_entry() {
    let mut index = Index::new(HOUR_US, 100);
    let f = fire("shop", "order-8812", 7, 1_000, Outcome::Retrying);
    index.apply(f.clone());
    index.apply(attempt(&f, 2_000, None, Outcome::Retrying));
    index.apply(attempt(&f, 3_000, Some(200), Outcome::Delivered));
    let page = index.page("shop", Some("order-8812"), None, 10, 3_000);
    assert_eq!(page.entries.len(), 1);
    let e = &page.entries[0];
    assert_eq!((e.version, e.fire_at_us, e.fired_at_us), (7, 990, 1_000));
    assert_eq!(e.lateness_us, 10);
    assert_eq!(e.outcome, Outcome::Delivered);
    assert_eq!(e.attempts.len(), 2);
    assert_eq!(e.attempts[0].error.as_deref(), Some("connect"));
    assert_eq!(e.attempts[1].status, Some(200));
    assert!(page.next.is_none());
}

#[test]
fn pages_run_newest_first_and_the_cursor_continues() {
    let mut index = Index::new(HOUR_US, 100);
    for i in 1..=5u64 {
        index.apply(fire("shop", &format!("k{i}"), i, 1_000 * i, Outcome::Fired));
        index.apply(fire("other", "k1", i, 1_000 * i, Outcome::Fired));
    }
    let first = index.page("shop", None, None, 2, 10_000);
    let keys: Vec<_> = first.entries.iter().map(|e| &*e.key).collect();
    assert_eq!(keys, ["k5", "k4"]);
    let second = index.page("shop", None, first.next, 2, 10_000);
    let keys: Vec<_> = second.entries.iter().map(|e| &*e.key).collect();
    assert_eq!(keys, ["k3", "k2"]);
    let last = index.page("shop", None, second.next, 2, 10_000);
    let keys: Vec<_> = last.entries.iter().map(|e| &*e.key).collect();
    assert_eq!(keys, ["k1"]);
    assert!(last.next.is_none(), "the last page has no cursor");
    let by_key = index.page("other", Some("k1"), None, 10, 10_000);
    assert_eq!(by_key.entries.len(), 5, "one entry per version");
    assert_eq!(by_key.entries[0].version, 5);
    assert!(index
        .page("nobody", None, None, 10, 10_000)
        .entries
        .is_empty());
}

#[test]
fn entries_past_the_retention_are_hidden_and_trimmed() {
    let retention = 1_000;
    let mut index = Index::new(retention, 100);
    let old = fire("shop", "old", 1, 10_000, Outcome::Retrying);
    index.apply(old.clone());
    index.apply(fire("shop", "new", 1, 12_000, Outcome::Fired));
    // At 11,500 both are within the retention of their last event.
    assert_eq!(index.page("shop", None, None, 10, 11_000).entries.len(), 2);
    // At 12,500 the old one is past it: never shown, and trimmed.
    let page = index.page("shop", None, None, 10, 12_500);
    assert_eq!(page.entries.len(), 1);
    assert_eq!(&*page.entries[0].key, "new");
    index.trim(12_500);
    assert_eq!(index.len(), 1);
    // An attempt keeps an entry for the retention after it.
    index.apply(fire("shop", "late", 1, 12_600, Outcome::Retrying));
    let late = fire("shop", "late", 1, 12_600, Outcome::Retrying);
    index.apply(attempt(&late, 13_900, Some(503), Outcome::Retrying));
    index.trim(14_000);
    let page = index.page("shop", None, None, 10, 14_000);
    let keys: Vec<_> = page.entries.iter().map(|e| &*e.key).collect();
    assert_eq!(keys, ["late"]);
    index.trim(20_000);
    assert!(index.is_empty(), "every tenant's entries are gone");
}

#[test]
fn a_tenant_keeps_at_most_its_cap_and_not_at_others_cost() {
    let mut index = Index::new(HOUR_US, 3);
    index.apply(fire("quiet", "q", 1, 500, Outcome::Fired));
    for i in 1..=10u64 {
        index.apply(fire("loud", &format!("k{i}"), i, 1_000 + i, Outcome::Fired));
    }
    let loud = index.page("loud", None, None, 100, 2_000);
    let keys: Vec<_> = loud.entries.iter().map(|e| &*e.key).collect();
    assert_eq!(keys, ["k10", "k9", "k8"]);
    assert!(index
        .page("loud", Some("k1"), None, 10, 2_000)
        .entries
        .is_empty());
    assert_eq!(index.page("quiet", None, None, 10, 2_000).entries.len(), 1);
}

#[test]
fn an_attempt_without_its_fire_makes_an_entry_and_attempts_are_capped() {
    let mut index = Index::new(HOUR_US, 10);
    let f = fire("shop", "redriven", 3, 5_000, Outcome::Retrying);
    for i in 0..(ATTEMPTS_KEPT as u64 + 5) {
        index.apply(attempt(&f, 6_000 + i, Some(503), Outcome::Retrying));
    }
    let page = index.page("shop", Some("redriven"), None, 10, 7_000);
    assert_eq!(page.entries.len(), 1);
    let e = &page.entries[0];
    assert_eq!(
        e.fired_at_us, e.fire_at_us,
        "its deadline stands for the fire"
    );
    assert_eq!(e.attempts.len(), ATTEMPTS_KEPT);
    assert_eq!(e.attempts[0].at_us, 6_005, "the last ones are kept");
}
