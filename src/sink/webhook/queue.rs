//! The timers a cap holds back, waiting for a slot: per host, one FIFO per tenant served
//! round-robin; per tenant, one FIFO; at most one entry per timer.
//!
//! A host's slots are shared by tenants in turn: when a slot comes free, the next tenant in
//! the host's rotation that has a timer waiting gets it, and goes to the back of the rotation.
//! So one tenant's backlog to a shared endpoint (a SaaS host several tenants call) delays
//! another tenant's timers by at most one turn per tenant waiting, not by the whole backlog.
//!
//! A held timer is known by its identity (tenant, key). Holding it again while it waits (its
//! safety net fired and the cap is still full) keeps its place; holding another version of it,
//! or on the other kind of queue, gives it a new ticket at the back. Forgetting it (cancelled,
//! replaced, its delivery started, it became a dead letter) takes it out of the index at once;
//! its ticket stays in its FIFO, stale, and is skipped when popped. Stale tickets are swept
//! whenever they outnumber the live ones (and 64), so:
//!
//! - held entries (`len`) ≤ the timers the shard holds back, one each;
//! - tickets in all FIFOs together ≤ 2 × `len` + 64.
//!
//! Cost: a hash lookup and a `VecDeque` push per hold; a pop skips at most the stale tickets
//! at the front; a sweep is linear in the tickets, and runs at most once per `len` + 64
//! forgets.

use super::settings::Target;
use super::Map;
use crate::timer::PackedTimer;
use std::collections::VecDeque;

/// A timer held back by a cap: its identity and its metadata when it was held, and its version.
pub(crate) struct HeldBack {
    pub timer: PackedTimer,
    pub version: u64,
}

/// Which cap holds a timer back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Cap {
    Host(Target),
    Tenant(Box<str>),
}

struct Entry {
    cap: Cap,
    held: HeldBack,
}

/// One FIFO: a tenant's timers waiting on a host, or a tenant's waiting on its own cap.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Fifo {
    HostTenant(Target, Box<str>),
    Tenant(Box<str>),
}

impl Fifo {
    fn of(cap: &Cap, tenant: &str) -> Fifo {
        match cap {
            Cap::Host(t) => Fifo::HostTenant(t.clone(), tenant.into()),
            Cap::Tenant(t) => Fifo::Tenant(t.clone()),
        }
    }
}

/// The timers held back by a cap, in arrival order per FIFO, tenants in turn per host.
#[derive(Default)]
pub(crate) struct Queues {
    fifos: Map<Fifo, VecDeque<u64>>,
    /// Per host, the tenants whose turn comes next (each at most once).
    rotation: Map<Target, VecDeque<Box<str>>>,
    /// Live tickets: the entry each stands for.
    entries: Map<u64, Entry>,
    /// A timer's identity → its live ticket.
    tickets: Map<Box<[u8]>, u64>,
    next: u64,
    stale: usize,
}

impl Queues {
    /// Timers held (one entry each).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Tickets in all FIFOs, live and stale.
    #[cfg(test)]
    pub fn tickets(&self) -> usize {
        self.fifos.values().map(VecDeque::len).sum()
    }

    /// Tickets waiting on `cap` (stale ones too: at most as many again as live ones).
    pub fn waiting(&self, cap: &Cap) -> usize {
        match cap {
            Cap::Host(t) => self.rotation.get(t).map_or(0, |tenants| {
                tenants
                    .iter()
                    .map(|tenant| self.fifo_len(&Fifo::HostTenant(t.clone(), tenant.clone())))
                    .sum()
            }),
            Cap::Tenant(t) => self.fifo_len(&Fifo::Tenant(t.clone())),
        }
    }

    fn fifo_len(&self, f: &Fifo) -> usize {
        self.fifos.get(f).map_or(0, VecDeque::len)
    }

    /// Holds `held` back on `cap`. `true` when it was not held before (a new entry).
    pub fn hold(&mut self, cap: Cap, held: HeldBack) -> bool {
        let id = held.timer.identity();
        if let Some(&t) = self.tickets.get(id) {
            if let Some(e) = self.entries.get_mut(&t) {
                if e.cap == cap && e.held.version == held.version {
                    // The same wait: it keeps its place, with the latest metadata.
                    e.held = held;
                    return false;
                }
            }
            self.forget(id);
        }
        let t = self.next;
        self.next += 1;
        self.tickets.insert(id.into(), t);
        let tenant = held.timer.tenant();
        let fifo = self.fifos.entry(Fifo::of(&cap, tenant)).or_default();
        let first = fifo.is_empty();
        fifo.push_back(t);
        if let (Cap::Host(target), true) = (&cap, first) {
            let turn = self.rotation.entry(target.clone()).or_default();
            if !turn.iter().any(|x| &**x == tenant) {
                turn.push_back(tenant.into());
            }
        }
        self.entries.insert(t, Entry { cap, held });
        true
    }

    /// The next live timer waiting on `cap`, out of the queue: for a host, the first of the
    /// tenant whose turn it is (who then goes to the back of the rotation).
    pub fn pop(&mut self, cap: &Cap) -> Option<HeldBack> {
        let held = match cap {
            Cap::Tenant(t) => self.pop_fifo(&Fifo::Tenant(t.clone())),
            Cap::Host(target) => self.pop_turn(target),
        }?;
        self.tickets.remove(held.timer.identity());
        Some(held)
    }

    /// The first live timer of the next tenant in `target`'s rotation that has one.
    fn pop_turn(&mut self, target: &Target) -> Option<HeldBack> {
        loop {
            let tenant = self.rotation.get_mut(target)?.pop_front();
            let Some(tenant) = tenant else {
                self.rotation.remove(target);
                return None;
            };
            let fifo = Fifo::HostTenant(target.clone(), tenant.clone());
            let found = self.pop_fifo(&fifo);
            if self.fifos.contains_key(&fifo) {
                if let Some(turn) = self.rotation.get_mut(target) {
                    turn.push_back(tenant);
                }
            }
            if found.is_some() {
                return found;
            }
        }
    }

    /// The first live ticket's timer of one FIFO (stale ones before it dropped).
    fn pop_fifo(&mut self, f: &Fifo) -> Option<HeldBack> {
        let fifo = self.fifos.get_mut(f)?;
        let mut found = None;
        while let Some(t) = fifo.pop_front() {
            match self.entries.remove(&t) {
                Some(e) => {
                    found = Some(e.held);
                    break;
                }
                None => self.stale = self.stale.saturating_sub(1),
            }
        }
        if fifo.is_empty() {
            self.fifos.remove(f);
        }
        found
    }

    /// Takes the timer with `identity` out of its queue, if it waits in one. `true` if it did.
    pub fn forget(&mut self, identity: &[u8]) -> bool {
        let Some(t) = self.tickets.remove(identity) else {
            return false;
        };
        self.entries.remove(&t);
        self.stale += 1;
        if self.stale > self.entries.len() + 64 {
            self.sweep();
        }
        true
    }

    /// Drops every stale ticket.
    fn sweep(&mut self) {
        let entries = &self.entries;
        self.fifos.retain(|_, fifo| {
            fifo.retain(|t| entries.contains_key(t));
            !fifo.is_empty()
        });
        let fifos = &self.fifos;
        self.rotation.retain(|target, tenants| {
            tenants.retain(|t| fifos.contains_key(&Fifo::HostTenant(target.clone(), t.clone())));
            !tenants.is_empty()
        });
        self.stale = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(key: &str, version: u64) -> HeldBack {
        held_for("t", key, version)
    }

    fn held_for(tenant: &str, key: &str, version: u64) -> HeldBack {
        HeldBack {
            timer: PackedTimer::with_meta(tenant, key, b"m", b"").expect("short"),
            version,
        }
    }

    fn host() -> Cap {
        Cap::Host(Target {
            https: false,
            host: "h".into(),
            port: 80,
        })
    }

    fn id(key: &str) -> Box<[u8]> {
        held(key, 0).timer.identity().into()
    }

    #[test]
    fn a_timer_held_again_keeps_one_entry_and_its_place() {
        let mut q = Queues::default();
        assert!(q.hold(host(), held("a", 1)));
        assert!(q.hold(host(), held("b", 1)));
        for _ in 0..1000 {
            assert!(!q.hold(host(), held("a", 1)));
        }
        assert_eq!((q.len(), q.tickets()), (2, 2));
        assert_eq!(
            q.pop(&host()).map(|h| h.timer.key().to_string()).as_deref(),
            Some("a")
        );
        assert_eq!(
            q.pop(&host()).map(|h| h.timer.key().to_string()).as_deref(),
            Some("b")
        );
        assert!(q.pop(&host()).is_none() && q.is_empty());
    }

    #[test]
    fn a_forgotten_timer_is_never_woken_and_stale_tickets_stay_bounded() {
        let mut q = Queues::default();
        for round in 0..100u64 {
            for k in 0..100 {
                q.hold(host(), held(&format!("k{k}"), round));
            }
            for k in 0..100 {
                assert!(q.forget(&id(&format!("k{k}"))));
            }
            assert!(q.tickets() <= 2 * q.len() + 64, "{}", q.tickets());
        }
        q.hold(host(), held("live", 1));
        assert_eq!(
            q.pop(&host()).map(|h| h.timer.key().to_string()).as_deref(),
            Some("live")
        );
        assert!(q.pop(&host()).is_none());
        assert!(!q.forget(&id("live")));
    }

    #[test]
    fn a_hosts_slots_go_to_tenants_in_turn_not_in_arrival_order() {
        let mut q = Queues::default();
        for k in 0..100 {
            q.hold(host(), held_for("big", &format!("b{k}"), 1));
        }
        q.hold(host(), held_for("small", "s0", 1));
        q.hold(host(), held_for("small", "s1", 1));
        q.hold(host(), held_for("third", "x", 1));
        let order: Vec<String> = std::iter::from_fn(|| q.pop(&host()))
            .take(7)
            .map(|h| format!("{}/{}", h.timer.tenant(), h.timer.key()))
            .collect();
        assert_eq!(
            order,
            ["big/b0", "small/s0", "third/x", "big/b1", "small/s1", "big/b2", "big/b3"]
        );
        assert_eq!(q.waiting(&host()), 96);
        // A tenant whose only waiting timer was forgotten loses its turn without a stall.
        q.hold(host(), held_for("gone", "g", 1));
        let gone: Box<[u8]> = held_for("gone", "g", 1).timer.identity().into();
        assert!(q.forget(&gone));
        let rest: Vec<_> = std::iter::from_fn(|| q.pop(&host())).collect();
        assert_eq!(rest.len(), 96);
        assert!(rest.iter().all(|h| h.timer.tenant() == "big"));
        assert!(q.is_empty() && q.pop(&host()).is_none());
    }

    #[test]
    fn a_new_version_or_another_cap_goes_to_the_back() {
        let mut q = Queues::default();
        let tenant = Cap::Tenant("t".into());
        q.hold(host(), held("a", 1));
        q.hold(host(), held("b", 1));
        q.hold(host(), held("a", 2));
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(&host()).map(|h| h.version), Some(1));
        let a = q.pop(&host()).expect("a");
        assert_eq!((a.timer.key(), a.version), ("a", 2));
        q.hold(host(), held("c", 1));
        q.hold(tenant.clone(), held("c", 1));
        assert!(q.pop(&host()).is_none());
        assert_eq!(
            q.pop(&tenant).map(|h| h.timer.key().to_string()).as_deref(),
            Some("c")
        );
    }
}
