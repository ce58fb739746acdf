use super::*;

fn master(addr: &str, replicas: u32, policy: &str) -> Master {
    Master {
        addr: addr.into(),
        replicas,
        policy: Ok(policy.into()),
    }
}

#[test]
fn cluster_nodes_reads_as_masters_with_their_replicas() {
    let text = "\
a1 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
a2 10.0.0.2:7000@17000,h2 master - 0 0 2 connected 5461-10922
b1 10.0.0.4:7000@17000 slave a1 0 0 1 connected
b2 10.0.0.5:7000@17000 slave a1 0 0 1 connected
b3 10.0.0.6:7000@17000 replica a2 0 0 2 connected
x 10.0.0.9:7000@17000 master,fail - 0 0 3 disconnected
short line
";
    let m = masters_of(text);
    let got: Vec<(&str, u32)> = m.iter().map(|m| (m.addr.as_str(), m.replicas)).collect();
    assert_eq!(got, [("10.0.0.1:7000", 2), ("10.0.0.2:7000", 1)]);
    assert!(masters_of("").is_empty() && masters_of("\u{0} é").is_empty());
}

#[test]
fn an_evicting_policy_refuses_the_start_unless_allowed_and_too_few_waits_warn() {
    let ok = [
        master("a:1", 1, "noeviction"),
        master("b:1", 1, "noeviction"),
    ];
    assert_eq!(judge(&ok, 1, false), Verdict::default());
    let low = judge(&ok, 0, false);
    assert!(low.refuse.is_none());
    assert!(low.warnings[0].contains("set it to 1"), "{low:?}");

    let lru = [
        master("a:1", 1, "noeviction"),
        master("b:1", 1, "allkeys-lru"),
    ];
    let refused = judge(&lru, 1, false);
    assert!(
        refused.refuse.as_deref().is_some_and(|r| r.contains("b:1")
            && r.contains("allkeys-lru")
            && r.contains("--redis-allow-eviction")),
        "{refused:?}"
    );
    let allowed = judge(&lru, 1, true);
    assert!(allowed.refuse.is_none() && allowed.warnings.len() == 1);

    let ttl = [master("a:1", 0, "volatile-ttl")];
    let v = judge(&ttl, 0, false);
    assert!(v.refuse.is_none() && v.warnings[0].contains("leases"));
    let unread = [Master {
        addr: "a:1".into(),
        replicas: 0,
        policy: Err("ERR unknown command 'CONFIG'".into()),
    }];
    let v = judge(&unread, 0, false);
    assert!(v.refuse.is_none() && v.warnings[0].contains("could not be read"));
}
