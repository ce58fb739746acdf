use super::*;

#[test]
fn no_error_about_a_redis_url_shows_its_password() {
    for url in [
        "redis+cluster://app:s3cr%3Fet@h 1:7000/",
        "redis+cluster://app:s3cr%zzet@h1:7000/",
        "redis+cluster://app:s3cr?et@h1:7000/db",
        "redis+sentinel://:s3cr?et@h1:x/m",
        "redis://:s3cr?et@h1:70000/x",
        "redis://:s3cr?et@/x",
    ] {
        let err = crate::store::redis::RedisConfig::new(url)
            .endpoint()
            .expect_err(url)
            .to_string();
        assert!(!err.contains("s3cr"), "{url}: {err}");
    }
    assert_eq!(scrub("a p%40w p@w b", "redis://u:p%40w@h:1"), "a *** *** b");
    assert_eq!(scrub("nothing", "redis://h:1"), "nothing");
    assert!(!shown("redis://:pa/ss@h:1").contains("pa/ss"));
}

#[test]
fn a_masked_url_keeps_the_hosts_and_never_the_password() {
    for (url, shown) in [
        ("redis://:pw@h:6379/1", "redis://:***@h:6379/1"),
        (
            "redis+cluster://app:s3c:r@t@10.0.0.1:7000,10.0.0.2:7000/",
            "redis+cluster://app:***@10.0.0.1:7000,10.0.0.2:7000/",
        ),
        ("redis://h:6379", "redis://h:6379"),
    ] {
        assert_eq!(mask_url(url), shown);
    }
}

#[test]
fn a_sentinel_url_names_its_sentinels_master_database_and_credentials() {
    let e = Endpoint::parse("redis+sentinel://app:s%40cret@10.0.0.1:26379,[::1]:26380/orders/2")
        .expect("valid");
    let Endpoint::Sentinel {
        sentinels,
        master,
        redis,
        ..
    } = e
    else {
        panic!("not a sentinel endpoint: {e:?}");
    };
    assert_eq!(
        sentinels,
        vec![("10.0.0.1".to_owned(), 26379), ("::1".to_owned(), 26380)]
    );
    assert_eq!(master, "orders");
    assert_eq!(redis.db, 2);
    assert_eq!(redis.username.as_deref(), Some("app"));
    assert_eq!(redis.password.as_deref(), Some("s@cret"));
}

#[test]
fn a_plain_url_is_direct() {
    let e = Endpoint::parse("redis://127.0.0.1:6380/1").expect("valid");
    assert!(
        matches!(e, Endpoint::Direct(ref i) if i.redis.db == 1),
        "{e:?}"
    );
}

#[test]
fn bad_sentinel_urls_are_refused_with_a_reason() {
    for (url, why) in [
        ("redis+sentinel://h:1", "master-name"),
        ("redis+sentinel://h:1/", "master-name"),
        ("redis+sentinel://h/m", "host:port"),
        ("redis+sentinel://h:x/m", "port"),
        ("redis+sentinel://h:0/m", "1-65535"),
        ("redis+sentinel://:1/m", "host"),
        ("redis+sentinel://h:1,/m", "host:port"),
        ("redis+sentinel://h:1/m/x", "database"),
        ("redis+sentinel://u:%zz@h:1/m", "percent"),
        ("unix:///tmp/redis.sock", "TCP"),
    ] {
        let err = Endpoint::parse(url).expect_err(url);
        assert!(err.contains(why), "{url}: {err}");
    }
}

#[test]
fn sentinel_replies_are_judged_without_panics() {
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        master_addr(Some(Value::Array(vec![bulk("10.1.2.3"), bulk("6380")]))),
        Ok(("10.1.2.3".to_owned(), 6380))
    );
    assert!(master_addr(Some(Value::Nil))
        .unwrap_err()
        .contains("unknown"));
    assert!(master_addr(Some(Value::Array(vec![bulk("h"), bulk("99999")]))).is_err());
    assert!(master_addr(Some(Value::Array(vec![bulk("h")]))).is_err());
    assert!(master_addr(None).is_err());
    assert!(is_master(&Some(Value::Array(vec![
        bulk("master"),
        Value::Int(0)
    ]))));
    assert!(!is_master(&Some(Value::Array(vec![bulk("slave")]))));
    assert!(!is_master(&None));
}

#[test]
fn only_this_masters_switch_announcements_count() {
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    let msg = |text: &str| Value::Array(vec![bulk("message"), bulk("+switch-master"), bulk(text)]);
    assert_eq!(
        switched(&msg("orders 127.0.0.1 6379 127.0.0.1 6380"), "orders"),
        Some("127.0.0.1:6380".into())
    );
    assert_eq!(
        switched(&msg("other 127.0.0.1 6379 127.0.0.1 6380"), "orders"),
        None
    );
    assert_eq!(switched(&msg("orders 127.0.0.1"), "orders"), None);
    let confirm = Value::Array(vec![
        bulk("subscribe"),
        bulk("+switch-master"),
        Value::Int(1),
    ]);
    assert_eq!(switched(&confirm, "orders"), None);
    assert_eq!(switched(&Value::Nil, "orders"), None);
}
