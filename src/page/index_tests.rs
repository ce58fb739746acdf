use super::*;

fn far(keyed: &Keyed, key: &str, version: u64, offset: u32) -> Far {
    Far {
        id: keyed.id(key.as_bytes()),
        deadline: UtcMicros(1_000 + version),
        version,
        at: Loc { bucket: 3, offset },
    }
}

#[test]
fn an_entry_is_forty_bytes() {
    assert_eq!(std::mem::size_of::<Far>(), 40);
}

/// A start's inserts, gathered in batches, are all found once it is over; one that met an
/// entry of its id replaced it (the later kept) and is counted, not lost or doubled.
#[test]
fn a_starts_batched_inserts_are_exact_once_it_is_over() {
    let keyed = Keyed::new();
    let mut index = FarIndex::default();
    let n = 100_000u32;
    for i in 0..n {
        index.insert_recovered(far(&keyed, &format!("k{i}"), 1, i));
    }
    index.insert_recovered(far(&keyed, "k9", 2, n));
    assert_eq!(index.len(), n as usize + 1, "counted as they come");
    assert_eq!(index.recovered().len(), 1, "one met its id");
    assert_eq!(index.len(), n as usize);
    for i in 0..n {
        let f = index
            .get(keyed.id(format!("k{i}").as_bytes()))
            .expect("found");
        let want = if i == 9 { (2, n) } else { (1, i) };
        assert_eq!((f.version, f.at.offset), want, "k{i}");
    }
    // The index works as before afterwards.
    assert!(index.insert(far(&keyed, "new", 1, 0)).is_none());
    assert_eq!(index.len(), n as usize + 1);
}

#[test]
fn inserts_replace_and_removes_are_exact() {
    let keyed = Keyed::new();
    let mut index = FarIndex::default();
    for i in 0..10_000u32 {
        assert!(index.insert(far(&keyed, &format!("k{i}"), 1, i)).is_none());
    }
    assert_eq!(index.len(), 10_000);
    let old = index
        .insert(far(&keyed, "k7", 2, 20_000))
        .expect("replaced");
    assert_eq!(old.version, 1);
    assert_eq!(index.len(), 10_000);
    // A load finds the record it read no longer current.
    let k7 = keyed.id(b"k7");
    assert!(index
        .remove_at(
            k7,
            Loc {
                bucket: 3,
                offset: 7
            }
        )
        .is_none());
    assert_eq!(index.get(k7).map(|f| f.version), Some(2));
    assert!(index
        .remove_at(
            k7,
            Loc {
                bucket: 3,
                offset: 20_000
            }
        )
        .is_some());
    assert!(index.get(k7).is_none());
    assert_eq!(index.remove(keyed.id(b"k8")).map(|f| f.version), Some(1));
    assert!(index.remove(keyed.id(b"k8")).is_none());
    assert_eq!(index.len(), 9_998);
}

#[test]
fn an_identity_hashes_the_same_whole_or_in_parts() {
    let keyed = Keyed::new();
    let t = crate::timer::PackedTimer::new("acme", "order-17", b"x").expect("small");
    assert_eq!(
        keyed.id_of("acme", "order-17"),
        Some(keyed.id(t.identity()))
    );
}

#[test]
fn identities_hash_apart_under_distinct_keys() {
    let (a, b) = (Keyed::new(), Keyed::new());
    assert_ne!(a.id(b"\x01\x01tk"), b.id(b"\x01\x01tk"));
    assert_eq!(a.id(b"\x01\x01tk"), a.id(b"\x01\x01tk"));
}
