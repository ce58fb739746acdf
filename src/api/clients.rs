//! Open connections per client address, all shards together, so that one client cannot hold
//! every one of `max_connections` (a cheap request every `idle_timeout_ms` keeps a
//! connection): past `max_connections_per_address`, a new connection from that address is
//! answered `503 too_many_connections` with `Retry-After` and closed, like one past the
//! server's cap (`http.rs`).
//!
//! | client | counted as |
//! |---|---|
//! | IPv4, or IPv4 mapped into IPv6 (a listener on `[::]`) | its address |
//! | IPv6 | its /64: one host is given a whole /64, and picks addresses in it at will |
//! | in `max_connections_per_address_exempt` (a proxy in front) | not counted; none is by default, loopback included |
//!
//! Invariant: a client's count is the number of its connections accepted and not yet closed
//! (the connection's slot gives its place back when dropped); an entry whose count falls to 0
//! is removed, so the table holds only clients with connections open.
//!
//! Cost: per connection, not per request: one `getpeername` and one short critical section
//! on one of [`STRIPES`] locks (by the client's hash) at accept, and one at close.

use ipnet::IpNet;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;

/// Locks the table is split over, so that shards accepting at once rarely meet.
const STRIPES: usize = 16;

/// A client as counted: an IPv4 address, or an IPv6 /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client(IpAddr);

impl Client {
    fn of(peer: IpAddr) -> Client {
        match peer {
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => Client(IpAddr::V4(v4)),
                None => {
                    let net = u128::from(a) & !((1u128 << 64) - 1);
                    Client(IpAddr::V6(Ipv6Addr::from(net)))
                }
            },
            v4 => Client(v4),
        }
    }
}

/// What a new connection from one address may do.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    /// Counted: give the place back with [`Clients::release`] when it closes.
    Counted(Client),
    /// From an exempt network: not counted.
    Exempt,
    /// Its client holds the cap already.
    Full,
}

/// The per-address counts and their cap.
pub struct Clients {
    cap: usize,
    exempt: Vec<IpNet>,
    stripes: Box<[Mutex<HashMap<Client, usize>>]>,
    hasher: foldhash::fast::FixedState,
}

impl Clients {
    pub fn new(cap: usize, exempt: Vec<IpNet>) -> Clients {
        Clients {
            cap,
            exempt,
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
            hasher: foldhash::fast::FixedState::with_seed(0),
        }
    }

    /// The most connections one client may hold.
    pub fn cap(&self) -> usize {
        self.cap
    }

    fn stripe(&self, c: &Client) -> std::sync::MutexGuard<'_, HashMap<Client, usize>> {
        let i = self.hasher.hash_one(c) as usize % STRIPES;
        // A panic while a guard is held is a crash (the server aborts on panics): a poisoned
        // lock cannot be met by a running server.
        self.stripes[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new connection from `peer`, unless its client holds the cap already.
    pub fn admit(&self, peer: IpAddr) -> Admit {
        if self.exempt.iter().any(|n| n.contains(&peer)) {
            return Admit::Exempt;
        }
        let client = Client::of(peer);
        let mut table = self.stripe(&client);
        let n = table.entry(client).or_insert(0);
        if *n >= self.cap {
            return Admit::Full;
        }
        *n += 1;
        Admit::Counted(client)
    }

    /// Gives back the place of a connection [`admit`](Self::admit) counted.
    pub fn release(&self, client: Client) {
        let mut table = self.stripe(&client);
        if let Some(n) = table.get_mut(&client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                table.remove(&client);
            }
        }
    }

    /// Clients with connections open (for tests).
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.stripes
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
#[path = "clients_tests.rs"]
mod tests;
