//! The paged timers a shard holds in memory: for each, 40 bytes, and no key or payload.
//!
//! ```text
//!   Far { id: keyed 128-bit SipHash of the identity, deadline, version, at: (bucket, offset) }
//!   PARTS hash tables, chosen by the id's top bits, so that each grows on its own
//! ```
//!
//! A timer is found by its id, never by its key, which stays on disk. The id is SipHash-1-3
//! with a 128-bit output, under a key drawn from the OS at each start: a pseudorandom
//! function, so that no tenant can make two identities meet without the key, and the
//! chance that two of a shard's identities share an id is about n² / 2¹²⁹ (10⁻²² at
//! 100 million). `at` says where the record is, and a load takes a record only while the
//! entry still points at it: a record of a timer replaced or cancelled since is skipped.
//!
//! Parts: a table that doubles copies every entry in one step, 2.7 GB and about a second at
//! 67 million, on the shard's thread. Split into `PARTS` tables, a doubling moves at most
//! 1/`PARTS` of the entries: at 50 million on a shard, about 100,000 of them.
//!
//! A start inserts every paged timer it recovers, in the journal's order: each insert lands
//! in a random part, a cache miss and, over an index of gigabytes, a miss of the TLB's page
//! walk too. So a start's inserts ([`FarIndex::insert_recovered`]) are gathered [`BATCH`]
//! to a part and go in a part at a time, into memory the batch's first insert brought near;
//! [`FarIndex::recovered`] puts in what is left before anything reads the index.

use super::Loc;
use crate::units::UtcMicros;
use hashbrown::HashTable;
use siphasher::sip128::{Hasher128, SipHasher13};
use std::hash::Hasher;

/// Hash tables the entries are spread over.
const PARTS: usize = 1024;

/// A start's inserts gathered per part before they go in together (1.3 MB of batches).
const BATCH: usize = 32;

/// A paged timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Far {
    pub id: Id,
    pub deadline: UtcMicros,
    pub version: u64,
    pub at: Loc,
}

/// A timer's identity (tenant and key), hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Id([u64; 2]);

impl Id {
    fn part(self) -> usize {
        (self.0[0] >> 54) as usize % PARTS
    }
}

/// The keyed hash identities are indexed by.
#[derive(Clone)]
pub struct Keyed(SipHasher13);

impl Keyed {
    /// Under a key drawn from the OS; a fixed one only where the OS gives none.
    pub fn new() -> Keyed {
        let mut key = [0u8; 16];
        if let Err(e) = getrandom::fill(&mut key) {
            tracing::warn!(error = %e, "paging: no random key from the OS; identities are hashed under a fixed key");
        }
        Keyed(SipHasher13::new_with_key(&key))
    }

    pub fn id(&self, identity: &[u8]) -> Id {
        let mut h = self.0;
        h.write(identity);
        let h = h.finish128();
        Id([h.h1, h.h2])
    }

    /// [`Keyed::id`] of the identity of (`tenant`, `key`) (`PackedTimer::identity`: both
    /// lengths, then each), without putting it together; `None` when either is too long.
    pub fn id_of(&self, tenant: &str, key: &str) -> Option<Id> {
        let lengths = [
            u8::try_from(tenant.len()).ok()?,
            u8::try_from(key.len()).ok()?,
        ];
        let mut h = self.0;
        h.write(&lengths);
        h.write(tenant.as_bytes());
        h.write(key.as_bytes());
        let h = h.finish128();
        Some(Id([h.h1, h.h2]))
    }
}

/// The paged timers (see the module doc).
pub struct FarIndex {
    parts: Vec<HashTable<Far>>,
    /// Entries, those still in `batches` included.
    len: usize,
    /// A start's entries not in their parts yet, a batch per part; empty outside a start.
    batches: Vec<Vec<Far>>,
    /// The entries a start's inserts replaced, until [`FarIndex::recovered`].
    replaced: Vec<Far>,
}

impl Default for FarIndex {
    fn default() -> FarIndex {
        FarIndex {
            parts: (0..PARTS).map(|_| HashTable::new()).collect(),
            len: 0,
            batches: Vec::new(),
            replaced: Vec::new(),
        }
    }
}

impl FarIndex {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, id: Id) -> Option<&Far> {
        debug_assert!(self.batches.is_empty(), "read during a start's inserts");
        self.parts[id.part()].find(id.0[1], |f| f.id == id)
    }

    /// Inserts `far`; the entry it replaced, if any.
    pub fn insert(&mut self, far: Far) -> Option<Far> {
        debug_assert!(self.batches.is_empty(), "insert during a start's inserts");
        let old = put(&mut self.parts[far.id.part()], far);
        self.len += usize::from(old.is_none());
        old
    }

    /// Inserts `far`, recovered by a start, whose timers the journal hands over once each:
    /// gathered with its part's batch (see the module doc). Nothing may read the index until
    /// [`FarIndex::recovered`].
    pub fn insert_recovered(&mut self, far: Far) {
        if self.batches.is_empty() {
            self.batches = (0..PARTS).map(|_| Vec::with_capacity(BATCH)).collect();
        }
        let p = far.id.part();
        self.batches[p].push(far);
        self.len += 1;
        if self.batches[p].len() == BATCH {
            self.put_batch(p);
        }
    }

    /// Puts in what a start's inserts left in their batches; the entries an insert met and
    /// replaced (two timers whose ids are equal: the later replaced the earlier), all of the
    /// start's.
    pub fn recovered(&mut self) -> Vec<Far> {
        for p in 0..self.batches.len() {
            self.put_batch(p);
        }
        self.batches = Vec::new();
        std::mem::take(&mut self.replaced)
    }

    /// Puts in part `p`'s batch; the entries it replaced go to `replaced`.
    fn put_batch(&mut self, p: usize) {
        let (part, batch) = (&mut self.parts[p], &mut self.batches[p]);
        for far in batch.drain(..) {
            if let Some(old) = put(part, far) {
                self.len -= 1;
                self.replaced.push(old);
            }
        }
    }

    /// Room for about `n` more entries, spread over the parts as the ids will be: each takes
    /// its share less a standard deviation, so that no part is made a power of two larger
    /// than growing to its entries would make it (a start, which knows how many it recovers).
    pub fn reserve(&mut self, n: usize) {
        let share = n / PARTS;
        let room = share.saturating_sub((share as f64).sqrt() as usize);
        for part in &mut self.parts {
            part.reserve(room, |f| f.id.0[1]);
        }
    }

    pub fn remove(&mut self, id: Id) -> Option<Far> {
        self.remove_if(id, |_| true)
    }

    /// Removes the entry of `id` if it still points at `at` (a load taking its record).
    pub fn remove_at(&mut self, id: Id, at: Loc) -> Option<Far> {
        self.remove_if(id, |f| f.at == at)
    }

    fn remove_if(&mut self, id: Id, keep: impl FnOnce(&Far) -> bool) -> Option<Far> {
        debug_assert!(self.batches.is_empty(), "remove during a start's inserts");
        let part = &mut self.parts[id.part()];
        let found = part.find_entry(id.0[1], |f| f.id == id).ok()?;
        if !keep(found.get()) {
            return None;
        }
        let (far, _) = found.remove();
        self.len -= 1;
        Some(far)
    }
}

/// Inserts `far` into `part`; the entry it replaced, if any.
fn put(part: &mut HashTable<Far>, far: Far) -> Option<Far> {
    match part.entry(far.id.0[1], |f| f.id == far.id, |f| f.id.0[1]) {
        hashbrown::hash_table::Entry::Occupied(mut o) => Some(std::mem::replace(o.get_mut(), far)),
        hashbrown::hash_table::Entry::Vacant(v) => {
            v.insert(far);
            None
        }
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
