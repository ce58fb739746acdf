use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

#[test]
fn internal_addresses_are_refused_in_every_form() {
    for (addr, class) in [
        ("127.0.0.1", Special::Loopback),
        ("127.255.0.9", Special::Loopback),
        ("0.0.0.0", Special::Unspecified),
        ("10.1.2.3", Special::Private),
        ("172.31.255.255", Special::Private),
        ("192.168.1.1", Special::Private),
        ("100.64.0.1", Special::Private),
        ("169.254.169.254", Special::LinkLocal),
        ("224.0.0.1", Special::Multicast),
        ("255.255.255.255", Special::Reserved),
        ("192.0.2.10", Special::Documentation),
        ("::1", Special::Loopback),
        ("::", Special::Unspecified),
        ("::ffff:127.0.0.1", Special::Loopback),
        ("::ffff:169.254.169.254", Special::LinkLocal),
        ("::127.0.0.1", Special::Loopback),
        ("64:ff9b::10.0.0.1", Special::Private),
        ("64:ff9b:1::1", Special::Tunnel),
        ("2002:7f00:1::1", Special::Loopback),
        ("2001:0:4136:e378::1", Special::Tunnel),
        ("fd00::1", Special::UniqueLocal),
        ("fe80::1", Special::LinkLocal),
        ("ff02::1", Special::Multicast),
        ("2001:db8::1", Special::Documentation),
    ] {
        assert_eq!(check(ip(addr), &[]), Err(class), "{addr}");
    }
}

#[test]
fn public_addresses_pass() {
    for addr in [
        "93.184.216.34",
        "1.1.1.1",
        "172.32.0.1",
        "2606:4700::1111",
        "::ffff:93.184.216.34",
        "64:ff9b::93.184.216.34",
    ] {
        assert_eq!(check(ip(addr), &[]), Ok(()), "{addr}");
    }
}

#[test]
fn allowed_networks_open_exactly_what_they_name() {
    let nets = parse_networks(&["10.1.0.0/16".into(), "127.0.0.1".into()]).expect("valid");
    assert_eq!(check(ip("10.1.200.7"), &nets), Ok(()));
    assert_eq!(check(ip("10.2.0.1"), &nets), Err(Special::Private));
    assert_eq!(check(ip("127.0.0.1"), &nets), Ok(()));
    assert_eq!(check(ip("::ffff:127.0.0.1"), &nets), Ok(()));
    assert_eq!(check(ip("127.0.0.2"), &nets), Err(Special::Loopback));
    assert_eq!(check(ip("::1"), &nets), Err(Special::Loopback));
    assert!(parse_networks(&["10.1.0.0/33".into()]).is_err());
    assert!(parse_networks(&["localhost".into()]).is_err());
}
