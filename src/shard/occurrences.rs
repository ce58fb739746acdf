//! The occurrences of schedules loaded from the store, until their schedule next fires
//! (`recover.rs` notes them, `fate.rs` takes them).

use crate::timer::PackedTimer;
use std::collections::HashMap;

/// The occurrences of schedules that came back from the store (a start, a partition's load),
/// by (tenant, schedule key), until their schedule next fires. An occurrence's record is
/// written before its schedule's moved cursor, so a crash between the two brings back both
/// the occurrence and a cursor still before it; the occurrence then fires from its own record,
/// and the schedule, when it fires, must not arm it again, even once it has fired and left the
/// table (the two fall due at the same instant, in either order). What a schedule's next fire
/// does not take (its schedule was deleted) stays until the shard stops: at most the
/// occurrences that were pending at a crash or a load.
#[derive(Default)]
pub(crate) struct RecoveredOccurrences(HashMap<(Box<str>, Box<str>), Vec<u64>>);

impl RecoveredOccurrences {
    /// Notes `timer` if it is an occurrence of a schedule.
    pub fn note(&mut self, timer: &PackedTimer) {
        if let Some((schedule, at)) = crate::partition::occurrence_of(timer.key()) {
            self.0
                .entry((timer.tenant().into(), schedule.into()))
                .or_default()
                .push(at);
        }
    }

    /// The instants (µs) of the occurrences of `tenant`'s schedule `key` that came back from
    /// the store, forgotten here.
    pub fn take(&mut self, tenant: &str, key: &str) -> Vec<u64> {
        if self.0.is_empty() {
            return Vec::new();
        }
        self.0
            .remove(&(Box::<str>::from(tenant), Box::<str>::from(key)))
            .unwrap_or_default()
    }
}
