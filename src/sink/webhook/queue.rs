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
//! - each held timer is a slot in chunks of [`CHUNK`] that never move, linked into its FIFO
//!   both ways, so a forget unlinks it in place (no stale entries, no sweep);
//! - its identity is found through [`PARTS`] hash tables of (hash, slot) chosen by the
//!   identity's hash, so a growth step rehashes one part, never the whole index.
//!
//! A growth step is then at most a chunk (128 KiB, its pages written as it fills) or one
//! part's doubling (1/1,024 of the index). Cost per hold, pop or forget: one hash of the
//! identity and a probe of one part.
//!
//! The queues keep what their largest burst grew, about 50 bytes per timer held at the peak,
//! and take those slots again in the next burst. Giving them back when the queues empty was
//! measured at 33–72 ms for a million (the allocator returning 50 MB of pages), one stop of
//! the shard; the maps these queues replaced kept about 190 bytes per timer, also for good.

use super::settings::Target;
use super::Map;
use crate::timer::PackedTimer;
use hashbrown::HashTable;
use std::collections::VecDeque;
use std::hash::BuildHasher;

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

/// Slots per chunk: 128 KiB of 32-byte slots.
const CHUNK: usize = 4096;

/// Bits of an identity's hash that choose its part of the index: its top ones.
const PART_BITS: u32 = 10;

/// Parts of the index. Empty, they cost their headers: 32 KiB.
const PARTS: usize = 1 << PART_BITS;

/// No slot, no FIFO: the end of a list.
const NIL: u32 = u32::MAX;

/// A held timer in its FIFO, or a free slot (`held` `None`, `next` the next free one).
struct Slot {
    held: Option<HeldBack>,
    prev: u32,
    next: u32,
    fifo: u32,
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

/// Where the index finds a held timer: the low half of its identity's hash, and its slot.
#[derive(Clone, Copy)]
struct Ix {
    hash: u32,
    slot: u32,
}

/// The hash hashbrown places and filters an entry by: every bit of the kept half moves its top
/// seven bits (the probe filter) and its low bits (the bucket).
fn widen(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The timers held back by a cap, in arrival order per FIFO, tenants in turn per host.
pub(crate) struct Queues {
    chunks: Vec<Vec<Slot>>,
    /// The first free slot; free slots link through `next`.
    free: u32,
    fifos: Vec<Fifo>,
    /// FIFOs emptied, whose places are taken again first.
    free_fifos: Vec<u32>,
    hosts: Map<Target, Host>,
    tenants: Map<Box<str>, u32>,
    index: Vec<HashTable<Ix>>,
    /// Seeded at random: identities come from clients' registrations.
    hasher: foldhash::fast::RandomState,
    len: usize,
}

impl Default for Queues {
    fn default() -> Queues {
        Queues {
            chunks: Vec::new(),
            free: NIL,
            fifos: Vec::new(),
            free_fifos: Vec::new(),
            hosts: Map::default(),
            tenants: Map::default(),
            index: (0..PARTS).map(|_| HashTable::new()).collect(),
            hasher: foldhash::fast::RandomState::default(),
            len: 0,
        }
    }
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
        let hash = self.hasher.hash_one(id);
        let found = self.find(hash, id);
        if let Some(ix) = found {
            let fifo = self.fifo_of(&cap, held.timer.tenant());
            let slot = self.slot_mut(ix.slot);
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
            self.take(hash, ix.slot);
        }
        let Some(slot) = self.alloc() else {
            return false;
        };
        let fifo = self.fifo_for(cap, held.timer.tenant());
        let tail = std::mem::replace(&mut self.fifos[fifo as usize].tail, slot);
        *self.slot_mut(slot) = Slot {
            held: Some(held),
            prev: tail,
            next: NIL,
            fifo,
        };
        match tail {
            NIL => self.fifos[fifo as usize].head = slot,
            t => self.slot_mut(t).next = slot,
        }
        self.fifos[fifo as usize].len += 1;
        let lo = hash as u32;
        self.index[part(hash)].insert_unique(widen(lo), Ix { hash: lo, slot }, |ix| widen(ix.hash));
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
        let id = self.slot(slot).held.as_ref()?.timer.identity();
        let hash = self.hasher.hash_one(id);
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
        let hash = self.hasher.hash_one(identity);
        match self.find(hash, identity) {
            Some(ix) => self.take(hash, ix.slot).is_some(),
            None => false,
        }
    }

    fn find(&self, hash: u64, identity: &[u8]) -> Option<Ix> {
        let lo = hash as u32;
        self.index[part(hash)]
            .find(widen(lo), |ix| ix.hash == lo && self.is(ix.slot, identity))
            .copied()
    }

    fn is(&self, slot: u32, identity: &[u8]) -> bool {
        self.slot(slot)
            .held
            .as_ref()
            .is_some_and(|h| h.timer.identity() == identity)
    }

    /// Unlinks the timer in `slot` (whose identity hashes to `hash`) from its FIFO and the
    /// index, and frees its slot (and its FIFO, if that emptied).
    fn take(&mut self, hash: u64, slot: u32) -> Option<HeldBack> {
        let lo = hash as u32;
        if let Ok(entry) = self.index[part(hash)].find_entry(widen(lo), |ix| ix.slot == slot) {
            entry.remove();
        }
        let s = self.slot_mut(slot);
        let held = s.held.take()?;
        let (prev, next, fifo) = (s.prev, s.next, s.fifo);
        match prev {
            NIL => self.fifos[fifo as usize].head = next,
            p => self.slot_mut(p).next = next,
        }
        match next {
            NIL => self.fifos[fifo as usize].tail = prev,
            n => self.slot_mut(n).prev = prev,
        }
        let free = self.free;
        self.slot_mut(slot).next = free;
        self.free = slot;
        self.len -= 1;
        let f = &mut self.fifos[fifo as usize];
        f.len -= 1;
        if f.len == 0 {
            self.free_fifo(fifo);
        }
        Some(held)
    }

    /// A free slot, from the free list or the end of the last chunk (a new chunk when full).
    fn alloc(&mut self) -> Option<u32> {
        if self.free != NIL {
            let slot = self.free;
            self.free = self.slot(slot).next;
            return Some(slot);
        }
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            if self.chunks.len() >= (NIL as usize) / CHUNK {
                return None;
            }
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let n = self.chunks.len() - 1;
        let chunk = self.chunks.last_mut()?;
        chunk.push(Slot {
            held: None,
            prev: NIL,
            next: NIL,
            fifo: NIL,
        });
        u32::try_from(n * CHUNK + chunk.len() - 1).ok()
    }

    fn slot(&self, slot: u32) -> &Slot {
        let s = slot as usize;
        &self.chunks[s / CHUNK][s % CHUNK]
    }

    fn slot_mut(&mut self, slot: u32) -> &mut Slot {
        let s = slot as usize;
        &mut self.chunks[s / CHUNK][s % CHUNK]
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
        self.chunks.iter().map(Vec::capacity).sum::<usize>() * std::mem::size_of::<Slot>()
            + self
                .index
                .iter()
                .map(HashTable::allocation_size)
                .sum::<usize>()
    }
}

/// The part of the index an identity's hash goes to.
fn part(hash: u64) -> usize {
    (hash >> (64 - PART_BITS)) as usize
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

    impl Queues {
        /// Heap bytes of the slots and of the index part that `identity` goes to: the two a
        /// hold of it can grow.
        fn footprint_for(&self, identity: &[u8]) -> usize {
            self.chunks.iter().map(Vec::capacity).sum::<usize>() * std::mem::size_of::<Slot>()
                + self.index[part(self.hasher.hash_one(identity))].allocation_size()
        }

        /// Slots made, taken or free.
        fn slots(&self) -> usize {
            self.chunks.iter().map(Vec::len).sum()
        }
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
        assert_eq!((q.len(), q.waiting(&host()), q.slots()), (2, 2, 2));
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
    fn a_forgotten_timer_is_never_woken_and_its_slot_is_taken_again() {
        let mut q = Queues::default();
        for round in 0..100u64 {
            for k in 0..100 {
                q.hold(host(), held(&format!("k{k}"), round));
            }
            for k in 0..100 {
                assert!(q.forget(&id(&format!("k{k}"))));
            }
            assert_eq!((q.len(), q.waiting(&host())), (0, 0));
            assert_eq!(q.slots(), 100, "the same 100 slots, round after round");
        }
        q.hold(host(), held("live", 1));
        assert_eq!(
            q.pop(&host()).map(|h| h.timer.key().to_string()).as_deref(),
            Some("live")
        );
        assert!(q.pop(&host()).is_none());
        assert!(!q.forget(&id("live")));
    }

    /// A million timers held back on one host, as a burst due to one slow endpoint does inside
    /// one fire poll: no hold grows the queue by more than a chunk of slots or one part of the
    /// index. Maps keyed by ticket and by identity, as they were, grew by the whole of what
    /// was held at each power of two (about 190 MB in one step at a million).
    #[test]
    fn holding_a_million_grows_no_step_by_more_than_a_chunk_or_a_part() {
        let mut q = Queues::default();
        let n = 1 << 20;
        let mut largest = 0;
        let mut key = String::new();
        for k in 0..n {
            use std::fmt::Write;
            key.clear();
            let _ = write!(key, "order:{k:026}");
            let h = held(&key, 1);
            let before = q.footprint_for(h.timer.identity());
            let id: Box<[u8]> = h.timer.identity().into();
            assert!(q.hold(host(), h));
            largest = largest.max(q.footprint_for(&id) - before);
        }
        assert_eq!((q.len(), q.waiting(&host())), (n, n));
        // A chunk is 128 KiB; a part holds about n / PARTS = 1,024 entries, and its doubling to
        // 2,048 buckets adds about 18 KiB; one hold may do both. The whole is over 40 MB.
        assert!(
            largest <= CHUNK * std::mem::size_of::<Slot>() + (32 << 10),
            "one hold grew the queue {largest} bytes"
        );
        let total = q.allocation_size();
        assert!(total > 40 << 20, "{total}");
        // Every one is found by its identity, and they leave in order.
        assert!(q.forget(&id("order:00000000000000000000000007")));
        assert!(!q.forget(&id("order:00000000000000000000000007")));
        for k in (0..n).filter(|&k| k != 7).take(10) {
            let h = q.pop(&host()).expect("held");
            assert_eq!(h.timer.key(), format!("order:{k:026}"));
        }
        while q.pop(&host()).is_some() {}
        assert!(q.is_empty());
        // Emptied, it keeps its slots, and the next burst takes them again.
        let (slots, size) = (q.slots(), q.allocation_size());
        for k in 0..n {
            assert!(q.hold(host(), held(&format!("again:{k}"), 1)));
        }
        assert_eq!(q.slots(), slots);
        assert!(q.allocation_size() <= size + (size >> 3), "{size}");
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
        assert!(
            !q.hold(host(), held("a", 2)),
            "a new version: still one held"
        );
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(&host()).map(|h| h.version), Some(1));
        let a = q.pop(&host()).expect("a");
        assert_eq!((a.timer.key(), a.version), ("a", 2));
        q.hold(host(), held("c", 1));
        assert!(
            !q.hold(tenant.clone(), held("c", 1)),
            "moved: still one held"
        );
        assert!(q.pop(&host()).is_none());
        assert_eq!(
            q.pop(&tenant).map(|h| h.timer.key().to_string()).as_deref(),
            Some("c")
        );
    }

    /// A model FIFO: the cap (`None` for the tenant's own, `Some(h)` for host `h`) and the
    /// tenant.
    type Key = (Option<u8>, String);

    /// The queues as a plain model: a list of (key, version) per FIFO, the rotation per host,
    /// nothing shared.
    #[derive(Default)]
    struct Model {
        fifos: std::collections::BTreeMap<Key, VecDeque<(String, u64)>>,
        turn: std::collections::BTreeMap<u8, VecDeque<String>>,
    }

    impl Model {
        fn key(cap: Option<u8>, tenant: &str) -> Key {
            (cap, tenant.to_string())
        }

        fn find(&self, tenant: &str, key: &str) -> Option<(Key, usize, u64)> {
            self.fifos.iter().find_map(|(f, q)| {
                q.iter()
                    .position(|(k, _)| f.1 == tenant && k == key)
                    .map(|i| (f.clone(), i, q[i].1))
            })
        }

        fn remove(&mut self, f: &Key, i: usize) -> (String, u64) {
            let q = self.fifos.get_mut(f).expect("a FIFO");
            let out = q.remove(i).expect("in it");
            if q.is_empty() {
                self.fifos.remove(f);
            }
            out
        }

        fn hold(&mut self, cap: Option<u8>, tenant: &str, key: &str, version: u64) -> bool {
            let f = Self::key(cap, tenant);
            let found = self.find(tenant, key);
            if let Some((at, i, v)) = &found {
                if *at == f && *v == version {
                    return false;
                }
                self.remove(at, *i);
            }
            self.fifos
                .entry(f)
                .or_default()
                .push_back((key.to_string(), version));
            if let Some(h) = cap {
                let turn = self.turn.entry(h).or_default();
                if !turn.iter().any(|t| t == tenant) {
                    turn.push_back(tenant.to_string());
                }
            }
            found.is_none()
        }

        fn pop(&mut self, cap: Option<u8>, tenant: &str) -> Option<(String, String, u64)> {
            let f = match cap {
                None => Self::key(None, tenant),
                Some(h) => loop {
                    let turn = self.turn.get_mut(&h)?;
                    let Some(t) = turn.pop_front() else {
                        self.turn.remove(&h);
                        return None;
                    };
                    let f = Self::key(cap, &t);
                    if self.fifos.contains_key(&f) {
                        turn.push_back(t);
                        break f;
                    }
                },
            };
            self.fifos.get(&f)?;
            let (k, v) = self.remove(&f, 0);
            Some((f.1, k, v))
        }

        fn forget(&mut self, tenant: &str, key: &str) -> bool {
            match self.find(tenant, key) {
                Some((f, i, _)) => {
                    self.remove(&f, i);
                    true
                }
                None => false,
            }
        }

        fn waiting(&self, cap: Option<u8>, tenant: &str) -> usize {
            self.fifos
                .iter()
                .filter(|(f, _)| match cap {
                    None => f.0.is_none() && f.1 == tenant,
                    Some(_) => f.0 == cap,
                })
                .map(|(_, q)| q.len())
                .sum()
        }

        fn len(&self) -> usize {
            self.fifos.values().map(VecDeque::len).sum()
        }
    }

    fn cap_of(cap: Option<u8>, tenant: &str) -> Cap {
        match cap {
            Some(h) => Cap::Host(Target {
                https: false,
                host: format!("h{h}"),
                port: 80,
            }),
            None => Cap::Tenant(tenant.into()),
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Hold(Option<u8>, u8, u8, u64),
        Pop(Option<u8>, u8),
        Forget(u8, u8),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let cap = prop_oneof![Just(None), (0u8..2).prop_map(Some)];
        prop_oneof![
            5 => (cap.clone(), 0u8..3, 0u8..12, 0u64..3).prop_map(|(c, t, k, v)| Op::Hold(c, t, k, v)),
            3 => (cap, 0u8..3).prop_map(|(c, t)| Op::Pop(c, t)),
            2 => (0u8..3, 0u8..12).prop_map(|(t, k)| Op::Forget(t, k)),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]

        /// Holds, pops and forgets on two hosts and three tenants' own caps give what the
        /// plain model gives: which timer, in which order, how many wait on each cap. The
        /// slots are all taken again (a queue of `len` never has more than its peak).
        #[test]
        fn the_queues_do_what_a_plain_model_does(ops in proptest::collection::vec(op(), 1..200)) {
            let mut q = Queues::default();
            let mut m = Model::default();
            let mut peak = 0;
            for o in ops {
                match o {
                    Op::Hold(c, t, k, v) => {
                        let (t, k) = (format!("t{t}"), format!("k{k}"));
                        let got = q.hold(cap_of(c, &t), held_for(&t, &k, v));
                        proptest::prop_assert_eq!(got, m.hold(c, &t, &k, v), "{:?}", o);
                    }
                    Op::Pop(c, t) => {
                        let t = format!("t{t}");
                        let got = q.pop(&cap_of(c, &t)).map(|h| {
                            (h.timer.tenant().to_string(), h.timer.key().to_string(), h.version)
                        });
                        proptest::prop_assert_eq!(got, m.pop(c, &t), "{:?}", o);
                    }
                    Op::Forget(t, k) => {
                        let (t, k) = (format!("t{t}"), format!("k{k}"));
                        let id: Box<[u8]> = held_for(&t, &k, 0).timer.identity().into();
                        proptest::prop_assert_eq!(q.forget(&id), m.forget(&t, &k), "{:?}", o);
                    }
                }
                proptest::prop_assert_eq!(q.len(), m.len());
                peak = peak.max(q.len());
                for c in [None, Some(0), Some(1)] {
                    for t in ["t0", "t1", "t2"] {
                        proptest::prop_assert_eq!(q.waiting(&cap_of(c, t)), m.waiting(c, t));
                    }
                }
                proptest::prop_assert!(q.slots() <= peak.max(1));
            }
        }
    }

    /// A burst to one slow host, held back inside one fire poll: the longest single hold,
    /// forget and pop, and the totals. Run it with
    /// `cargo test --release --lib held_back_burst_figure -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn held_back_burst_figure() {
        use std::time::Instant;
        let n: usize = std::env::var("HELD_BACK_TIMERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let timers: Vec<HeldBack> = (0..n)
            .map(|k| HeldBack {
                timer: PackedTimer::with_meta("shop", &format!("order:{k:026}"), &[b'm'; 60], b"")
                    .expect("short"),
                version: 1,
            })
            .collect();
        let ids: Vec<Box<[u8]>> = timers.iter().map(|h| h.timer.identity().into()).collect();
        let mut q = Queues::default();
        let longest = |f: &mut dyn FnMut(usize), n: usize| {
            let (started, mut most) = (Instant::now(), 0u128);
            for i in 0..n {
                let t = Instant::now();
                f(i);
                most = most.max(t.elapsed().as_nanos());
            }
            (started.elapsed().as_secs_f64() * 1e3, most as f64 / 1e3)
        };
        let mut timers = timers.into_iter();
        let (hold_ms, hold_us) = longest(
            &mut |_| {
                let h = timers.next().expect("one each");
                q.hold(host(), h);
            },
            n,
        );
        let (forget_ms, forget_us) = longest(&mut |i| assert!(q.forget(&ids[2 * i])), n / 2);
        let (pop_ms, pop_us) = longest(&mut |_| assert!(q.pop(&host()).is_some()), n / 2);
        assert!(q.is_empty());
        println!(
            "{n} held: hold {hold_ms:.0} ms, longest {hold_us:.0} µs; forget half {forget_ms:.0} ms, longest {forget_us:.0} µs; pop the rest {pop_ms:.0} ms, longest {pop_us:.0} µs"
        );
    }
}
