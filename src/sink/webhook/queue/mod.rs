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
//! or on the other kind of queue, puts it at the back. Forgetting it (cancelled, replaced, its
//! delivery started, it became a dead letter) takes it out at once.
//!
//! This runs inside the shard's fire poll, one hold per held-back fire, and a burst due to one
//! slow host holds a million timers at once; so no step may copy what is already held:
//!
//! - each held timer is a slot in chunks of `CHUNK` that never move, linked into its FIFO
//!   both ways, so a forget unlinks it in place (no stale entries, no sweep);
//! - its identity is found through `PARTS` hash tables of (hash, slot) chosen by the
//!   identity's hash, so a growth step rehashes one part, never the whole index.
//!
//! A growth step is then at most a chunk (128 KiB, its pages written as it fills) or one
//! part's doubling (1/1,024 of the index). Cost per hold, pop or forget: one hash of the
//! identity and a probe of one part.
//!
//! # The files
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the FIFOs and the hosts' rotation: which timer a freed slot goes to ([`Queues`]) |
//! | `slots.rs` | where a held timer lies: the chunked slots, their free list, and the index by identity |
//! | `tests.rs` | the queues against a plain model, and a million held |
//!
//! The queues keep what their largest burst grew, about 50 bytes per timer held at the peak,
//! and take those slots again in the next burst. Giving them back when the queues empty was
//! measured at 33–72 ms for a million (the allocator returning 50 MB of pages), one stop of
//! the shard; the maps these queues replaced kept about 190 bytes per timer, also for good.

mod slots;
#[cfg(test)]
mod tests;

pub(crate) use slots::HeldBack;

use super::settings::{Map, Target};
use slots::{Slot, Slots, NIL};
use std::collections::VecDeque;

/// Which cap holds a timer back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Cap {
    Host(Target),
    Tenant(Box<str>),
}

/// A FIFO's ends and length, and which cap and tenant it is for.
struct Fifo {
    head: u32,
    tail: u32,
    len: usize,
    of: Owner,
}

/// What a FIFO queues: a tenant's timers waiting on a host, or a tenant's on its own cap.
enum Owner {
    HostTenant(Target, Box<str>),
    Tenant(Box<str>),
}

/// A host's FIFOs, one per tenant, and the tenants whose turn comes next (each at most once;
/// every tenant with a FIFO here is in it).
#[derive(Default)]
struct Host {
    fifos: Map<Box<str>, u32>,
    turn: VecDeque<Box<str>>,
}

/// The timers held back by a cap, in arrival order per FIFO, tenants in turn per host.
#[derive(Default)]
pub(crate) struct Queues {
    slots: Slots,
    fifos: Vec<Fifo>,
    /// FIFOs emptied, whose places are taken again first.
    free_fifos: Vec<u32>,
    hosts: Map<Target, Host>,
    tenants: Map<Box<str>, u32>,
    len: usize,
}

impl Queues {
    /// Timers held (one entry each).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Timers waiting on `cap`.
    pub fn waiting(&self, cap: &Cap) -> usize {
        let len = |id: &u32| self.fifos[*id as usize].len;
        match cap {
            Cap::Host(t) => self
                .hosts
                .get(t)
                .map_or(0, |h| h.fifos.values().map(len).sum()),
            Cap::Tenant(t) => self.tenants.get(t).map_or(0, len),
        }
    }

    /// Holds `held` back on `cap`. `true` when it was not held before (one more timer held);
    /// `false` when it was, in this queue or moved to the back of another (as many held as
    /// before), and when the shard holds `u32::MAX - 1` timers already and this one waits for
    /// its safety net instead.
    pub fn hold(&mut self, cap: Cap, held: HeldBack) -> bool {
        let id = held.timer.identity();
        let hash = self.slots.hash(id);
        let found = self.slots.find(hash, id);
        if let Some(at) = found {
            let fifo = self.fifo_of(&cap, held.timer.tenant());
            let slot = self.slots.get_mut(at);
            if Some(slot.fifo) == fifo
                && slot
                    .held
                    .as_ref()
                    .is_some_and(|h| h.version == held.version)
            {
                // The same wait: it keeps its place, with the latest metadata.
                slot.held = Some(held);
                return false;
            }
            self.take(hash, at);
        }
        let Some(slot) = self.slots.alloc() else {
            return false;
        };
        let fifo = self.fifo_for(cap, held.timer.tenant());
        let tail = std::mem::replace(&mut self.fifos[fifo as usize].tail, slot);
        *self.slots.get_mut(slot) = Slot {
            held: Some(held),
            prev: tail,
            next: NIL,
            fifo,
        };
        match tail {
            NIL => self.fifos[fifo as usize].head = slot,
            t => self.slots.get_mut(t).next = slot,
        }
        self.fifos[fifo as usize].len += 1;
        self.slots.index(hash, slot);
        self.len += 1;
        found.is_none()
    }

    /// The next timer waiting on `cap`, out of the queue: for a host, the first of the tenant
    /// whose turn it is (who then goes to the back of the rotation).
    pub fn pop(&mut self, cap: &Cap) -> Option<HeldBack> {
        let fifo = match cap {
            Cap::Tenant(t) => *self.tenants.get(t)?,
            Cap::Host(target) => self.next_turn(target)?,
        };
        let slot = self.fifos[fifo as usize].head;
        let id = self.slots.get(slot).held.as_ref()?.timer.identity();
        let hash = self.slots.hash(id);
        self.take(hash, slot)
    }

    /// The FIFO of the next tenant in `target`'s rotation that has one, that tenant moved to
    /// the back. Tenants whose FIFO emptied meanwhile leave the rotation here.
    fn next_turn(&mut self, target: &Target) -> Option<u32> {
        let host = self.hosts.get_mut(target)?;
        while let Some(tenant) = host.turn.pop_front() {
            if let Some(&fifo) = host.fifos.get(&tenant) {
                host.turn.push_back(tenant);
                return Some(fifo);
            }
        }
        self.hosts.remove(target);
        None
    }

    /// Takes the timer with `identity` out of its queue, if it waits in one. `true` if it did.
    pub fn forget(&mut self, identity: &[u8]) -> bool {
        let hash = self.slots.hash(identity);
        match self.slots.find(hash, identity) {
            Some(slot) => self.take(hash, slot).is_some(),
            None => false,
        }
    }

    /// Unlinks the timer in `slot` (whose identity hashes to `hash`) from its FIFO and the
    /// index, and frees its slot (and its FIFO, if that emptied).
    fn take(&mut self, hash: u64, slot: u32) -> Option<HeldBack> {
        self.slots.unindex(hash, slot);
        let s = self.slots.get_mut(slot);
        let held = s.held.take()?;
        let (prev, next, fifo) = (s.prev, s.next, s.fifo);
        match prev {
            NIL => self.fifos[fifo as usize].head = next,
            p => self.slots.get_mut(p).next = next,
        }
        match next {
            NIL => self.fifos[fifo as usize].tail = prev,
            n => self.slots.get_mut(n).prev = prev,
        }
        self.slots.release(slot);
        self.len -= 1;
        let f = &mut self.fifos[fifo as usize];
        f.len -= 1;
        if f.len == 0 {
            self.free_fifo(fifo);
        }
        Some(held)
    }

    /// The FIFO that holds `tenant`'s timers on `cap`, if it has any.
    fn fifo_of(&self, cap: &Cap, tenant: &str) -> Option<u32> {
        match cap {
            Cap::Host(t) => self.hosts.get(t)?.fifos.get(tenant).copied(),
            Cap::Tenant(t) => self.tenants.get(t).copied(),
        }
    }

    /// [`Self::fifo_of`], made (and the tenant put in the host's rotation) when there is none.
    fn fifo_for(&mut self, cap: Cap, tenant: &str) -> u32 {
        if let Some(f) = self.fifo_of(&cap, tenant) {
            return f;
        }
        let of = match &cap {
            Cap::Host(t) => Owner::HostTenant(t.clone(), tenant.into()),
            Cap::Tenant(t) => Owner::Tenant(t.clone()),
        };
        let fifo = Fifo {
            head: NIL,
            tail: NIL,
            len: 0,
            of,
        };
        let id = match self.free_fifos.pop() {
            Some(id) => {
                self.fifos[id as usize] = fifo;
                id
            }
            None => {
                self.fifos.push(fifo);
                (self.fifos.len() - 1) as u32
            }
        };
        match cap {
            Cap::Host(t) => {
                let host = self.hosts.entry(t).or_default();
                host.fifos.insert(tenant.into(), id);
                if !host.turn.iter().any(|x| &**x == tenant) {
                    host.turn.push_back(tenant.into());
                }
            }
            Cap::Tenant(t) => {
                self.tenants.insert(t, id);
            }
        }
        id
    }

    /// Forgets an emptied FIFO. A host's tenant stays in its rotation until its turn comes.
    fn free_fifo(&mut self, fifo: u32) {
        match &self.fifos[fifo as usize].of {
            Owner::HostTenant(target, tenant) => {
                if let Some(host) = self.hosts.get_mut(target) {
                    host.fifos.remove(tenant);
                }
            }
            Owner::Tenant(t) => {
                self.tenants.remove(t);
            }
        }
        self.free_fifos.push(fifo);
    }

    /// Heap bytes of the slots and the index (not the FIFOs' names).
    #[cfg(test)]
    fn allocation_size(&self) -> usize {
        self.slots.allocation_size()
    }
}
