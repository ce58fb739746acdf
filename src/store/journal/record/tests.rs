use super::*;
use crate::timer::PackedTimer;

use proptest::prelude::*;

fn first(buf: &[u8]) -> Step<'_> {
    decode_at(buf, 0, 4096)
}

#[test]
fn a_lease_round_trips_and_counts_as_a_version() {
    let mut out = Vec::new();
    let n = put_lease(&mut out, 77);
    let Step::Record { record, next, .. } = decode_at(&out, 0, 4096) else {
        panic!("{:?}", decode_at(&out, 0, 4096))
    };
    assert_eq!((record, next), (Record::Lease { ceiling: 77 }, n));
    assert_eq!(record.version(), Some(77), "the floor covers it");
    assert_eq!((record.identity(), record.effect()), (None, (None, None)));
}

#[test]
fn a_schedule_round_trips_with_its_meta() {
    let t = PackedTimer::with_meta("shop", "order-1", b"cb", b"{}").expect("fits");
    let mut out = Vec::new();
    let n = put_timer(&mut out, false, 7, UtcMicros(42), &t);
    assert_eq!(n, out.len());
    let Step::Record { record, next, .. } = first(&out) else {
        panic!("{:?}", first(&out))
    };
    assert_eq!(next, n);
    let Record::Schedule(r) = record else {
        panic!("{record:?}")
    };
    assert_eq!(
        (r.version, r.deadline, r.tenant, r.key, r.meta, r.payload),
        (7, UtcMicros(42), "shop", "order-1", &b"cb"[..], &b"{}"[..])
    );
    assert_eq!(r.identity, t.identity());
}

#[test]
fn zeros_are_padding_mid_block_and_the_end_on_a_boundary() {
    let mut out = Vec::new();
    put_cancel(&mut out, "t", "k");
    let used = out.len();
    out.resize(8192, 0);
    assert_eq!(decode_at(&out, used, 4096), Step::Padding { next: 4096 });
    assert_eq!(decode_at(&out, 4096, 4096), Step::End);
    out[100] = 1;
    assert_eq!(decode_at(&out, used, 4096), Step::Bad(Bad::Padding));
}

#[test]
fn a_flipped_bit_anywhere_in_a_frame_is_detected() {
    let t = PackedTimer::new("shop", "order-1", b"payload").expect("fits");
    let mut out = Vec::new();
    put_timer(&mut out, false, 1, UtcMicros(2), &t);
    for i in 0..out.len() * 8 {
        let mut b = out.clone();
        b[i / 8] ^= 1 << (i % 8);
        assert!(
            !matches!(first(&b), Step::Record { .. }),
            "bit {i} flipped went unnoticed"
        );
    }
}

fn name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._:-]{1,40}"
}

proptest! {
    #[test]
    fn every_record_decodes_to_what_was_encoded(
        tenant in name(), key in name(),
        meta in proptest::collection::vec(any::<u8>(), 0..300),
        payload in proptest::collection::vec(any::<u8>(), 0..600),
        version in any::<u64>(), deadline in any::<u64>(), attempt in any::<bool>(),
        tail in 0u8..6,
    ) {
        let t = PackedTimer::with_meta(&tenant, &key, &meta, &payload).expect("fits");
        let mut out = Vec::new();
        put_timer(&mut out, attempt, version, UtcMicros(deadline), &t);
        match tail {
            0 => { put_cancel(&mut out, &tenant, &key); }
            1 => { put_fired(&mut out, version, &tenant, &key); }
            2 => { put_dead_letter(&mut out, version, UtcMicros(deadline), &t); }
            3 => { put_dead_removed(&mut out, &tenant, &key); }
            4 => { put_redrive(&mut out, version, UtcMicros(deadline), &t); }
            _ => { put_batch(&mut out, version, 3); }
        }
        let Step::Record { record, next, .. } = decode_at(&out, 0, 4096) else {
            return Err(TestCaseError::fail("first record"));
        };
        let expect = Timer {
            version, deadline: UtcMicros(deadline), identity: t.identity(),
            tenant: &tenant, key: &key, meta: &meta, payload: &payload,
        };
        prop_assert_eq!(record, if attempt { Record::Attempt(expect) } else { Record::Schedule(expect) });
        let Step::Record { record, next: end, .. } = decode_at(&out, next, 4096) else {
            return Err(TestCaseError::fail("second record"));
        };
        prop_assert_eq!(end, out.len());
        let id = t.identity();
        let want = match tail {
            0 => Record::Cancel { identity: id },
            1 => Record::Fired { version, identity: id },
            2 => Record::DeadLetter(expect),
            3 => Record::DeadRemoved { identity: id },
            4 => Record::Redrive(expect),
            _ => Record::Batch { seq: version, records: 3 },
        };
        prop_assert_eq!(record, want);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_overrun(
        bytes in proptest::collection::vec(any::<u8>(), 0..2000),
        at in 0usize..2100,
    ) {
        if let Step::Record { next, frame, .. } = decode_at(&bytes, at, 512) {
            prop_assert!(next <= bytes.len() && next == at + frame.len());
        }
    }
}
