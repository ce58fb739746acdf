use super::*;

#[test]
fn the_longest_streams_keep_their_series_and_the_rest_fold_into_other() {
    let mut l = Longest::default();
    for i in 0..(TENANT_SERIES as u64 + 36) {
        l.add(&format!("t{i:03}"), i);
    }
    l.add(OTHER_TENANTS, 7);
    let out = l.finish();
    assert_eq!(out.len(), TENANT_SERIES + 1);
    assert_eq!(out.last(), Some(&(OTHER_TENANTS.to_string(), 35)));
    let named: Vec<u64> = out[..TENANT_SERIES].iter().map(|(_, n)| *n).collect();
    assert!(named.iter().all(|&n| n >= 36), "{named:?}");
    assert_eq!(out.iter().filter(|(t, _)| t == OTHER_TENANTS).count(), 1);

    let mut few = Longest::default();
    few.add("b", 2);
    few.add("a", 1);
    few.add("b", 1);
    assert_eq!(few.finish(), [("a".to_string(), 1), ("b".to_string(), 2)]);
}
