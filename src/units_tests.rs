use super::*;

#[test]
fn nanos_to_micros_truncates_so_it_never_rounds_up_into_a_deadline() {
    assert_eq!(UtcNanos(1_999).as_micros(), UtcMicros(1));
    assert_eq!(UtcNanos(2_000).as_micros(), UtcMicros(2));
}

#[test]
fn from_millis_rejects_overflow() {
    assert_eq!(UtcMicros::from_millis(u64::MAX), None);
    assert_eq!(UtcMicros::from_millis(7), Some(UtcMicros(7_000)));
}
