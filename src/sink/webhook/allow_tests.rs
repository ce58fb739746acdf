use super::*;

fn list(prefixes: &[&str]) -> AllowList {
    let p: Vec<String> = prefixes.iter().map(|s| s.to_string()).collect();
    AllowList::new(&p, &[]).expect("valid prefixes")
}

fn permits(l: &AllowList, url: &str) -> Result<bool, &'static str> {
    parse(url).map(|u| l.permits(&u))
}

#[test]
fn dot_segments_and_backslashes_are_refused_before_matching() {
    let l = list(&["http://h/acme/"]);
    for url in [
        "http://h/acme/../beta/hook",
        "http://h/acme/%2e%2e/beta/hook",
        "http://h/acme/%2E%2e/beta",
        "http://h/acme/.%2e/beta",
        "http://h/acme/./hook",
        "http://h/acme\\..\\beta",
        "http://h/acme/..?x=1",
    ] {
        assert!(permits(&l, url).is_err(), "{url}");
    }
    assert_eq!(permits(&l, "http://h/acme/hook"), Ok(true));
    assert_eq!(
        permits(&l, "http://h/acme/..hook"),
        Ok(true),
        "not a dot segment"
    );
}

/// Forms that a server in front of the receiver may resolve out of the prefix: nginx
/// decodes `%2F` before it resolves dot segments, Tomcat and Spring read `..;` as `..`,
/// and a proxy that decodes twice turns `%252F` into `/`.
#[test]
fn encoded_slashes_encoded_dots_and_dot_segments_with_parameters_are_refused() {
    let l = list(&["http://h/acme/"]);
    for url in [
        "http://h/acme/..%2Fbeta/hook",
        "http://h/acme/..%2fbeta/hook",
        "http://h/acme/%2e%2e%2fbeta/hook",
        "http://h/acme/%2E%2E%2Fbeta/hook",
        "http://h/acme/a%2Fb",
        "http://h/acme/a%5Cb",
        "http://h/acme/%2ehook",
        "http://h/acme/hook%2E",
        "http://h/acme/..;/beta/hook",
        "http://h/acme/..;jsessionid=1/beta/hook",
        "http://h/acme/.;/hook",
        "http://h/acme/%2e%2e;/beta/hook",
        "http://h/acme/..%252Fbeta/hook",
        "http://h/acme/%252e%252e/beta/hook",
        "http://h/acme/%25252e%25252e/beta/hook",
    ] {
        assert!(permits(&l, url).is_err(), "{url}");
    }
    for url in [
        "http://h/acme/hook;v=1",
        "http://h/acme/a.b/hook",
        "http://h/acme/..hook",
        "http://h/acme/hook%20two",
        "http://h/acme/100%25",
        "http://h/acme/hook?next=..%2Fbeta",
    ] {
        assert_eq!(permits(&l, url), Ok(true), "{url}");
    }
}

#[test]
fn scheme_host_and_port_compare_normalised() {
    let l = list(&["http://Hooks.Example.com/acme/", "http://127.0.0.1:9000/"]);
    assert_eq!(permits(&l, "http://hooks.example.com:80/acme/x"), Ok(true));
    assert_eq!(permits(&l, "HTTP://HOOKS.EXAMPLE.COM/acme/x"), Ok(true));
    assert_eq!(permits(&l, "https://hooks.example.com/acme/x"), Ok(false));
    assert_eq!(
        permits(&l, "http://hooks.example.com:8080/acme/x"),
        Ok(false)
    );
    assert_eq!(
        permits(&l, "http://hooks.example.com.evil.net/acme/x"),
        Ok(false)
    );
    assert_eq!(permits(&l, "http://hooks.example.com/acmeX/x"), Ok(false));
    assert_eq!(permits(&l, "http://hooks.example.com/beta/x"), Ok(false));
    // The same address spelled as a number is the same host.
    assert_eq!(permits(&l, "http://2130706433:9000/x"), Ok(true));
    assert_eq!(permits(&l, "http://127.0.0.1:9001/x"), Ok(false));
}

#[test]
fn a_prefix_without_a_trailing_slash_matches_like_text_within_its_last_segment() {
    let l = list(&["http://h/hooks/acme"]);
    assert_eq!(permits(&l, "http://h/hooks/acme"), Ok(true));
    assert_eq!(permits(&l, "http://h/hooks/acme-2/x"), Ok(true));
    assert_eq!(permits(&l, "http://h/hooks/beta"), Ok(false));
}

#[test]
fn an_ip_literal_prefix_allows_exactly_its_address() {
    let l = list(&["http://127.0.0.1:9000/", "http://[::1]:9000/", "https://h/"]);
    let nets: Vec<String> = l.networks().iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, vec!["127.0.0.1/32", "::1/128"]);
}

#[test]
fn user_information_and_fragments_are_refused() {
    let l = list(&["http://h/"]);
    assert!(permits(&l, "http://user:pw@h/x").is_err());
    assert!(permits(&l, "http://h/x#frag").is_err());
    assert!(permits(&l, "ftp://h/x").is_err());
}
