//! A purge of partitions under way, and the loads it holds (`load_drop.rs` runs them, a
//! slice at a time): what the shard keeps between two passes, and what the fire pass asks of
//! it ([`Purge::covers`], [`Purge::set_aside`]). Apart from `load_drop.rs` so that the
//! shard's own state (`mod.rs`) holds it without importing the file that runs it.
//!
//! Cost: [`Purge::covers`] is a map lookup and a comparison; [`Purge::set_aside`] a partition
//! hash and, for a record of the partition being loaded, one clone of its timer's handle.

use super::dead::PurgeCursor;
use crate::op::{Control, LoadedTimer};
use crate::partition::partition_of;
use crate::units::UtcMicros;
use crate::wheel::TimerRecord;
use std::collections::BTreeMap;

/// A purge under way, and then the loads it holds: the controls taken off the ring, applied
/// once every timer and dead letter of the partitions they purge has left the shard.
pub(crate) struct Purge {
    /// Per partition: its timers leave (it may hold some and a control names it).
    pub(super) picked: Vec<bool>,
    /// The slab index to go on from, and the bound it goes to (the slab's at the start: an
    /// entry above it was inserted since, and is not of a picked partition).
    pub(super) next: u32,
    pub(super) bound: u32,
    /// Where the picked partitions' dead letters' walk goes on from; `None` once it is done
    /// (or when nothing was picked).
    pub(super) letters: Option<PurgeCursor>,
    /// The controls not applied yet, by partition.
    pub(super) controls: BTreeMap<u32, Control>,
    /// The load being applied, once the purge is done.
    pub(super) load: Option<Load>,
    /// Controls taken together.
    pub(super) taken: usize,
    /// Timers and dead letters removed so far.
    pub(super) timers: usize,
    pub(super) dead: usize,
}

/// A partition's load under way: the records not inserted yet, and those set aside because
/// they are due.
pub(super) struct Load {
    pub(super) partition: u32,
    pub(super) records: std::vec::IntoIter<LoadedTimer>,
    /// Due records of the partition, out of the table until it opens: a due timer of a
    /// partition that is not open would leave the wheel unfired.
    pub(super) due: Vec<LoadedTimer>,
    pub(super) total: usize,
    pub(super) refused: usize,
}

impl Purge {
    /// Whether `partition` is being purged or loaded: nothing of it may enter the table but
    /// its load's records.
    pub(crate) fn covers(&self, partition: u32) -> bool {
        self.controls.contains_key(&partition)
            || self.load.as_ref().is_some_and(|l| l.partition == partition)
    }

    /// A timer the fire pass found due and may not fire: when it is of the partition being
    /// loaded, it is set aside to go in again as its load ends, and `true` (the caller gives
    /// its quota slot back: that insert takes it again); otherwise `false`.
    pub(crate) fn set_aside(&mut self, deadline: UtcMicros, record: &TimerRecord) -> bool {
        let Some(load) = self.load.as_mut() else {
            return false;
        };
        if partition_of(record.timer.tenant(), record.timer.key()) != load.partition {
            return false;
        }
        load.due.push(LoadedTimer {
            timer: record.timer.clone(),
            version: record.version,
            deadline,
        });
        true
    }
}
