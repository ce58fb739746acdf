//! The shard's dead letters: webhook timers whose delivery failed for good, kept until they are
//! re-driven or discarded (and persisted by the store, which hands them back at start).
//!
//! At most one per (tenant, key): a later dead letter under the same key replaces the earlier.
//! Kept per tenant, ordered by key, so that a tenant's list (`GET /v1/dead/{tenant}`) is a
//! range read that pages by key across shards. A dead letter holds its tenant's quota slot
//! until it leaves, and takes room in its shard like a pending timer: pending timers and dead
//! letters together stay within the shard's capacity (`Shard::admit_room` refuses new keys
//! at the bound; a dead letter is never dropped to make room).
//!
//! A listing copies payloads only for the page: the engine first gathers the keys alone
//! from every shard (each with the size of its body), picks the page, and then asks for the
//! bodies in consecutive key ranges of at most `engine::BODIES_PER_ASK` bytes, so that no op
//! copies more than about a megabyte on the shard's thread.
//!
//! A purge (a partition dropped or reloaded, `load_drop.rs`) walks the letters by tenant, then
//! by key, from a cursor ([`DeadLetters::purge_from`]), so that it can stop when its slice is
//! over and go on at the next pass from the last (tenant, key) it looked at.
//!
//! Cost: a `BTreeMap` lookup by tenant and a `BTreeMap` operation by key per change; none of it
//! on the firing path.

use crate::op::DeadInfo;
use crate::sink::webhook;
use crate::store::DeadLetter;
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::collections::BTreeMap;
use std::ops::Bound;

/// One dead letter: its timer (tenant, key, final metadata, payload), version and deadline,
/// and how its delivery ended, read from the metadata once, when the letter is made (or
/// recovered). The store records it (`store::DeadLetter`) and the list shows it
/// (`op::DeadInfo`) under the same names.
pub(crate) struct Letter {
    pub timer: PackedTimer,
    pub version: u64,
    pub fire_at: UtcMicros,
    pub attempts: u32,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    /// `None` when the metadata could not be read.
    pub callback: Option<String>,
}

impl Letter {
    pub fn new(timer: PackedTimer, version: u64, fire_at: UtcMicros) -> Letter {
        let d = webhook::describe(timer.meta());
        let (attempts, last_status) = d
            .as_ref()
            .map_or((0, None), |d| (d.attempts, d.last_status));
        let (last_error, callback) = d.map_or((None, None), |d| (d.last_error, Some(d.callback)));
        Letter {
            timer,
            version,
            fire_at,
            attempts,
            last_status,
            last_error,
            callback,
        }
    }

    /// The letter as the store records it.
    pub fn stored(&self) -> DeadLetter<'_> {
        DeadLetter {
            timer: &self.timer,
            version: self.version,
            fire_at: self.fire_at,
            attempts: self.attempts,
            last_status: self.last_status,
            last_error: self.last_error.as_deref(),
            callback: self.callback.as_deref().unwrap_or(""),
        }
    }

    /// What [`Letter::info`] copies with `bodies`.
    fn body_bytes(&self) -> usize {
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        self.timer.meta().len()
            + self.timer.payload().len()
            + text(&self.last_error)
            + text(&self.callback)
    }

    /// The letter as the list shows it: without `bodies`, its key, version and deadline only.
    fn info(&self, key: &str, bodies: bool) -> DeadInfo {
        let mut info = DeadInfo::without_body(key, self.version, self.fire_at, self.body_bytes());
        if bodies {
            info.attempts = self.attempts;
            info.last_status = self.last_status;
            info.last_error.clone_from(&self.last_error);
            info.callback.clone_from(&self.callback);
            info.meta = self.timer.meta().to_vec();
            info.payload = self.timer.payload().to_vec();
        }
        info
    }
}

/// Dead letters a sliced purge looks at between two asks whether to stop
/// ([`DeadLetters::purge_from`]): a look hashes the letter's tenant and key to its partition
/// (tens of nanoseconds), so 256 looks are a few microseconds and the ask (a clock read, about
/// 20 ns) costs about 1%.
pub(crate) const PURGE_CHECK: usize = 256;

#[derive(Default)]
pub(crate) struct DeadLetters {
    /// Ordered by tenant too, so that a purge can go on from a (tenant, key).
    by_tenant: BTreeMap<Box<str>, BTreeMap<Box<str>, Letter>>,
    len: usize,
}

/// Where a purge of the dead letters goes on from ([`DeadLetters::purge_from`]).
#[derive(Default)]
pub(crate) struct PurgeCursor {
    /// `None`: from the first tenant. `Some((tenant, Some(key)))`: after `key` in `tenant`, then
    /// the tenants after it. `Some((tenant, None))`: the tenants after `tenant`.
    at: Option<(Box<str>, Option<Box<str>>)>,
}

impl DeadLetters {
    /// Files a dead letter; the one it replaced, if any.
    pub fn insert(&mut self, letter: Letter) -> Option<Letter> {
        let keys = self
            .by_tenant
            .entry(letter.timer.tenant().into())
            .or_default();
        let replaced = keys.insert(letter.timer.key().into(), letter);
        if replaced.is_none() {
            self.len += 1;
        }
        replaced
    }

    /// Dead letters held, all tenants together.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, tenant: &str, key: &str) -> Option<&Letter> {
        self.by_tenant.get(tenant)?.get(key)
    }

    pub fn remove(&mut self, tenant: &str, key: &str) -> Option<Letter> {
        let keys = self.by_tenant.get_mut(tenant)?;
        let letter = keys.remove(key)?;
        if keys.is_empty() {
            self.by_tenant.remove(tenant);
        }
        self.len -= 1;
        Some(letter)
    }

    /// Removes the dead letters after `cursor` whose (tenant, key) `pick` picks, by tenant then
    /// key, handing each to `removed`, and stops once `stop` answers true (asked every
    /// [`PURGE_CHECK`] letters looked at); whether it reached the last letter. For rare events
    /// (a partition dropped or reloaded): every letter is looked at.
    ///
    /// `cursor` is left after the last letter looked at, so a later call goes on from there:
    /// a letter removed meanwhile is not found, one filed meanwhile behind the cursor is not
    /// looked at (the caller keeps the picked ones from being filed until the purge ends).
    /// Each picked letter is removed, and handed to `removed`, once.
    pub fn purge_from(
        &mut self,
        cursor: &mut PurgeCursor,
        mut pick: impl FnMut(&str, &str) -> bool,
        mut removed: impl FnMut(Letter),
        mut stop: impl FnMut() -> bool,
    ) -> bool {
        let mut looked = 0;
        loop {
            let Some((tenant, after)) = self.next_run(cursor) else {
                return true;
            };
            let room = PURGE_CHECK - looked;
            let mut gone: Vec<Box<str>> = Vec::new();
            let (mut seen, mut last) = (0, None);
            if let Some(keys) = self.by_tenant.get(&tenant) {
                let from = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                for (k, _) in keys.range::<str, _>((from, Bound::Unbounded)).take(room) {
                    seen += 1;
                    last = Some(k);
                    if pick(&tenant, k) {
                        gone.push(k.clone());
                    }
                }
            }
            // A run shorter than its room reached the tenant's last key.
            let key = if seen < room { None } else { last.cloned() };
            self.remove_all(&tenant, gone, &mut removed);
            cursor.at = Some((tenant, key));
            looked += seen;
            if looked >= PURGE_CHECK {
                looked = 0;
                if stop() {
                    return false;
                }
            }
        }
    }

    /// The tenant a purge at `cursor` goes on in, and the key it goes on after (`None`: from
    /// the tenant's first); `None` past the last tenant.
    fn next_run(&self, cursor: &PurgeCursor) -> Option<(Box<str>, Option<Box<str>>)> {
        let after_tenant = match &cursor.at {
            None => Bound::Unbounded,
            Some((tenant, Some(key))) if self.by_tenant.contains_key(tenant) => {
                return Some((tenant.clone(), Some(key.clone())));
            }
            Some((tenant, _)) => Bound::Excluded(&**tenant),
        };
        self.by_tenant
            .range::<str, _>((after_tenant, Bound::Unbounded))
            .next()
            .map(|(tenant, _)| (tenant.clone(), None))
    }

    /// Removes `tenant`'s letters under `keys`, handing each to `removed`.
    fn remove_all(&mut self, tenant: &str, keys: Vec<Box<str>>, removed: &mut impl FnMut(Letter)) {
        for k in keys {
            if let Some(letter) = self.remove(tenant, &k) {
                removed(letter);
            }
        }
    }

    /// Up to `limit` of the tenant's dead letters with a key in (after, through], by key;
    /// without `bodies`, their keys, versions and deadlines only (nothing else is copied).
    pub fn list(
        &self,
        tenant: &str,
        (after, through): (Option<&str>, Option<&str>),
        limit: usize,
        bodies: bool,
    ) -> Vec<DeadInfo> {
        use std::ops::Bound;
        let Some(keys) = self.by_tenant.get(tenant) else {
            return Vec::new();
        };
        if let (Some(a), Some(t)) = (after, through) {
            if t <= a {
                return Vec::new();
            }
        }
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let to = through.map_or(Bound::Unbounded, Bound::Included);
        keys.range::<str, _>((from, to))
            .take(limit)
            .map(|(k, l)| l.info(k, bodies))
            .collect()
    }
}

#[cfg(test)]
#[path = "dead_tests.rs"]
mod tests;
