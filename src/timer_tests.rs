use super::*;

#[test]
fn packed_timer_round_trips_its_parts() {
    let p = PackedTimer::new("t1", "order:9", b"xyz").expect("short names");
    assert_eq!(
        (p.tenant(), p.key(), p.meta(), p.payload()),
        ("t1", "order:9", &b""[..], &b"xyz"[..])
    );
    let m = PackedTimer::with_meta("t1", "order:9", b"\x01cb", b"{}").expect("short");
    assert_eq!((m.meta(), m.payload()), (&b"\x01cb"[..], &b"{}"[..]));
    assert_eq!(
        m.identity(),
        p.identity(),
        "metadata is not part of the identity"
    );
    assert!(PackedTimer::with_meta("t", "k", &vec![0; 65_536], b"").is_none());
    let kept = m.with_new_meta(b"\x02").expect("short");
    assert_eq!(
        (kept.identity(), kept.meta(), kept.payload()),
        (m.identity(), &b"\x02"[..], m.payload())
    );
    assert!(m.with_new_meta(&vec![0; 65_536]).is_none());
    // Same key under another tenant is another identity.
    let q = PackedTimer::new("t", "1order:9", b"").expect("short names");
    assert_ne!(p.identity(), q.identity());
}

/// The thin handle: one pointer, its bytes whole for every size (empty parts, a payload of
/// a mebibyte), a clone equal and independent of its original, and both freed once (the
/// address and leak sanitizers run this).
#[test]
fn a_packed_timer_is_one_pointer_to_all_its_bytes() {
    assert_eq!(std::mem::size_of::<PackedTimer>(), 8);
    assert_eq!(std::mem::size_of::<Option<PackedTimer>>(), 8);
    fn shared_across_threads<T: Send + Sync>() {}
    shared_across_threads::<PackedTimer>();
    for size in [0usize, 1, 3, 4, 100, 4_096, 1 << 20] {
        let payload: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
        let p = PackedTimer::with_meta("", "", b"", &payload).expect("empty names");
        assert_eq!((p.tenant(), p.key(), p.meta()), ("", "", &b""[..]));
        assert_eq!(p.payload(), &payload[..]);
        let q = p.clone();
        drop(p);
        assert_eq!(q.payload(), &payload[..], "a clone outlives its original");
        let r = PackedTimer::with_meta("t", "k", b"m", &payload).expect("short");
        assert_ne!(q, r);
        assert_eq!(r.clone(), r);
    }
}

#[test]
fn a_burst_leads_the_meta_and_leaves_a_sinks_section_as_it_was() {
    let d = Debounce {
        first_at: UtcMicros(1_796_110_651_546_380),
        max_wait_us: 3_600_000_000,
    };
    for sink in [&b""[..], b"W\x03rest of a webhook's section"] {
        let led = d.lead(sink);
        assert_eq!(Debounce::of(&led), Some(d));
        assert_eq!(sink_meta(&led), sink);
        // Led again: one burst, the latest.
        let later = Debounce {
            max_wait_us: 5,
            ..d
        };
        let again = later.lead(&led);
        assert_eq!(
            (Debounce::of(&again), sink_meta(&again)),
            (Some(later), sink)
        );
    }
    // Metadata written before bursts existed reads as it did.
    for old in [&b""[..], b"W\x01abc", b"D", b"D\x01short"] {
        assert_eq!((Debounce::of(old), sink_meta(old)), (None, old));
    }
    assert_eq!(d.cap(), UtcMicros(1_796_114_251_546_380));
}
