use super::*;
use crate::timer::PackedTimer;
use crate::units::UtcMicros;

fn op(tenant: &str) -> Op {
    Op::Schedule {
        timer: PackedTimer::new(tenant, "k", b"").expect("packed"),
        deadline: UtcMicros(0),
        reply: None,
        slot: None,
        home: false,
    }
}

/// Tenants "a" and "b" in two different share buckets.
fn two_buckets() -> (&'static str, &'static str) {
    let a = "a";
    let b = ["b", "c", "d", "e", "f"]
        .into_iter()
        .find(|t| share_bucket(t) != share_bucket(a))
        .expect("a tenant in another bucket");
    (a, b)
}

/// A drain's ops keep their share until it is given back, in one step per run of one
/// bucket: a tenant at its share is refused until then, and a run of another bucket gives
/// back the run before it at once.
#[test]
fn a_drain_gives_shares_back_in_one_step_per_run() {
    let (a, b) = two_buckets();
    let (ring, _wakee) = Ring::new(0, 16).expect("ring");
    for _ in 0..4 {
        ring.push(a, op(a)).expect("within a's share");
    }
    ring.push(b, op(b)).expect("within b's share");
    assert!(matches!(
        ring.push(a, op(a)),
        Err(Error::RingShare { share: 4, .. })
    ));
    let mut taken = Taken::default();
    for _ in 0..4 {
        assert!(ring.pop_into(&mut taken).is_some());
    }
    assert!(
        matches!(ring.push(a, op(a)), Err(Error::RingShare { .. })),
        "a's ops taken out still hold its share until they are given back"
    );
    assert!(ring.pop_into(&mut taken).is_some(), "b's op");
    for _ in 0..4 {
        ring.push(a, op(a)).expect("b's run gave a's back at once");
    }
    ring.give_back(&mut taken);
    for _ in 0..3 {
        ring.push(b, op(b)).expect("b's share given back");
    }
    let mut left = 0;
    while ring.pop().is_some() {
        left += 1;
    }
    assert_eq!(left, 7);
    for _ in 0..4 {
        ring.push(a, op(a)).expect("every share given back");
    }
}
