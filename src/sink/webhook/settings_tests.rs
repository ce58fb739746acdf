use super::*;

fn settings() -> WebhookSettings {
    let mut s = WebhookSettings::new(tls_config(None).expect("tls"));
    s.allow = AllowList::new(&["https://hooks.example.com/".into()], &[]).expect("valid");
    s.tenants.insert(
        "acme".into(),
        TenantWebhooks {
            allow: Some(
                AllowList::new(&["http://127.0.0.1:9000/acme/".into()], &[]).expect("valid"),
            ),
            default_url: Some("http://127.0.0.1:9000/acme/default".into()),
            webhooks: true,
            ..Default::default()
        },
    );
    s.tenants.insert(
        "quiet".into(),
        TenantWebhooks {
            webhooks: false,
            ..Default::default()
        },
    );
    s
}

#[test]
fn callbacks_must_start_with_an_allowed_prefix_of_their_tenant() {
    let s = settings();
    let ok = s.callback_for("shop", Some("https://hooks.example.com/x?y=1"));
    assert_eq!(ok, Ok(Some("https://hooks.example.com/x?y=1".into())));
    for bad in [
        "https://hooks.example.com.evil.net/x",
        "https://hooks.example.com@evil.net/x",
        "http://hooks.example.com/x",
        "https://169.254.169.254/latest",
        "https://hooks.example.com/x/../../admin",
        "https://hooks.example.com/%2e%2e/admin",
    ] {
        assert!(s.callback_for("shop", Some(bad)).is_err(), "{bad}");
    }
    // A listed tenant uses its own list, not the top-level one.
    assert!(s
        .callback_for("acme", Some("https://hooks.example.com/x"))
        .is_err());
    assert_eq!(
        s.callback_for("acme", None),
        Ok(Some("http://127.0.0.1:9000/acme/default".into()))
    );
    assert_eq!(s.callback_for("shop", None), Ok(None));
    assert_eq!(
        s.callback_for("quiet", Some("https://hooks.example.com/x")),
        Err(CallbackError::Off)
    );
    let mut none = settings();
    none.allow = AllowList::default();
    assert!(matches!(
        none.callback_for("shop", Some("https://hooks.example.com/x")),
        Err(CallbackError::NotAllowed(_))
    ));
}

#[test]
fn allow_prefixes_must_end_their_host() {
    assert!(super::super::allow::check_allow_prefix("https://hooks.example.com/").is_ok());
    assert!(super::super::allow::check_allow_prefix("http://127.0.0.1:9000/a/").is_ok());
    assert!(super::super::allow::check_allow_prefix("https://hooks.example.com").is_err());
    assert!(super::super::allow::check_allow_prefix("ftp://x/").is_err());
    assert!(super::super::allow::check_allow_prefix("https://u@x/").is_err());
    assert!(super::super::allow::check_allow_prefix("https:///").is_err());
}

#[test]
fn targets_parse_with_default_ports_and_ipv6() {
    let (t, p) = Target::parse("https://h.example/a/b?c=d").expect("valid");
    assert_eq!(
        (t.https, t.host.as_str(), t.port, p.as_str()),
        (true, "h.example", 443, "/a/b?c=d")
    );
    assert_eq!(t.host_header(), "h.example");
    let (t, p) = Target::parse("http://[::1]:8080").expect("valid");
    assert_eq!((t.host.as_str(), t.port, p.as_str()), ("::1", 8080, "/"));
    assert_eq!(t.host_header(), "[::1]:8080");
    for bad in ["mailto:x@y", "http://h/#frag", "/relative", "http://u:p@h/"] {
        assert!(Target::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn retry_fields_fall_back_to_the_defaults_and_are_bounded() {
    let s = settings();
    assert_eq!(s.retry_for("shop", None, None, None), Ok(DEFAULT_RETRY));
    let p = s.retry_for("shop", Some(3), Some(10), None).expect("valid");
    assert_eq!(
        (p.max_attempts, p.base_delay_ms, p.max_delay_ms),
        (3, 10, 60_000)
    );
    assert!(s.retry_for("shop", Some(0), None, None).is_err());
    assert!(s.retry_for("shop", Some(1 << 40), None, None).is_err());
    assert!(s.retry_for("shop", None, Some(5_000), Some(10)).is_err());
}
