use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

#[test]
fn a_client_is_refused_past_its_cap_and_others_are_not() {
    let c = Clients::new(2, Vec::new());
    let a = c.admit(ip("10.0.0.1"));
    assert!(matches!(a, Admit::Counted(_)));
    assert!(matches!(c.admit(ip("10.0.0.1")), Admit::Counted(_)));
    assert_eq!(c.admit(ip("10.0.0.1")), Admit::Full);
    assert!(matches!(c.admit(ip("10.0.0.2")), Admit::Counted(_)));
    let Admit::Counted(first) = a else {
        panic!("counted")
    };
    c.release(first);
    assert!(matches!(c.admit(ip("10.0.0.1")), Admit::Counted(_)));
}

#[test]
fn an_ipv6_client_is_its_64_and_a_mapped_ipv4_client_its_address() {
    let c = Clients::new(1, Vec::new());
    assert!(matches!(c.admit(ip("2001:db8:1:2::1")), Admit::Counted(_)));
    assert_eq!(c.admit(ip("2001:db8:1:2:ffff::9")), Admit::Full, "same /64");
    assert!(matches!(c.admit(ip("2001:db8:1:3::1")), Admit::Counted(_)));
    assert!(matches!(c.admit(ip("192.0.2.7")), Admit::Counted(_)));
    assert_eq!(c.admit(ip("::ffff:192.0.2.7")), Admit::Full, "mapped");
}

#[test]
fn exempt_networks_are_not_counted_and_released_clients_leave_the_table() {
    let exempt = vec!["127.0.0.1/32".parse().expect("a network")];
    let c = Clients::new(1, exempt);
    for _ in 0..5 {
        assert_eq!(c.admit(ip("127.0.0.1")), Admit::Exempt);
    }
    let Admit::Counted(other) = c.admit(ip("127.0.0.2")) else {
        panic!("loopback is counted unless listed")
    };
    assert_eq!(c.admit(ip("127.0.0.2")), Admit::Full);
    assert_eq!(c.clients(), 1);
    c.release(other);
    assert_eq!(c.clients(), 0);
}
