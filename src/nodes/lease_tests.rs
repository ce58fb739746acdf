use super::*;

fn lease(deadline: Instant) -> Lease {
    Lease {
        partition: 3,
        epoch: 7,
        holder: "n:7".into(),
        deadline,
        boot_deadline: None,
    }
}

#[test]
fn the_local_deadline_is_the_send_time_plus_ttl_less_the_margin() {
    let cfg = LeaseConfig::with_ttl(Duration::from_secs(3));
    let sent = Instant::now();
    assert_eq!(cfg.deadline(sent), sent + Duration::from_millis(2_700));
    let tight = LeaseConfig {
        ttl: Duration::from_millis(10),
        drift: Duration::from_secs(1),
    };
    assert_eq!(
        tight.deadline(sent),
        sent,
        "a margin past the TTL leaves no time"
    );
}

#[test]
fn a_lease_past_its_deadline_fences_nothing() {
    let now = Instant::now();
    let key = crate::store::redis::layout::timers_key(3);
    let hset = redis::cmd("HSET").arg(&key).arg("t/k").arg("v").clone();
    let live = lease(now + Duration::from_secs(1));
    assert!(live
        .fence(now, &[&key], std::slice::from_ref(&hset))
        .is_ok());
    let over = lease(now);
    assert!(matches!(
        over.fence(now, &[&key], &[hset]),
        Err(LeaseError::Expired {
            partition: 3,
            epoch: 7
        })
    ));
}

#[test]
fn a_lease_whose_boot_clock_deadline_passed_is_not_valid_though_the_monotonic_one_is_ahead() {
    let cfg = LeaseConfig::with_ttl(Duration::from_secs(3));
    let now = Instant::now();
    let l = Lease::granted(3, 7, "n/x-t:7", cfg, now);
    let boot = boottime().expect("CLOCK_BOOTTIME on Linux");
    assert!(l.valid_at(now) && l.valid_at_boot(now, Some(boot)));
    // Resumed after a 10 s suspend: the monotonic clock says a moment passed, the boot
    // clock says 10 s.
    let resumed = Some(boot + Duration::from_secs(10));
    assert!(!l.valid_at_boot(now + Duration::from_millis(1), resumed));
    assert!(
        l.valid_at_boot(now, None),
        "an unreadable boot clock checks nothing"
    );
    let mut renewed = l.clone();
    renewed.renewed_at(cfg, now + Duration::from_millis(1));
    assert!(
        !renewed.valid_at_boot(now, resumed),
        "a renewal sent before the suspend"
    );
    assert!(
        !l.valid_at(now + Duration::from_secs(3)),
        "the monotonic deadline holds too"
    );
}

#[test]
fn no_two_acquisitions_of_a_process_share_a_token() {
    let mut seen: Vec<String> = (0..10_000).map(|_| token()).collect();
    assert!(seen
        .iter()
        .all(|t| t.len() == 16 && t.bytes().all(|b| b.is_ascii_hexdigit())));
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 10_000);
}

#[test]
fn two_incarnations_of_one_node_never_share_a_prefix() {
    let node = "10.0.0.5:7480";
    let mut seen: Vec<String> = (0..1_000).map(|_| incarnation(node)).collect();
    for i in &seen {
        let nonce = i
            .strip_prefix("10.0.0.5:7480/")
            .expect("the node's id first");
        assert!(nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit()));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 1_000, "each incarnation its own nonce");
}
