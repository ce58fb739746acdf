//! A load's records, taken into the wheel as its read task brings them: each whose index entry
//! still points at it goes in, under its version; one the wheel hands back is held (`HELD`:
//! see the module doc of `page`); a record that does not read back is counted as damage, and
//! the load goes on at the next mark after it (`files::MARK`).

use super::files::{Files, PageChunks};
use super::index::{Far, FarIndex, Id, Keyed};
use super::keys::PagedKeys;
use super::record::{self, Loc, HELD};
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::rc::Rc;

/// Records a load puts into the wheel between two looks at its slice.
const LOAD_CHECK: usize = 8;

/// A bucket being loaded.
pub struct Load {
    pub bucket: u32,
    pub loaded: Rc<PageChunks>,
    /// Bytes of the file not yet taken, starting at offset `pos`.
    pub carry: Vec<u8>,
    pub pos: u64,
    /// Bytes before this offset are passed over: the load goes on there, past a damaged
    /// record (`files::MARK`).
    pub skip: u64,
    pub _reader: glommio::Task<()>,
}

pub enum Step {
    /// The load goes on: the slice is over, or its read has not brought more yet.
    More(usize),
    Done(usize),
}

/// Puts the records of `load` that arrived into the wheel (see `Pager::load_step`); one the
/// wheel hands back is held (`HELD`). The index entries and the key order go as their
/// records do. A damaged record is passed over to the next mark.
pub fn take_records(
    load: &mut Load,
    (index, keys): (&mut FarIndex, &mut PagedKeys),
    keyed: &Keyed,
    files: &Rc<Files>,
    held: &mut Vec<(Id, record::PageRecord)>,
    stop: &mut impl FnMut() -> bool,
    insert: &mut impl FnMut(PackedTimer, UtcMicros, u64) -> Result<(), PackedTimer>,
) -> Step {
    let (mut n, mut took) = (0, 0);
    let mut at = 0;
    let mut looked = 0usize;
    let step = loop {
        looked += 1;
        if looked % LOAD_CHECK == 0 && stop() {
            break Step::More(n);
        }
        match record::take(&load.carry[at..]) {
            record::Taken::Record(r, len) => {
                let offset = u32::try_from(load.pos + at as u64).unwrap_or(u32::MAX);
                let where_ = Loc {
                    bucket: load.bucket,
                    offset,
                };
                let id = keyed.id(r.timer.identity());
                if let Some(far) = index.remove_at(id, where_) {
                    took += 1;
                    keys.remove(r.timer.tenant(), r.timer.key());
                    match insert(r.timer, r.deadline, r.version) {
                        Ok(()) => n += 1,
                        Err(timer) => {
                            index.insert(Far { at: HELD, ..far });
                            keys.insert(timer.tenant(), timer.key());
                            held.push((id, record::PageRecord { timer, ..r }));
                        }
                    }
                }
                at += len;
            }
            record::Taken::Short => {
                let chunk = load.loaded.chunks.borrow_mut().pop_front();
                match chunk {
                    Some(chunk) => {
                        files.took_chunk();
                        load.carry.drain(..at);
                        load.pos += at as u64;
                        load.carry.extend_from_slice(&chunk);
                        at = pass_over(load);
                    }
                    None if load.loaded.done.get() => {
                        if at < load.carry.len() {
                            match resync(files, load, at) {
                                Some(next) => at = next,
                                None => break Step::Done(n),
                            }
                            continue;
                        }
                        break Step::Done(n);
                    }
                    None => break Step::More(n),
                }
            }
            record::Taken::Damaged => match resync(files, load, at) {
                Some(next) => at = next,
                None => break Step::Done(n),
            },
        }
    };
    files.forget(load.bucket, took);
    load.carry.drain(..at.min(load.carry.len()));
    load.pos += at as u64;
    step
}

/// Passes over the bytes of `load.carry` before `load.skip`; where in it to go on (0, or its
/// end while the skip reaches past it).
fn pass_over(load: &mut Load) -> usize {
    let ahead = load.skip.saturating_sub(load.pos);
    let n = usize::try_from(ahead).map_or(load.carry.len(), |a| a.min(load.carry.len()));
    if n == load.carry.len() {
        return n;
    }
    load.carry.drain(..n);
    load.pos += n as u64;
    0
}

/// A record at `at` of `load.carry` that does not read back: counted as damage (which ends the
/// process where the pages must not lose a timer: `Files::lost`), and the load goes on at the
/// next mark after it. Where in `load.carry` to go on; `None` when no mark follows (the rest
/// of the page is lost).
fn resync(files: &Files, load: &mut Load, at: usize) -> Option<usize> {
    let offset = load.pos + at as u64;
    let d = &files.stats.damaged;
    d.set(d.get() + 1);
    files.lost(load.bucket, offset, "is damaged at this offset");
    let next = files.mark_after(load.bucket, offset)?;
    load.skip = next;
    let within = next - load.pos;
    Some(usize::try_from(within).map_or(load.carry.len(), |w| w.min(load.carry.len())))
}
