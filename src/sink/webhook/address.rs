//! Where a delivery may connect: the check of every resolved address against the special
//! ranges, so that a tenant who controls a callback host name cannot point it at an internal
//! service (SSRF by address).
//!
//! The allow-list (`callback_allow`) is checked against a callback's URL text when it is
//! registered and again when it fires; this module checks where the connection actually goes.
//! The connection is made only to an address that passed here, from the same lookup (no
//! second lookup that DNS could answer differently).
//!
//! | refused by default | ranges |
//! |---|---|
//! | unspecified, "this network" | `0.0.0.0/8`, `::/128` |
//! | loopback | `127.0.0.0/8`, `::1/128` |
//! | private | `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`, `100.64.0.0/10` (carrier-grade NAT) |
//! | link-local (the cloud metadata address `169.254.169.254` is one) | `169.254.0.0/16`, `fe80::/10` |
//! | unique-local, site-local | `fc00::/7`, `fec0::/10` |
//! | multicast, broadcast, reserved | `224.0.0.0/4`, `240.0.0.0/4` (with `255.255.255.255`), `ff00::/8` |
//! | documentation, benchmarking, protocol assignments | `192.0.0.0/24`, `192.0.2.0/24`, `198.18.0.0/15`, `198.51.100.0/24`, `203.0.113.0/24`, `2001:db8::/32`, `100::/64` |
//! | IPv6 forms that carry an IPv4 address | IPv4-mapped `::ffff:0:0/96`, IPv4-compatible `::/96`, NAT64 `64:ff9b::/96` and 6to4 `2002::/16`: the IPv4 address inside is checked as above; local-use NAT64 `64:ff9b:1::/48` and Teredo `2001::/32` are refused whole |
//!
//! An operator opens internal targets with `callback_allow_networks` (top level, or per
//! tenant): an address inside one of those networks is allowed whatever its range, and so is
//! the IPv4 address inside an IPv6 form. A `callback_allow` prefix whose host is an IP literal
//! (`http://127.0.0.1:9000/`) allows exactly that address.
//!
//! A refused address is a permanent failure: the delivery becomes a dead letter with
//! `last_error` `address_not_allowed`; the operator's log names the host and the address.

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

/// The special range an address fell in, for the operator's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    Unspecified,
    Loopback,
    Private,
    LinkLocal,
    UniqueLocal,
    Multicast,
    Reserved,
    Documentation,
    /// Local-use NAT64 or Teredo: an IPv4 address that cannot be checked.
    Tunnel,
}

impl Special {
    pub fn name(self) -> &'static str {
        match self {
            Special::Unspecified => "unspecified",
            Special::Loopback => "loopback",
            Special::Private => "private",
            Special::LinkLocal => "link-local",
            Special::UniqueLocal => "unique-local",
            Special::Multicast => "multicast",
            Special::Reserved => "reserved",
            Special::Documentation => "documentation",
            Special::Tunnel => "tunnel",
        }
    }
}

fn v4_table() -> &'static [(Ipv4Net, Special)] {
    static T: OnceLock<Vec<(Ipv4Net, Special)>> = OnceLock::new();
    T.get_or_init(|| {
        use Special::*;
        [
            ("0.0.0.0/8", Unspecified),
            ("10.0.0.0/8", Private),
            ("100.64.0.0/10", Private),
            ("127.0.0.0/8", Loopback),
            ("169.254.0.0/16", LinkLocal),
            ("172.16.0.0/12", Private),
            ("192.0.0.0/24", Reserved),
            ("192.0.2.0/24", Documentation),
            ("192.168.0.0/16", Private),
            ("198.18.0.0/15", Documentation),
            ("198.51.100.0/24", Documentation),
            ("203.0.113.0/24", Documentation),
            ("224.0.0.0/4", Multicast),
            ("240.0.0.0/4", Reserved),
        ]
        .iter()
        .filter_map(|(net, class)| Some((net.parse().ok()?, *class)))
        .collect()
    })
}

fn v6_table() -> &'static [(Ipv6Net, Special)] {
    static T: OnceLock<Vec<(Ipv6Net, Special)>> = OnceLock::new();
    T.get_or_init(|| {
        use Special::*;
        [
            ("::/128", Unspecified),
            ("::1/128", Loopback),
            ("64:ff9b:1::/48", Tunnel),
            ("100::/64", Documentation),
            ("2001::/32", Tunnel),
            ("2001:db8::/32", Documentation),
            ("fc00::/7", UniqueLocal),
            ("fe80::/10", LinkLocal),
            ("fec0::/10", UniqueLocal),
            ("ff00::/8", Multicast),
        ]
        .iter()
        .filter_map(|(net, class)| Some((net.parse().ok()?, *class)))
        .collect()
    })
}

/// The IPv4 address carried inside an IPv6 form (mapped, compatible, NAT64, 6to4), if any.
fn embedded_v4(ip: &Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible; :: and ::1 are in the table).
        [0, 0, 0, 0, 0, 0xffff, ..] | [0, 0, 0, 0, 0, 0, _, _] => Some(low),
        // 64:ff9b::a.b.c.d, the well-known NAT64 prefix.
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(low),
        // 2002:aabb:ccdd::/48, 6to4.
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// The special range `ip` falls in (checking the IPv4 address inside an IPv6 form), or `None`
/// for an ordinary public address.
pub fn special(ip: IpAddr) -> Option<Special> {
    match ip {
        IpAddr::V4(v4) => v4_table()
            .iter()
            .find(|(net, _)| net.contains(&v4))
            .map(|(_, c)| *c),
        IpAddr::V6(v6) => {
            if let Some((_, c)) = v6_table().iter().find(|(net, _)| net.contains(&v6)) {
                return Some(*c);
            }
            embedded_v4(&v6).and_then(|v4| special(IpAddr::V4(v4)))
        }
    }
}

/// Whether a delivery may connect to `ip`: an address inside `allowed` always may (and so may
/// one whose embedded IPv4 address is inside it), else any address outside the special ranges.
pub fn check(ip: IpAddr, allowed: &[IpNet]) -> Result<(), Special> {
    let inside = |ip: IpAddr| allowed.iter().any(|n| n.contains(&ip));
    if inside(ip) {
        return Ok(());
    }
    if let IpAddr::V6(v6) = ip {
        if embedded_v4(&v6).is_some_and(|v4| inside(IpAddr::V4(v4))) {
            return Ok(());
        }
    }
    special(ip).map_or(Ok(()), Err)
}

/// Parses `callback_allow_networks` entries: CIDR networks, or single addresses (as /32, /128).
pub fn parse_networks(list: &[String]) -> Result<Vec<IpNet>, String> {
    list.iter()
        .map(|s| {
            let t = s.trim();
            t.parse::<IpNet>()
                .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{s:?} is not a network such as 10.1.0.0/16 or fd00::/8"))
        })
        .collect()
}

#[cfg(test)]
#[path = "address_tests.rs"]
mod tests;
