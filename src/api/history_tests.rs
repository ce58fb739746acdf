use super::*;

#[test]
fn the_query_takes_key_after_and_limit() {
    let q = HistoryQuery::parse(None).expect("no query");
    assert_eq!((q.key, q.after, q.limit), (None, None, DEFAULT_LIMIT));
    let q = HistoryQuery::parse(Some("key=order%2D8812&after=17&limit=1000")).expect("valid");
    assert_eq!(q.key.as_deref(), Some("order-8812"));
    assert_eq!((q.after, q.limit), (Some(17), MAX_LIMIT));
}

#[test]
fn a_bad_limit_cursor_or_parameter_is_an_invalid_field() {
    for bad in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "after=0",
        "after=abc",
        "after=-1",
        "since=5",
        "limit=5&limit=6",
    ] {
        let e = HistoryQuery::parse(Some(bad)).expect_err(bad);
        assert_eq!(e.code(), "invalid_field", "{bad}: {e:?}");
    }
}

#[test]
fn an_empty_key_is_an_invalid_key() {
    let e = HistoryQuery::parse(Some("key=")).expect_err("empty key");
    assert_eq!(e.code(), "invalid_key");
}
