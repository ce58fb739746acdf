use super::*;

fn timer() -> PackedTimer {
    PackedTimer::with_meta("acme", "order-17", b"\x01meta", b"{\"id\":17}").expect("small")
}

#[test]
fn a_record_reads_back_as_it_was_put() {
    let mut out = b"before".to_vec();
    put(&mut out, &timer(), UtcMicros(1_700_000_000_123_456), 42).expect("fits");
    let Taken::Record(r, n) = take(&out[6..]) else {
        panic!("a whole record");
    };
    assert_eq!(n, out.len() - 6);
    assert_eq!(r.deadline, UtcMicros(1_700_000_000_123_456));
    assert_eq!(r.version, 42);
    assert!(r.timer == timer());
}

#[test]
fn a_record_of_parts_is_the_record_of_their_timer() {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    put(&mut a, &timer(), UtcMicros(9), 3).expect("fits");
    let parts = ("acme", "order-17", &b"\x01meta"[..], &b"{\"id\":17}"[..]);
    put_parts(&mut b, parts, UtcMicros(9), 3).expect("fits");
    assert_eq!(a, b);
}

#[test]
fn a_cut_record_is_short_and_a_changed_byte_is_damage() {
    let mut out = Vec::new();
    put(&mut out, &timer(), UtcMicros(5), 1).expect("fits");
    for cut in 0..out.len() {
        assert!(matches!(take(&out[..cut]), Taken::Short), "cut at {cut}");
    }
    for at in 0..out.len() {
        let mut bad = out.clone();
        bad[at] ^= 0x40;
        assert!(
            !matches!(take(&bad), Taken::Record(..)),
            "byte {at} changed, still read as a record"
        );
    }
}
