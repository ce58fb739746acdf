use super::*;

fn policy(base: u64, max: u64) -> RetryPolicy {
    RetryPolicy {
        max_attempts: 10,
        base_delay_ms: base,
        max_delay_ms: max,
    }
}

#[test]
fn answers_are_classified_as_documented() {
    assert_eq!(classify(204, None), Ok(()));
    // 401 and 403 are retried too, a bounded number of times (`AUTH_ATTEMPTS`).
    for s in [401, 403, 408, 429, 500, 503, 599] {
        assert!(classify(s, None).is_err_and(|f| f.is_retriable()), "{s}");
    }
    for s in [301, 400, 404, 410, 422] {
        assert_eq!(classify(s, None), Err(Failure::Permanent { status: s }));
    }
}

#[test]
fn backoff_doubles_up_to_the_cap_and_saturates() {
    let p = policy(1000, 60_000);
    let ms: Vec<u128> = (1..=8)
        .map(|n| backoff_ceiling(&p, n).as_millis())
        .collect();
    assert_eq!(ms, [1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000]);
    let huge = policy(u64::MAX, u64::MAX);
    assert_eq!(
        backoff_ceiling(&huge, u32::MAX),
        Duration::from_millis(u64::MAX)
    );
    // Attempt 0 (never happens) is treated as attempt 1.
    assert_eq!(backoff_ceiling(&p, 0), Duration::from_millis(1000));
}

#[test]
fn full_jitter_stays_under_the_ceiling_and_retry_after_is_capped() {
    let p = policy(100, 1_000);
    let mut j = Jitter::new(7);
    for n in 1..20 {
        let d = next_delay(&p, n, None, j.draw());
        assert!(d <= backoff_ceiling(&p, n), "attempt {n}: {d:?}");
    }
    let ra = Some(Duration::from_secs(3600));
    assert_eq!(next_delay(&p, 1, ra, 0), Duration::from_millis(1_000));
    let short = Some(Duration::from_millis(250));
    assert_eq!(next_delay(&p, 1, short, 0), Duration::from_millis(250));
    // A Retry-After shorter than the backoff's draw does not shorten it: 0 is not "now".
    let zero = Some(Duration::ZERO);
    for n in 1..10 {
        let draw = j.draw();
        assert_eq!(next_delay(&p, n, zero, draw), next_delay(&p, n, None, draw));
    }
    assert_eq!(
        next_delay(&p, 4, short, u64::MAX - 1),
        next_delay(&p, 4, None, u64::MAX - 1).max(Duration::from_millis(250))
    );
    // The largest policy does not overflow.
    let huge = policy(u64::MAX, u64::MAX);
    let _ = next_delay(&huge, 64, None, u64::MAX);
}

#[test]
fn retry_after_reads_seconds_and_dates() {
    assert_eq!(parse_retry_after(b" 7 ", 0), Some(Duration::from_secs(7)));
    let now = 784_111_777 - 10; // 10 s before the date below
    assert_eq!(
        parse_retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT", now),
        Some(Duration::from_secs(10))
    );
    assert_eq!(parse_retry_after(b"soon", 0), None);
    assert_eq!(parse_retry_after(b"-1", 0), None);
    assert_eq!(parse_retry_after(&[0xff], 0), None);
}
