use super::*;

#[test]
fn hosts_are_checked_one_by_one_and_named_in_the_error() {
    assert_eq!(
        host_port("[::1]:7000", "node"),
        Ok(("::1".to_owned(), 7000))
    );
    assert_eq!(
        host_port("redis-0.local:7000", "node"),
        Ok(("redis-0.local".to_owned(), 7000))
    );
    for (h, why) in [
        ("h 1:7000", "host"),
        ("::1:7000", "[addr]:port"),
        ("[::1:7000", "[addr]:port"),
        ("h:70000", "1-65535"),
        (":7000", "host and a port"),
        ("h", "host:port"),
    ] {
        let err = host_port(h, "node").expect_err(h);
        assert!(err.contains(why) && err.contains("node"), "{h}: {err}");
    }
}
