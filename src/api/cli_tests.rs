use super::*;

#[test]
fn a_url_names_the_cluster_route_under_its_path() {
    let t = Target::parse("http://127.0.0.1:7480").expect("parses");
    assert_eq!(
        (t.path.as_str(), t.host.as_str()),
        ("/cluster", "127.0.0.1:7480")
    );
    let t = Target::parse("http://127.0.0.1:9/punctual/").expect("parses");
    assert_eq!(t.path, "/punctual/cluster");
    assert!(Target::parse("https://127.0.0.1:7480").is_err());
    assert!(Target::parse("127.0.0.1:7480").is_err());
    assert!(Target::parse("").is_err());
}

#[test]
fn a_refusal_says_what_the_node_said() {
    let body = br#"{"error":{"code":"not_found","message":"this node is not in cluster mode"}}"#;
    let text = refusal("http://x:1", StatusCode::NOT_FOUND, body);
    assert!(
        text.contains("not a node in cluster mode") && text.contains("not_found"),
        "{text}"
    );
    let text = refusal("http://x:1", StatusCode::BAD_GATEWAY, b"\xff garbage");
    assert!(text.contains("502"), "{text}");
}

#[test]
fn long_ranges_wrap_after_a_comma_and_lose_nothing() {
    let ranges = crate::nodes::report::ranges(&(0..1024).step_by(2).collect::<Vec<_>>());
    let mut out = String::new();
    wrapped(&mut out, "  ", &ranges);
    assert!(out.lines().count() > 10, "{out}");
    assert!(
        out.lines().all(|l| l.len() <= WIDTH && l.starts_with("  ")),
        "{out}"
    );
    let joined: String = out.lines().map(str::trim_start).collect();
    assert_eq!(joined, ranges);
    let mut out = String::new();
    wrapped(&mut out, "  ", "none");
    assert_eq!(out, "  none\n");
}

#[test]
fn a_time_prints_as_utc_and_nonsense_as_a_number() {
    assert_eq!(utc(0), "1970-01-01T00:00:00Z");
    assert_eq!(utc(1_500_000), "1970-01-01T00:00:01Z");
    assert_eq!(utc(u64::MAX), u64::MAX.to_string());
}
