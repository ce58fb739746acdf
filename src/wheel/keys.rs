//! The timer table's key order: per tenant, the slab indices of its pending timers sorted by
//! key, for a listing by key prefix that reads only the page it answers.
//!
//! # Layout
//!
//! A tenant's timers are a row of *runs*: each run holds up to [`RUN_MAX`] slab indices
//! (4 bytes each, no key bytes), sorted by their timers' keys, every key of a run below every
//! key of the next. A tenant's *directory* (a `BTreeMap`) maps each run's *separator*, a copy
//! of the key its run began with when it was made, to the run: a key belongs to the last run
//! whose separator is at or below it; a key below them all goes to the first run, whose
//! separator is lowered to it. A separator stays valid as its run's keys leave (it is a
//! bound, not a member), so removals never touch the directory unless a run empties or
//! merges.
//!
//! Every slab index also has a *home*: the run that holds it (4 bytes, in chunks of
//! [`HOME_CHUNK`] that are never moved, allocated zeroed as the slab grows). A removal goes
//! through the home, straight to the run, and never compares a key: that is what lets the table
//! take fired timers out after its poll, when their slab entries (and keys) are gone already.
//!
//! # A walk-through
//!
//! Tenant `shop` holds 600 timers `order-0000` … `order-0599`, put in order: the first run
//! filled with `order-0000` … `order-0255`, and `order-0256` found it full at its end, so a new
//! run began with it (separator `order-0256`), as did `order-0512`. A PUT of `order-0300x`
//! takes the directory's last separator at or below it, `order-0256`, and a binary search in
//! that run (8 key comparisons, each through the table's slab entry) places it after
//! `order-0300`. Its DELETE reads the timer's home, finds it in that run by a scan of at most
//! 256 indices, and removes it. A listing of `prefix=order-03` starts the same way as the PUT
//! and then reads on, run after run in the directory's order, until a key leaves the prefix.
//!
//! # Invariants
//!
//! - Every pending timer's slab index is in exactly one run of its tenant, and its home names
//!   that run; a slab index that is not pending has no home.
//! - Within a run keys increase, every key of a run is at or above its separator and below
//!   the next run's; no run is empty, and no tenant without runs is kept.
//!
//! # Cost model
//!
//! Insert: a lookup of the tenant, O(log runs) in the directory (key bytes in the index's own
//! memory), then O(log [`RUN_MAX`]) comparisons through the table and a move of at most
//! [`RUN_MAX`] indices; a full run splits (its moved half's homes rewritten). Remove: O(1) to
//! the run, a scan and a move of at most [`RUN_MAX`] indices, a merge with a neighbour when
//! the run falls below a quarter of [`RUN_MAX`]. Listing: the insert's search, then O(1) per timer read.
//! Memory: about 4 bytes per pending timer in runs (over the runs' fill: a row put in key
//! order fills its runs, random order about 70%), 4 bytes per slab entry of home, and per run
//! a few dozen bytes and its separator twice: 8 to 12 bytes per pending timer in all.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

/// The most slab indices a run holds: a removal scans at most this many (1 KiB).
pub(crate) const RUN_MAX: usize = 256;

/// Homes per chunk, as the slab's chunks.
const HOME_CHUNK_BITS: u32 = 16;
const HOME_CHUNK: usize = 1 << HOME_CHUNK_BITS;
const HOME_MASK: u32 = (HOME_CHUNK as u32) - 1;

/// A home of 0 is none; run `r`'s homes hold `r + 1`.
const NO_HOME: u32 = 0;

struct Run {
    tenant: u32,
    /// Its key in the tenant's directory.
    separator: Box<[u8]>,
    handles: Vec<u32>,
}

struct Tenant {
    name: Box<str>,
    directory: BTreeMap<Box<[u8]>, u32>,
}

pub(crate) struct KeyIndex {
    /// [`RUN_MAX`], lowered by tests to reach splits and merges with few timers.
    run_max: usize,
    by_name: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
    tenants: Vec<Option<Tenant>>,
    free_tenants: Vec<u32>,
    runs: Vec<Run>,
    free_runs: Vec<u32>,
    homes: Vec<Box<[u32]>>,
    len: usize,
}

impl Default for KeyIndex {
    fn default() -> KeyIndex {
        KeyIndex {
            run_max: RUN_MAX,
            by_name: HashMap::default(),
            tenants: Vec::new(),
            free_tenants: Vec::new(),
            runs: Vec::new(),
            free_runs: Vec::new(),
            homes: Vec::new(),
            len: 0,
        }
    }
}

impl KeyIndex {
    /// Lowers the most a run holds (at least 4).
    #[cfg(test)]
    pub(crate) fn set_run_max(&mut self, n: usize) {
        self.run_max = n.max(4);
    }

    /// Slab indices held, one per pending timer.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes of the runs, the directories (an estimate: their nodes hold about 11 keys
    /// of 16 bytes and 11 values, at two-thirds full), the separators and the homes.
    pub fn heap_bytes(&self) -> usize {
        let runs: usize = self
            .runs
            .iter()
            .map(|r| r.handles.capacity() * 4 + 2 * r.separator.len())
            .sum();
        let entries: usize = self
            .tenants
            .iter()
            .flatten()
            .map(|t| t.directory.len())
            .sum();
        runs + self.runs.capacity() * std::mem::size_of::<Run>()
            + entries * 30
            + self.tenants.capacity() * std::mem::size_of::<Option<Tenant>>()
            + self.homes.len() * HOME_CHUNK * 4
    }

    /// Adds the slab index `handle` of the timer (`tenant`, `key`), not held yet. `key_of`
    /// gives the key of a pending timer by its slab index.
    pub fn insert<'k>(
        &mut self,
        tenant: &str,
        key: &[u8],
        handle: u32,
        key_of: impl Fn(u32) -> &'k [u8],
    ) {
        let t = self.tenant_id(tenant);
        let run = match self.run_at_or_below(t, key) {
            Some(run) => run,
            None => match self.directory(t).values().next().copied() {
                // Below every separator: the first run takes it, its separator lowered to it.
                Some(first) => {
                    let old =
                        std::mem::replace(&mut self.runs[first as usize].separator, key.into());
                    let directory = self.directory_mut(t);
                    directory.remove(&*old);
                    directory.insert(key.into(), first);
                    first
                }
                None => {
                    let run = self.new_run(t, key.into(), Vec::new());
                    self.directory_mut(t).insert(key.into(), run);
                    run
                }
            },
        };
        let at = self.runs[run as usize]
            .handles
            .partition_point(|&h| key_of(h) < key);
        let (run, at) = match self.runs[run as usize].handles.len() >= self.run_max {
            true => self.split(run, at, key, &key_of),
            false => (run, at),
        };
        let run_max = self.run_max;
        let handles = &mut self.runs[run as usize].handles;
        if handles.len() == handles.capacity() {
            // Doubling, never past a full run: `split` keeps `len < RUN_MAX` here.
            handles.reserve_exact(handles.len().max(4).min(run_max - handles.len()));
        }
        handles.insert(at, handle);
        self.set_home(handle, run);
        self.len += 1;
    }

    /// Takes `handle` out; nothing when it is not held. Compares no key.
    pub fn remove(&mut self, handle: u32) {
        let Some(run) = self.home(handle) else {
            return;
        };
        let handles = &mut self.runs[run as usize].handles;
        if let Some(at) = handles.iter().position(|&h| h == handle) {
            handles.remove(at);
            self.len -= 1;
        }
        self.set_home(handle, u32::MAX);
        self.settle(run);
    }

    /// Puts `new` where `old` was (the same timer in another slab entry). Compares no key.
    pub fn replace(&mut self, old: u32, new: u32) {
        let Some(run) = self.home(old) else {
            return;
        };
        if let Some(h) = self.runs[run as usize]
            .handles
            .iter_mut()
            .find(|h| **h == old)
        {
            *h = new;
        }
        self.set_home(old, u32::MAX);
        self.set_home(new, run);
    }

    /// Keeps the handles `keep` says yes to: one pass over every run, then empty runs
    /// dropped and small ones merged. Compares no key.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let mut gone = Vec::new();
        for run in &mut self.runs {
            run.handles.retain(|&h| {
                let kept = keep(h);
                if !kept {
                    gone.push(h);
                }
                kept
            });
        }
        self.len -= gone.len();
        for h in gone {
            self.set_home(h, u32::MAX);
        }
        for t in 0..self.tenants.len() {
            let Some(tenant) = &self.tenants[t] else {
                continue;
            };
            let row: Vec<u32> = tenant.directory.values().copied().collect();
            let mut before: Option<u32> = None;
            for run in row {
                let len = self.runs[run as usize].handles.len();
                if len == 0 {
                    self.drop_run(run);
                    continue;
                }
                match before {
                    Some(left) if self.mergeable(left, run) => self.merge(left, run),
                    _ => before = Some(run),
                }
            }
        }
    }

    /// Visits the handles of `tenant` by key, from the first whose key is at `start` or
    /// after it (strictly after when `after`), for as long as `visit` answers true.
    pub fn walk<'k>(
        &self,
        tenant: &str,
        start: &[u8],
        after: bool,
        key_of: impl Fn(u32) -> &'k [u8],
        mut visit: impl FnMut(u32) -> bool,
    ) {
        let Some(&t) = self.by_name.get(tenant) else {
            return;
        };
        let Some(first) = self.run_for(t, start) else {
            return;
        };
        let handles = &self.runs[first as usize].handles;
        let at = handles.partition_point(|&h| match after {
            true => key_of(h) <= start,
            false => key_of(h) < start,
        });
        for &h in &handles[at..] {
            if !visit(h) {
                return;
            }
        }
        let separator = &*self.runs[first as usize].separator;
        let rest = self
            .directory(t)
            .range::<[u8], _>((Bound::Excluded(separator), Bound::Unbounded));
        for (_, &run) in rest {
            for &h in &self.runs[run as usize].handles {
                if !visit(h) {
                    return;
                }
            }
        }
    }

    /// The run of tenant `t` whose separator is the last at or below `key`.
    fn run_at_or_below(&self, t: u32, key: &[u8]) -> Option<u32> {
        self.directory(t)
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .map(|(_, &run)| run)
    }

    /// The run of tenant `t` where keys from `key` on begin: the last whose separator is at
    /// or below it, else the first; `None` when the tenant has none.
    fn run_for(&self, t: u32, key: &[u8]) -> Option<u32> {
        self.run_at_or_below(t, key)
            .or_else(|| self.directory(t).values().next().copied())
    }

    /// Splits the full `run`, about to take `key` at `at`: the run and position it goes to
    /// then. A key going after every other one (keys arriving in order) starts a run of its
    /// own, so that runs filled in key order stay full.
    fn split<'k>(
        &mut self,
        run: u32,
        at: usize,
        key: &[u8],
        key_of: &impl Fn(u32) -> &'k [u8],
    ) -> (u32, usize) {
        let len = self.runs[run as usize].handles.len();
        let t = self.runs[run as usize].tenant;
        if at == len {
            let new = self.new_run(t, key.into(), Vec::with_capacity(4));
            self.directory_mut(t).insert(key.into(), new);
            return (new, 0);
        }
        let mid = len / 2;
        let mut tail = Vec::with_capacity(self.run_max);
        tail.extend_from_slice(&self.runs[run as usize].handles[mid..]);
        self.runs[run as usize].handles.truncate(mid);
        let separator: Box<[u8]> = key_of(tail[0]).into();
        let new = self.new_run(t, separator.clone(), tail);
        self.directory_mut(t).insert(separator, new);
        for i in 0..self.runs[new as usize].handles.len() {
            let h = self.runs[new as usize].handles[i];
            self.set_home(h, new);
        }
        match at <= mid {
            true => (run, at),
            false => (new, at - mid),
        }
    }

    fn tenant_id(&mut self, tenant: &str) -> u32 {
        if let Some(&t) = self.by_name.get(tenant) {
            return t;
        }
        let made = Tenant {
            name: tenant.into(),
            directory: BTreeMap::new(),
        };
        let t = match self.free_tenants.pop() {
            Some(t) => {
                self.tenants[t as usize] = Some(made);
                t
            }
            None => {
                self.tenants.push(Some(made));
                (self.tenants.len() - 1) as u32
            }
        };
        self.by_name.insert(tenant.into(), t);
        t
    }

    fn directory(&self, t: u32) -> &BTreeMap<Box<[u8]>, u32> {
        match &self.tenants[t as usize] {
            Some(tenant) => &tenant.directory,
            None => unreachable!("tenant {t} of the key index is not held"),
        }
    }

    fn directory_mut(&mut self, t: u32) -> &mut BTreeMap<Box<[u8]>, u32> {
        match &mut self.tenants[t as usize] {
            Some(tenant) => &mut tenant.directory,
            None => unreachable!("tenant {t} of the key index is not held"),
        }
    }

    fn new_run(&mut self, tenant: u32, separator: Box<[u8]>, handles: Vec<u32>) -> u32 {
        let run = Run {
            tenant,
            separator,
            handles,
        };
        match self.free_runs.pop() {
            Some(r) => {
                self.runs[r as usize] = run;
                r
            }
            None => {
                self.runs.push(run);
                (self.runs.len() - 1) as u32
            }
        }
    }

    /// After a removal from `run`: dropped when empty, merged with a neighbour when small.
    fn settle(&mut self, run: u32) {
        let len = self.runs[run as usize].handles.len();
        if len == 0 {
            self.drop_run(run);
            return;
        }
        if len >= self.run_max / 4 {
            return;
        }
        let (t, separator) = {
            let r = &self.runs[run as usize];
            (r.tenant, &*r.separator)
        };
        let directory = self.directory(t);
        let next = directory
            .range::<[u8], _>((Bound::Excluded(separator), Bound::Unbounded))
            .next()
            .map(|(_, &r)| r);
        let before = directory
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(separator)))
            .next_back()
            .map(|(_, &r)| r);
        if let Some(next) = next.filter(|&n| self.mergeable(run, n)) {
            self.merge(run, next);
        } else if let Some(before) = before.filter(|&b| self.mergeable(b, run)) {
            self.merge(before, run);
        }
    }

    fn mergeable(&self, left: u32, right: u32) -> bool {
        let (l, r) = (
            self.runs[left as usize].handles.len(),
            self.runs[right as usize].handles.len(),
        );
        // Filled to three quarters at most, so that the merged run does not split again at
        // the next insert.
        let min = self.run_max / 4;
        (l < min || r < min) && l + r <= self.run_max * 3 / 4
    }

    /// Moves the handles of `right`, the run after `left`, to the end of `left`.
    fn merge(&mut self, left: u32, right: u32) {
        let moved = std::mem::take(&mut self.runs[right as usize].handles);
        for &h in &moved {
            self.set_home(h, left);
        }
        let handles = &mut self.runs[left as usize].handles;
        handles.reserve_exact(moved.len());
        handles.extend_from_slice(&moved);
        self.drop_run(right);
    }

    /// Takes the empty (or emptied by a merge) `run` out of its tenant's directory, and the
    /// tenant out when it has no run left.
    fn drop_run(&mut self, run: u32) {
        let r = &mut self.runs[run as usize];
        let (t, separator) = (r.tenant, std::mem::take(&mut r.separator));
        r.handles = Vec::new();
        r.tenant = u32::MAX;
        self.free_runs.push(run);
        let directory = self.directory_mut(t);
        if directory.get(&*separator) == Some(&run) {
            directory.remove(&*separator);
        }
        if directory.is_empty() {
            if let Some(tenant) = self.tenants[t as usize].take() {
                self.by_name.remove(&tenant.name);
            }
            self.free_tenants.push(t);
        }
    }

    fn home(&self, handle: u32) -> Option<u32> {
        let chunk = self.homes.get((handle >> HOME_CHUNK_BITS) as usize)?;
        match chunk[(handle & HOME_MASK) as usize] {
            NO_HOME => None,
            h => Some(h - 1),
        }
    }

    /// Sets the home of `handle` to `run`; `u32::MAX` clears it.
    fn set_home(&mut self, handle: u32, run: u32) {
        let chunk = (handle >> HOME_CHUNK_BITS) as usize;
        while self.homes.len() <= chunk {
            // Zeroed: pages the allocator takes fresh from the system are touched only as
            // homes are written.
            self.homes
                .push(vec![NO_HOME; HOME_CHUNK].into_boxed_slice());
        }
        self.homes[chunk][(handle & HOME_MASK) as usize] = run.wrapping_add(1);
    }
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
