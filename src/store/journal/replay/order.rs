//! The index's live entries read back in file order, a range of segments at a time, so a
//! recovery's hand-over reads the disk forward instead of at random.

use super::*;

impl Replay {
    /// Step 2: every live timer and dead letter with its frame (run [`Replay::index`] and
    /// [`Replay::check_snapshot`] first; damage they passed is skipped here). A dead letter's
    /// metadata says what it is (`sink::webhook::is_dead`, read by `shard::recover`).
    ///
    /// The segments' records are read in file order, a range of segments at a time
    /// ([`InFileOrder`]), not in the index's order: that order is random over the files, a
    /// cache and TLB miss per record once they outgrow the caches, and a read from the disk
    /// per record once they outgrow the page cache. For a start, a change of shard count and
    /// the check tool; compaction, which shares a serving shard's thread, paces on
    /// [`Replay::live_steps`] instead.
    ///
    /// The ranges go newest first, and the snapshot last: the reverse of step 1's reading.
    /// Files larger than the page cache keep only what step 1 read last; read again oldest
    /// first, each read would miss and evict the next one to read (an LRU cache flooded in
    /// its own order), where newest first reads what is still cached before the rest.
    pub fn live(&self) -> impl Iterator<Item = (Timer<'_>, &[u8])> + '_ {
        InFileOrder::new(self, IN_ORDER_CHUNK)
            .flatten()
            .chain(self.snapshot_steps().flatten())
    }

    /// [`Replay::live`]'s segment entries, read in ranges of at most `chunk` live entries.
    #[cfg(test)]
    pub(super) fn live_segments_in(
        &self,
        chunk: u64,
    ) -> impl Iterator<Item = (Timer<'_>, &[u8])> + '_ {
        InFileOrder::new(self, chunk).flatten()
    }
}

/// Live index entries sorted and read at a time, at most (128 MiB of locations). Each range
/// costs a pass over the whole index: at 50 million entries in a shard's index, ranges of
/// 4 M took 13 passes and their part of a 100 M start's hand-over was 2–3 s longer than with
/// 4 passes (`cargo bench --bench pending`).
pub(super) const IN_ORDER_CHUNK: u64 = 16 << 20;

/// The index's live entries in file order within ranges, the newest range first (see
/// [`Replay::live`]): the segments are taken, from the last, in ranges holding at most `chunk`
/// live entries (or one segment), and for each range
/// one pass over the index gathers its entries' locations, which are sorted, then read. Costs
/// a pass over the index per range (its entries, not their frames) and the sort: at 50
/// million entries in a shard's index, 4 passes and 4 sorts of up to 16 million.
struct InFileOrder<'a> {
    replay: &'a Replay,
    /// Live entries per segment.
    per_segment: Vec<u64>,
    /// Most live entries of a range of more than one segment.
    chunk: u64,
    /// The segments not taken yet: `..rest`, whose last ones make the next range.
    rest: usize,
    /// The current range's locations, (segment << 32 | offset), sorted.
    batch: Vec<u64>,
    at: usize,
}

impl<'a> InFileOrder<'a> {
    fn new(replay: &'a Replay, chunk: u64) -> InFileOrder<'a> {
        let mut per_segment = vec![0u64; replay.segments.len()];
        for l in replay.index.iter().filter(|l| l.live()) {
            if let Some(n) = per_segment.get_mut(l.src()) {
                *n += 1;
            }
        }
        InFileOrder {
            replay,
            rest: per_segment.len(),
            per_segment,
            chunk,
            batch: Vec::new(),
            at: 0,
        }
    }
}

impl<'a> Iterator for InFileOrder<'a> {
    type Item = Option<(Timer<'a>, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.at == self.batch.len() {
            let end = self.rest;
            if end == 0 {
                return None;
            }
            let mut entries = 0;
            while self.rest > 0
                && (self.rest == end || entries + self.per_segment[self.rest - 1] <= self.chunk)
            {
                self.rest -= 1;
                entries += self.per_segment[self.rest];
            }
            let range = self.rest..end;
            self.batch.clear();
            self.batch.reserve(entries as usize);
            self.batch.extend(
                self.replay
                    .index
                    .iter()
                    .filter(|l| l.live() && range.contains(&l.src()))
                    .map(|l| (l.src() as u64) << 32 | u64::from(l.off)),
            );
            self.batch.sort_unstable();
            self.at = 0;
        }
        let loc = self.batch[self.at];
        self.at += 1;
        Some(self.replay.segment_entry((loc >> 32) as usize, loc as u32))
    }
}
