//! The paged timers' keys, in order per tenant, so that a listing by prefix (and a bulk
//! cancel, which lists) finds paged timers as it finds those in the wheel.
//!
//! ```text
//!   tenant → BTreeMap< first key of a block, block >
//!   block: up to BLOCK bytes of entries, by key: [shared: u8][suffix length: u8][suffix]
//!          each key written as the bytes it shares with the key before it and the rest
//! ```
//!
//! Front coding: a key is kept as what it does not share with the key before it, two bytes
//! and its own suffix. Keys of one tenant sorted side by side share most of their bytes
//! (`order-880123`, `order-880124`): 5 to 10 bytes a key where a `BTreeSet` of owned keys
//! costs about 60. An insert or a remove reads its block up to its key (at most `BLOCK`
//! bytes) and moves the bytes after it; a listing is the search to its block, then reads.
//!
//! Keys are those a timer may have (1 to 128 bytes of `[A-Za-z0-9._:-]`); one longer than
//! 255 bytes cannot be written, and [`PagedKeys::insert`] refuses it.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

/// A block is split in two once its entries pass this many bytes.
const BLOCK: usize = 1024;

/// Room a block grows by beyond what an insert needs, so that not every insert reallocates.
const SLACK: usize = 64;

/// The longest key a block can hold.
const MAX_KEY: usize = u8::MAX as usize;

/// A tenant's blocks, each under its first key.
type Blocks = BTreeMap<Box<[u8]>, Vec<u8>>;

/// The paged keys of every tenant of a shard (see the module doc).
#[derive(Default)]
pub struct PagedKeys {
    tenants: HashMap<Box<str>, Blocks>,
    len: usize,
}

impl PagedKeys {
    /// Keys held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Adds `key` of `tenant`; whether it was not there. `None` when it is too long to hold.
    pub fn insert(&mut self, tenant: &str, key: &str) -> Option<bool> {
        let key = key.as_bytes();
        if key.len() > MAX_KEY {
            return None;
        }
        let blocks = match self.tenants.get_mut(tenant) {
            Some(b) => b,
            None => self.tenants.entry(tenant.into()).or_default(),
        };
        let split_off = match blocks.range_mut::<[u8], _>(upto(key)).next_back() {
            Some((_, block)) => {
                if !insert_into(block, key) {
                    return Some(false);
                }
                split(block)
            }
            None => {
                // Before every block's first key (or the tenant's first): the first block
                // takes it, filed under it from now on.
                let mut block = blocks.pop_first().map(|(_, b)| b).unwrap_or_default();
                insert_into(&mut block, key);
                let rest = split(&mut block);
                blocks.insert(key.into(), block);
                rest
            }
        };
        self.len += 1;
        if let Some((mid, rest)) = split_off {
            blocks.insert(mid, rest);
        }
        Some(true)
    }

    /// Removes `key` of `tenant`; whether it was there.
    pub fn remove(&mut self, tenant: &str, key: &str) -> bool {
        let key = key.as_bytes();
        let Some(blocks) = self.tenants.get_mut(tenant) else {
            return false;
        };
        // The block's first key, when the block must be filed again (or dropped, emptied).
        let refile = match blocks.range_mut::<[u8], _>(upto(key)).next_back() {
            None => return false,
            Some((first, block)) => {
                if !remove_from(block, key) {
                    return false;
                }
                (block.is_empty() || &first[..] == key).then(|| first.clone())
            }
        };
        self.len -= 1;
        if let Some(first) = refile {
            if let Some(block) = blocks.remove(&first).filter(|b| !b.is_empty()) {
                blocks.insert(first_key(&block), block);
            }
        }
        if blocks.is_empty() {
            self.tenants.remove(tenant);
        }
        true
    }

    /// `tenant`'s keys from `start` on (after it when `after`), by key, to `f` until it
    /// answers `false`.
    pub fn walk(&self, tenant: &str, start: &str, after: bool, mut f: impl FnMut(&str) -> bool) {
        let Some(blocks) = self.tenants.get(tenant) else {
            return;
        };
        let start = start.as_bytes();
        let from = match blocks.range::<[u8], _>(upto(start)).next_back() {
            Some((first, _)) => Bound::Included(&first[..]),
            None => Bound::Unbounded,
        };
        for (_, block) in blocks.range::<[u8], _>((from, Bound::Unbounded)) {
            let mut c = Cursor::new(block);
            while c.advance().is_some() {
                let k = c.key();
                if k < start || (after && k == start) {
                    continue;
                }
                // Only keys of `str`s go in.
                let Ok(k) = std::str::from_utf8(k) else {
                    continue;
                };
                if !f(k) {
                    return;
                }
            }
        }
    }

    /// Bytes of memory the keys take, about: the blocks' buffers and their map entries.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        // A map entry: its boxed first key, the block's `Vec`, and about a node's share.
        const ENTRY: usize = 16 + 24 + 16;
        self.tenants
            .iter()
            .map(|(t, blocks)| {
                t.len()
                    + 64
                    + blocks
                        .iter()
                        .map(|(f, b)| ENTRY + f.len() + b.capacity())
                        .sum::<usize>()
            })
            .sum()
    }
}

/// The blocks whose first key is `key` or before it.
fn upto(key: &[u8]) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (Bound::Unbounded, Bound::Included(key))
}

/// The tenant and key of an identity (`PackedTimer::identity`: both lengths, then each).
pub fn parts(identity: &[u8]) -> Option<(&str, &str)> {
    let (t, k) = (
        usize::from(*identity.first()?),
        usize::from(*identity.get(1)?),
    );
    let tenant = std::str::from_utf8(identity.get(2..2 + t)?).ok()?;
    let key = std::str::from_utf8(identity.get(2 + t..2 + t + k)?).ok()?;
    Some((tenant, key))
}

/// Reads a block's entries in order, each key whole.
struct Cursor<'a> {
    block: &'a [u8],
    pos: usize,
    key: [u8; MAX_KEY],
    len: usize,
}

impl<'a> Cursor<'a> {
    fn new(block: &'a [u8]) -> Cursor<'a> {
        Cursor {
            block,
            pos: 0,
            key: [0; MAX_KEY],
            len: 0,
        }
    }

    /// Goes to the next entry: where it starts, or `None` past the last (or a malformed one).
    fn advance(&mut self) -> Option<usize> {
        let at = self.pos;
        let (&shared, &n) = (self.block.get(at)?, self.block.get(at + 1)?);
        let (shared, n) = (usize::from(shared), usize::from(n));
        let suffix = self.block.get(at + 2..at + 2 + n)?;
        if shared > self.len || shared + n > MAX_KEY {
            return None;
        }
        self.key[shared..shared + n].copy_from_slice(suffix);
        self.len = shared + n;
        self.pos = at + 2 + n;
        Some(at)
    }

    fn key(&self) -> &[u8] {
        &self.key[..self.len]
    }
}

fn shared_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The entry of `key` after `prev`.
fn entry(prev: &[u8], key: &[u8]) -> ([u8; 2], usize) {
    let shared = shared_len(prev, key).min(MAX_KEY);
    // Both at most MAX_KEY: `insert` refuses longer keys.
    let head = [shared as u8, (key.len() - shared) as u8];
    (head, shared)
}

fn push_entry(out: &mut Vec<u8>, prev: &[u8], key: &[u8]) {
    let (head, shared) = entry(prev, key);
    out.extend_from_slice(&head);
    out.extend_from_slice(&key[shared..]);
}

/// Puts `key` into `block` in its place; `false` when it is there already.
fn insert_into(block: &mut Vec<u8>, key: &[u8]) -> bool {
    let mut c = Cursor::new(block);
    let mut prev = [0u8; MAX_KEY];
    let mut prev_len = 0;
    // Where the first key after `key` starts, and that key.
    let mut next: Option<(usize, usize, [u8; MAX_KEY], usize)> = None;
    while let Some(at) = c.advance() {
        let k = c.key();
        if k == key {
            return false;
        }
        if k > key {
            let mut whole = [0u8; MAX_KEY];
            whole[..k.len()].copy_from_slice(k);
            next = Some((at, c.pos, whole, k.len()));
            break;
        }
        prev[..k.len()].copy_from_slice(k);
        prev_len = k.len();
    }
    let end = c.pos;
    let mut put = Vec::with_capacity(2 * (key.len() + 2));
    push_entry(&mut put, &prev[..prev_len], key);
    let (from, to) = match next {
        Some((at, after, whole, n)) => {
            push_entry(&mut put, key, &whole[..n]);
            (at, after)
        }
        None => (end, end),
    };
    let grows = put.len() - (to - from);
    if block.capacity() < block.len() + grows {
        block.reserve_exact(grows + SLACK);
    }
    block.splice(from..to, put);
    true
}

/// Takes `key` out of `block`; `false` when it is not there.
fn remove_from(block: &mut Vec<u8>, key: &[u8]) -> bool {
    let mut c = Cursor::new(block);
    let mut prev = [0u8; MAX_KEY];
    let mut prev_len = 0;
    let found = loop {
        let Some(at) = c.advance() else {
            return false;
        };
        let k = c.key();
        if k == key {
            break at;
        }
        if k > key {
            return false;
        }
        prev[..k.len()].copy_from_slice(k);
        prev_len = k.len();
    };
    let after = c.pos;
    let mut put = Vec::new();
    let to = match c.advance() {
        Some(_) => {
            push_entry(&mut put, &prev[..prev_len], c.key());
            c.pos
        }
        None => after,
    };
    block.splice(found..to, put);
    true
}

/// The first key of a block that holds any.
fn first_key(block: &[u8]) -> Box<[u8]> {
    let mut c = Cursor::new(block);
    c.advance();
    c.key().into()
}

/// Splits `block` about its middle once it is over `BLOCK` bytes: the second half, and its
/// first key; `None` if it is not over, or holds a single entry.
fn split(block: &mut Vec<u8>) -> Option<(Box<[u8]>, Vec<u8>)> {
    if block.len() <= BLOCK {
        return None;
    }
    let half = block.len() / 2;
    let mut c = Cursor::new(block);
    let mut mid = None;
    while let Some(at) = c.advance() {
        if at > 0 && at >= half {
            mid = Some((at, c.pos));
            break;
        }
    }
    let (at, after) = mid?;
    let first: Box<[u8]> = c.key().into();
    let mut rest = Vec::with_capacity(block.len() - at + first.len() + SLACK);
    push_entry(&mut rest, &[], &first);
    rest.extend_from_slice(&block[after..]);
    block.truncate(at);
    block.shrink_to(at + SLACK);
    Some((first, rest))
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
