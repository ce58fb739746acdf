//! A tenant's quota of recurring schedules (`max_schedules`, its table's or the top-level
//! default): a `PUT` that would create a schedule past it is `429 quota_exceeded`
//! (`App::room_for_schedule`, `schedules.rs`); a replacement, a pause, a resume and a delete
//! always pass, and a delete frees a slot.
//!
//! There is no counter to keep: a creation counts the schedules the shards hold
//! (`Handle::count_schedules_async`: a listing of the tenant's schedule timers, without their
//! records, up to the quota), so the count is what the store holds and, after a restart, what
//! recovery loaded; it cannot drift from it. On a node among others the other live nodes'
//! schedules are counted too, through their listings (`schedule_gather.rs`). Creations of one
//! tenant that run at once on several shards' servers each count the others still being
//! written ([`Creating`]); one already written is then counted twice, so at the edge of the
//! quota a creation racing another may be refused while one slot is left (the client
//! retries), and none passes the quota on one node (on two nodes, each may pass it by one).
//!
//! Cost: one listing per new schedule, O(schedules held, up to the quota) key copies; none
//! for a replacement.

use std::collections::HashMap;
use std::sync::Mutex;

/// New schedules being written, per tenant, on this node.
#[derive(Default)]
pub struct Creating(Mutex<HashMap<String, u64>>);

/// One creation counted in [`Creating`] until dropped.
pub(super) struct Entered<'a> {
    creating: &'a Creating,
    tenant: String,
}

impl Creating {
    /// Counts one creation of `tenant`'s; the answer is how many others are under way.
    pub(super) fn enter(&self, tenant: &str) -> (Entered<'_>, u64) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(tenant.to_string()).or_insert(0);
        let others = *n;
        *n += 1;
        let entered = Entered {
            creating: self,
            tenant: tenant.to_string(),
        };
        (entered, others)
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let mut map = self.creating.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
#[path = "schedule_quota_tests.rs"]
mod tests;
