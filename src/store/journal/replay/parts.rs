//! The replay index in parts: [`PARTS`] hash tables, chosen by the top bits of the 32 hash
//! bits each entry keeps, so that a growth step rehashes one part, never the whole index.
//!
//! Compaction builds this index on the shard's own thread, one record per paced step; a
//! single table's doubling is one step that cannot be cut, and with ten million identities in
//! the sealed segments it moved 200 MB into fresh pages at once, stopping the shard's fires
//! for about as long as it stops them at start (tens to hundreds of milliseconds). A part
//! holds 1/4,096 of the entries (about 2,400 at ten million), so a growth step is a few
//! microseconds. Empty, the parts cost their headers: 96 KiB.
//!
//! # A part: lines of five
//!
//! A part is an open-addressed table of cache lines ([`Line`]), each holding up to five
//! entries and their count: an identity's probe starts at the line its hash chooses and walks
//! on, line by line, past full ones. The index never removes an entry (a gone timer's entry
//! stays, marked gone), so a line that is not full ends every probe that reaches it, and a
//! part grows (doubles) before it is [`MAX_LOAD`] full, so that such a line always exists.
//!
//! The point of the layout: a probe is one line, whose address the hash alone gives. So the
//! start's indexing, which probes once per record in an index far larger than the caches
//! (800 MB per shard at fifty million timers), asks for the line ([`Parts::prefetch`]) a few
//! records before it probes, and the misses of consecutive records overlap instead of
//! following one another. A `hashbrown` table, which this replaced, keeps control bytes and
//! entries apart and does not say where either lies: a probe was two misses in a row, and
//! the index half of a start's indexing time (`cargo bench --bench pending`).
//!
//! Memory: 64 bytes a line, 12.8 bytes an entry full, 14.6 at [`MAX_LOAD`], twice that just
//! after a doubling; a hashbrown table of these entries takes 13 bytes a bucket at the same
//! loads.

use super::{widen, Loc};

/// Bits of the kept hash that choose the part: its top ones. A part places an entry by the
/// high half of the widened hash ([`Part::home`]), which every kept bit moves: it is not
/// fixed within a part.
const PART_BITS: u32 = 12;

/// Parts of an index.
pub(super) const PARTS: usize = 1 << PART_BITS;

/// Entries in a line: five of 12 bytes and their count fill 64.
const PER_LINE: usize = 5;

/// The fullest a part gets, as a fraction of its entries' room: 7/8. At that load, with five
/// entries to a line, a probe for an identity that is not there reads about two lines.
const MAX_LOAD: (usize, usize) = (7, 8);

/// Up to [`PER_LINE`] entries, in the order they were added, and how many there are: one
/// cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line {
    len: u32,
    locs: [Loc; PER_LINE],
}

const _: () = assert!(std::mem::size_of::<Line>() == 64);

impl Line {
    const EMPTY: Line = Line {
        len: 0,
        locs: [Loc {
            hash: 0,
            src: 0,
            off: 0,
        }; PER_LINE],
    };

    fn entries(&self) -> &[Loc] {
        &self.locs[..self.len as usize]
    }

    fn is_full(&self) -> bool {
        self.len as usize == PER_LINE
    }

    fn push(&mut self, loc: Loc) {
        debug_assert!(!self.is_full(), "a push onto a full line");
        self.locs[self.len as usize] = loc;
        self.len += 1;
    }
}

/// One part: a power of two of lines (none until the first entry).
#[derive(Default)]
struct Part {
    lines: Box<[Line]>,
    len: usize,
}

impl Part {
    /// The line where `hash`'s probe starts.
    fn home(&self, hash: u32) -> usize {
        // The high half of the widened hash: a mix of all 32 kept bits.
        ((widen(hash) >> 32) as usize) & (self.lines.len() - 1)
    }

    fn next(&self, line: usize) -> usize {
        (line + 1) & (self.lines.len() - 1)
    }

    fn find_slot(&self, hash: u32, mut is: impl FnMut(&Loc) -> bool) -> Option<(usize, usize)> {
        if self.lines.is_empty() {
            return None;
        }
        let mut at = self.home(hash);
        loop {
            let line = &self.lines[at];
            if let Some(i) = line.entries().iter().position(|l| l.hash == hash && is(l)) {
                return Some((at, i));
            }
            if !line.is_full() {
                return None;
            }
            at = self.next(at);
        }
    }

    /// Adds `loc` (its identity not held), growing first when the part is full.
    fn insert_unique(&mut self, loc: Loc) {
        let room = self.lines.len() * PER_LINE;
        if (self.len + 1) * MAX_LOAD.1 > room * MAX_LOAD.0 {
            self.grow();
        }
        self.place(loc);
        self.len += 1;
    }

    /// Puts `loc` in the first line with room from its home: one exists while the part is
    /// under [`MAX_LOAD`].
    fn place(&mut self, loc: Loc) {
        let mut at = self.home(loc.hash);
        while self.lines[at].is_full() {
            at = self.next(at);
        }
        self.lines[at].push(loc);
    }

    /// Doubles the lines (one line at first) and places every entry again by its kept hash:
    /// no frame is read.
    fn grow(&mut self) {
        let lines = (self.lines.len() * 2).max(1);
        let old = std::mem::replace(&mut self.lines, vec![Line::EMPTY; lines].into_boxed_slice());
        for loc in old.iter().flat_map(Line::entries) {
            self.place(*loc);
        }
    }

    fn prefetch(&self, hash: u32) {
        if !self.lines.is_empty() {
            prefetch(&self.lines[self.home(hash)]);
        }
    }
}

/// Asks the CPU to bring `line` into its caches; the program goes on meanwhile.
fn prefetch(line: &Line) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults, and
    // the pointer comes from a reference.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(line).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}

pub(super) struct Parts(Vec<Part>);

impl Parts {
    pub fn new() -> Parts {
        Parts((0..PARTS).map(|_| Part::default()).collect())
    }

    fn part(hash: u32) -> usize {
        (hash >> (32 - PART_BITS)) as usize
    }

    pub fn find(&self, hash: u32, is: impl FnMut(&Loc) -> bool) -> Option<&Loc> {
        let part = &self.0[Self::part(hash)];
        let (line, i) = part.find_slot(hash, is)?;
        Some(&part.lines[line].locs[i])
    }

    pub fn find_mut(&mut self, hash: u32, is: impl FnMut(&Loc) -> bool) -> Option<&mut Loc> {
        let part = &mut self.0[Self::part(hash)];
        let (line, i) = part.find_slot(hash, is)?;
        Some(&mut part.lines[line].locs[i])
    }

    /// Adds `loc`, whose identity the index does not hold.
    pub fn insert_unique(&mut self, loc: Loc) {
        self.0[Self::part(loc.hash)].insert_unique(loc);
    }

    /// Starts bringing in the line where a probe for `hash` starts, so that a probe a few
    /// records later finds it cached (see the module doc).
    pub fn prefetch(&self, hash: u32) {
        self.0[Self::part(hash)].prefetch(hash);
    }

    /// Entries held, live or gone.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.iter().map(|p| p.len).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Loc> {
        self.0
            .iter()
            .flat_map(|part| part.lines.iter().flat_map(Line::entries))
    }

    /// Heap bytes of the lines of the part that holds `hash`.
    #[cfg(test)]
    fn part_size(&self, hash: u32) -> usize {
        std::mem::size_of_val(&*self.0[Self::part(hash)].lines)
    }

    /// Heap bytes of the parts' lines and headers.
    #[cfg(test)]
    fn allocation_size(&self) -> usize {
        self.0
            .iter()
            .map(|p| std::mem::size_of_val(&*p.lines))
            .sum::<usize>()
            + self.0.capacity() * std::mem::size_of::<Part>()
    }
}

#[cfg(test)]
#[path = "parts_tests.rs"]
mod tests;
