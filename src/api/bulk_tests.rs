use super::*;

#[test]
fn a_bulk_query_needs_a_prefix_or_all_and_names_what_it_refuses() {
    assert_eq!(
        bulk_query(Some("prefix=order-88")),
        Ok("order-88".to_string())
    );
    assert_eq!(bulk_query(Some("all=true")), Ok(String::new()));
    assert_eq!(bulk_query(Some("prefix=&all=true")), Ok(String::new()));
    for (bad, names) in [
        ("", "all=true"),
        ("prefix=", "all=true"),
        ("prefix=&all=false", "all=true"),
        ("prefix=a/b", "prefix"),
        ("all=yes", "all"),
        ("limit=5", "limit"),
    ] {
        match bulk_query(Some(bad)) {
            Err(ApiError::InvalidField(m)) => assert!(m.contains(names), "{bad}: {m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}
