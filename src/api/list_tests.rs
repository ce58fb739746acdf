use super::*;

#[test]
fn a_query_reads_its_parameters_and_names_the_one_it_refuses() {
    let q = list_query("t", Some("prefix=order-88&after=order-881&limit=5")).expect("ok");
    assert_eq!(
        (q.prefix.as_str(), q.after.as_deref(), q.limit, q.payloads),
        ("order-88", Some("order-881"), 5, false)
    );
    assert_eq!(list_query("t", None).map(|q| q.limit), Ok(DEFAULT_LIMIT));
    for (bad, names) in [
        ("prefix=a/b", "prefix"),
        ("prefix=a%20b", "prefix"),
        ("limit=0", "limit"),
        ("limit=10001", "limit"),
        ("limit=x", "limit"),
        ("after=a%2Fb", "after"),
        ("payloads=yes", "payloads"),
        ("payloads=true&limit=1001", "limit"),
        ("sort=key", "sort"),
    ] {
        match list_query("t", Some(bad)) {
            Err(ApiError::InvalidField(m)) => assert!(m.contains(names), "{bad}: {m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn a_covered_header_reads_back_as_the_partitions_it_names() {
    let set = covered_of(&HeaderValue::from_static("0-3,7,1020-1023")).expect("ranges");
    assert_eq!(set.members(), [0, 1, 2, 3, 7, 1020, 1021, 1022, 1023]);
    for bad in ["3-1", "0-1024", "x", "1-", "-1"] {
        assert!(
            covered_of(&HeaderValue::from_static(bad)).is_none(),
            "{bad}"
        );
    }
    assert_eq!(
        covered_of(&HeaderValue::from_static("")),
        Some(PartitionSet::default())
    );
}
