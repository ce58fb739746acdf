use super::*;

#[test]
fn a_cluster_url_names_its_seeds_and_credentials() {
    let cfg = parse_url("redis+cluster://app:s%40cret@h1:7000,[::1]:7001/").expect("valid");
    let seeds: Vec<String> = cfg.seeds.iter().map(Addr::to_string).collect();
    assert_eq!(seeds, ["h1:7000", "[::1]:7001"]);
    assert_eq!(cfg.redis.username.as_deref(), Some("app"));
    assert_eq!(cfg.redis.password.as_deref(), Some("s@cret"));
    assert_eq!(cfg.redis.db, 0);
    assert!(parse_url("redis+cluster://h1:7000").is_ok());
}

#[test]
fn bad_cluster_urls_are_refused_with_a_reason() {
    for (url, why) in [
        ("redis://h:1/", "starts with"),
        ("redis+cluster://h:1/2", "database 0"),
        ("redis+cluster://h/", "host:port"),
        ("redis+cluster://h:0/", "1-65535"),
        ("redis+cluster://h:1,/", "host:port"),
    ] {
        let err = parse_url(url).expect_err(url);
        assert!(err.contains(why), "{url}: {err}");
    }
}
