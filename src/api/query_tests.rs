use super::*;

#[test]
fn pairs_in_order_each_known_name_once() {
    let known = ["prefix", "after", "limit"];
    assert_eq!(
        pairs(Some("limit=5&&prefix=a%3Ab&after="), &known),
        Ok(vec![("limit", "5"), ("prefix", "a%3Ab"), ("after", "")])
    );
    assert_eq!(pairs(None, &known), Ok(vec![]));
    assert_eq!(pairs(Some(""), &known), Ok(vec![]));
}

#[test]
fn a_name_given_twice_or_unknown_is_refused_by_name() {
    let known = ["prefix", "after", "limit"];
    for (bad, names) in [
        ("prefix=a&prefix=b", "prefix given twice"),
        ("limit=1&after=x&limit=1", "limit given twice"),
        (
            "color=red",
            "\"color=red\"; expected prefix, after and limit",
        ),
        ("prefix", "\"prefix\""),
        ("Prefix=a", "Prefix"),
    ] {
        match pairs(Some(bad), &known) {
            Err(ApiError::InvalidField(m)) => assert!(m.contains(names), "{bad}: {m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    match pairs(Some("x=1"), &["all"]) {
        Err(ApiError::InvalidField(m)) => assert!(m.ends_with("expected all"), "{m}"),
        other => panic!("{other:?}"),
    }
}
