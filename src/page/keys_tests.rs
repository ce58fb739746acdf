use super::*;
use std::collections::BTreeSet;

fn walked(keys: &PagedKeys, tenant: &str, start: &str, after: bool, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    keys.walk(tenant, start, after, |k| {
        out.push(k.to_string());
        out.len() < n
    });
    out
}

fn model_walk(set: &BTreeSet<String>, start: &str, after: bool, n: usize) -> Vec<String> {
    set.iter()
        .filter(|k| k.as_str() > start || (!after && k.as_str() == start))
        .take(n)
        .cloned()
        .collect()
}

/// Random inserts and removes, many enough to split blocks and empty them again, against a
/// `BTreeSet`: every answer, every walk from every kind of start, and the count agree.
#[test]
fn inserts_removes_and_walks_agree_with_a_sorted_set() {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut keys = PagedKeys::default();
    let mut model: BTreeSet<String> = BTreeSet::new();
    let key = |rng: &mut fastrand::Rng| {
        let shape = rng.u8(..3);
        match shape {
            0 => format!("order-{}", rng.u32(..20_000)),
            1 => format!("o{}", rng.u32(..300)),
            _ => (0..rng.usize(1..40))
                .map(|_| char::from(b'a' + rng.u8(..3)))
                .collect(),
        }
    };
    for round in 0..60_000 {
        let k = key(&mut rng);
        if rng.u8(..3) == 0 {
            assert_eq!(keys.remove("t", &k), model.remove(&k), "remove {k}");
        } else {
            assert_eq!(
                keys.insert("t", &k),
                Some(model.insert(k.clone())),
                "insert {k}"
            );
        }
        assert_eq!(keys.len(), model.len());
        if round % 997 == 0 {
            let start = key(&mut rng);
            for after in [false, true] {
                assert_eq!(
                    walked(&keys, "t", &start, after, 50),
                    model_walk(&model, &start, after, 50),
                    "from {start} after {after}"
                );
            }
            assert_eq!(
                walked(&keys, "t", "", false, usize::MAX),
                model_walk(&model, "", false, usize::MAX)
            );
        }
    }
    // Everything out again: the tenant goes with its last key.
    for k in model.clone() {
        assert!(keys.remove("t", &k));
    }
    assert_eq!(keys.len(), 0);
    assert!(keys.tenants.is_empty());
    assert!(walked(&keys, "t", "", false, 10).is_empty());
}

/// Tenants are apart: one's keys never show in another's walk, and a key removed from one is
/// still the other's.
#[test]
fn tenants_keep_their_own_keys() {
    let mut keys = PagedKeys::default();
    assert_eq!(keys.insert("a", "k1"), Some(true));
    assert_eq!(keys.insert("b", "k1"), Some(true));
    assert_eq!(keys.insert("b", "k2"), Some(true));
    assert_eq!(keys.insert("b", "k2"), Some(false), "already there");
    assert!(keys.remove("a", "k1"));
    assert!(!keys.remove("a", "k1"));
    assert_eq!(walked(&keys, "a", "", false, 10), Vec::<String>::new());
    assert_eq!(walked(&keys, "b", "k1", true, 10), vec!["k2".to_string()]);
    assert_eq!(keys.insert("a", &"x".repeat(256)), None, "too long to hold");
    assert_eq!(keys.insert("a", &"x".repeat(255)), Some(true));
}

/// What front coding saves: a million keys of one tenant as a service names them take a
/// small part of the 60 bytes a key an owned sorted set costs.
#[test]
fn a_million_sequential_keys_take_under_ten_bytes_each() {
    let mut keys = PagedKeys::default();
    let mut rng = fastrand::Rng::with_seed(1);
    let mut ids: Vec<u32> = (0..1_000_000).collect();
    rng.shuffle(&mut ids);
    for i in ids {
        keys.insert("shop", &format!("order-{i:08}"));
    }
    let per = keys.bytes() as f64 / keys.len() as f64;
    assert!(per < 10.0, "{per} bytes a key");
}
