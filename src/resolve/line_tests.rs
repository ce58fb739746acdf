use super::*;

fn limits() -> LaneLimits {
    LaneLimits {
        threads: 4,
        queue: 256,
        per_owner: 32,
        per_owner_running: 2,
        reserved: 1,
    }
}

fn push(line: &mut Line, owner: &str, n: usize) {
    for i in 0..n {
        line.push(&format!("{owner}-{i}"), Some(owner.to_string()));
    }
}

/// Takes lookups for free threads until none may run; their tenants, in order.
fn take_all(line: &mut Line, limits: &LaneLimits) -> Vec<String> {
    let mut out = Vec::new();
    while line.running() < limits.threads {
        match line.take(limits) {
            Some(q) => out.push(q.owner.unwrap_or_default()),
            None => break,
        }
    }
    out
}

/// The module doc's walk-through.
#[test]
fn two_tenants_never_hold_every_thread_and_a_third_gets_the_last() {
    let l = limits();
    let mut line = Line::default();
    push(&mut line, "a", 3);
    push(&mut line, "b", 2);
    assert_eq!(take_all(&mut line, &l), ["a", "a", "b"]);
    assert_eq!(line.running(), 3, "a thread stays free");
    push(&mut line, "c", 1);
    assert_eq!(take_all(&mut line, &l), ["c"]);
    // `a`'s first ends: one thread free, and every waiting tenant already runs one.
    let a0 = Queued {
        host: "a-0".into(),
        owner: Some("a".into()),
    };
    line.done(&a0);
    assert!(line.take(&l).is_none(), "the free thread stays kept");
    push(&mut line, "d", 1);
    assert_eq!(take_all(&mut line, &l), ["d"]);
}

#[test]
fn lookups_without_a_tenant_take_any_free_thread() {
    let l = LaneLimits {
        threads: 1,
        queue: 16,
        per_owner: usize::MAX,
        per_owner_running: usize::MAX,
        reserved: 0,
    };
    let mut line = Line::default();
    line.push("redis-1", None);
    line.push("redis-2", None);
    assert!(line.take(&l).is_some());
    assert_eq!(line.running(), 1);
    assert_eq!(line.queued(), 1);
}

#[test]
fn a_full_queue_or_share_admits_no_more() {
    let l = LaneLimits {
        threads: 4,
        queue: 3,
        per_owner: 2,
        per_owner_running: 2,
        reserved: 1,
    };
    let mut line = Line::default();
    push(&mut line, "a", 2);
    assert!(!line.admits(Some("a"), &l), "a's share is used");
    assert!(line.admits(Some("b"), &l));
    push(&mut line, "b", 1);
    assert!(!line.admits(Some("c"), &l), "the queue is full");
}
