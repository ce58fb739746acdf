use super::*;
use crate::api::forward_sign::Refused;

const N1: &str = "0123456789abcdef0000000000000001";
const N2: &str = "0123456789abcdef0000000000000002";

fn nonce(i: u64) -> String {
    format!("00000000000000aa{i:016x}")
}

#[test]
fn a_nonce_is_served_once_within_the_window_and_forgotten_after_it() {
    let s = Seen::default();
    let w = WINDOW.as_millis() as u64;
    let t = 1_000_000;
    assert_eq!(s.admit(t, N1, t), Ok(()));
    assert_eq!(s.admit(t, N1, t + 10), Err(Refusal::Replayed));
    assert_eq!(s.admit(t, N1, t + w), Err(Refusal::Replayed), "at the edge");
    assert_eq!(s.admit(t, N2, t + 10), Ok(()), "another nonce");
    assert_eq!(s.admit(t + 1, N1, t + 10), Ok(()), "another time");
    // Past the window the entries go, and the old time is stale whatever the nonce.
    assert_eq!(
        s.admit(t, N1, t + w + 1),
        Err(Refusal::Stale { off_ms: w + 1 })
    );
    assert_eq!(
        s.len(),
        1,
        "only the forward signed at t + 1 is still in the window"
    );
}

#[test]
fn a_malformed_nonce_is_missing() {
    let s = Seen::default();
    for bad in [
        "",
        "ab",
        "0123456789abcdef000000000000000g",
        "é123456789abcdef00000000000001",
    ] {
        assert_eq!(s.admit(1, bad, 1), Err(Refusal::Missing), "{bad:?}");
    }
    assert!(s.is_empty());
}

#[test]
fn a_full_memory_forgets_the_oldest_and_refuses_what_it_can_no_longer_check() {
    let s = Seen::with_cap(3);
    let now = 5_000_000;
    for i in 0..5 {
        assert_eq!(s.admit(now - 100 + i, &nonce(i), now), Ok(()));
    }
    assert_eq!(s.len(), 3, "bounded");
    // The two oldest were forgotten: their replays are refused, never served.
    for i in 0..2 {
        assert_eq!(
            s.admit(now - 100 + i, &nonce(i), now),
            Err(Refusal::Forgotten { behind_ms: 1 - i })
        );
    }
    for i in 2..5 {
        assert_eq!(
            s.admit(now - 100 + i, &nonce(i), now),
            Err(Refusal::Replayed)
        );
    }
    assert_eq!(s.admit(now, &nonce(9), now), Ok(()), "a fresh forward");
    assert_eq!(s.len(), 3);
}

#[test]
fn refusals_count_under_their_reason() {
    let r = Refused::default();
    Refusal::Replayed.count(&r);
    Refusal::Forgotten { behind_ms: 3 }.count(&r);
    assert_eq!(r.replayed.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(r.stale.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert!(matches!(
        Refusal::Replayed.error(),
        crate::api::error::ApiError::Unauthorized(m) if m.contains("replay")
    ));
}
