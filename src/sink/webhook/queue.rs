//! The timers a cap holds back, waiting for a slot: one FIFO per host and one per tenant, with
//! at most one entry per timer.
//!
//! A held timer is known by its identity (tenant, key). Holding it again while it waits (its
//! safety net fired and the cap is still full) keeps its place; holding another version of it,
//! or on the other kind of queue, gives it a new ticket at the back. Forgetting it (cancelled,
//! replaced, its delivery started, it became a dead letter) takes it out of the index at once;
//! its ticket stays in its FIFO, stale, and is skipped when popped. Stale tickets are swept
//! whenever they outnumber the live ones (and 64), so:
//!
//! - held entries (`len`) ≤ the timers the shard holds back, one each;
//! - tickets in all FIFOs together ≤ 2 × `len` + 64.
//!
//! Cost: a hash lookup and a `VecDeque` push per hold; a pop skips at most the stale tickets
//! at the front; a sweep is linear in the tickets, and runs at most once per `len` + 64
//! forgets.

use super::settings::Target;
use super::Map;
use crate::wheel::table::PackedTimer;
use std::collections::VecDeque;

/// A timer held back by a cap: its identity and its metadata when it was held, and its version.
pub(crate) struct HeldBack {
    pub timer: PackedTimer,
    pub version: u64,
}

/// Which cap holds a timer back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Cap {
    Host(Target),
    Tenant(Box<str>),
}

struct Entry {
    cap: Cap,
    held: HeldBack,
}

/// The timers held back by a cap, in arrival order, per host and per tenant.
#[derive(Default)]
pub(crate) struct Queues {
    fifos: Map<Cap, VecDeque<u64>>,
    /// Live tickets: the entry each stands for.
    entries: Map<u64, Entry>,
    /// A timer's identity → its live ticket.
    tickets: Map<Box<[u8]>, u64>,
    next: u64,
    stale: usize,
}

impl Queues {
    /// Timers held (one entry each).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Tickets in all FIFOs, live and stale.
    #[cfg(test)]
    pub fn tickets(&self) -> usize {
        self.fifos.values().map(VecDeque::len).sum()
    }

    /// Tickets waiting on `cap` (stale ones too: at most as many again as live ones).
    pub fn waiting(&self, cap: &Cap) -> usize {
        self.fifos.get(cap).map_or(0, VecDeque::len)
    }

    /// Holds `held` back on `cap`. `true` when it was not held before (a new entry).
    pub fn hold(&mut self, cap: Cap, held: HeldBack) -> bool {
        let id = held.timer.identity();
        if let Some(&t) = self.tickets.get(id) {
            if let Some(e) = self.entries.get_mut(&t) {
                if e.cap == cap && e.held.version == held.version {
                    // The same wait: it keeps its place, with the latest metadata.
                    e.held = held;
                    return false;
                }
            }
            self.forget(id);
        }
        let t = self.next;
        self.next += 1;
        self.tickets.insert(id.into(), t);
        self.fifos.entry(cap.clone()).or_default().push_back(t);
        self.entries.insert(t, Entry { cap, held });
        true
    }

    /// The first live timer waiting on `cap`, out of the queue.
    pub fn pop(&mut self, cap: &Cap) -> Option<HeldBack> {
        let fifo = self.fifos.get_mut(cap)?;
        let mut found = None;
        while let Some(t) = fifo.pop_front() {
            match self.entries.remove(&t) {
                Some(e) => {
                    found = Some(e.held);
                    break;
                }
                None => self.stale = self.stale.saturating_sub(1),
            }
        }
        if fifo.is_empty() {
            self.fifos.remove(cap);
        }
        let held = found?;
        self.tickets.remove(held.timer.identity());
        Some(held)
    }

    /// Takes the timer with `identity` out of its queue, if it waits in one. `true` if it did.
    pub fn forget(&mut self, identity: &[u8]) -> bool {
        let Some(t) = self.tickets.remove(identity) else {
            return false;
        };
        self.entries.remove(&t);
        self.stale += 1;
        if self.stale > self.entries.len() + 64 {
            self.sweep();
        }
        true
    }

    /// Drops every stale ticket.
    fn sweep(&mut self) {
        let entries = &self.entries;
        self.fifos.retain(|_, fifo| {
            fifo.retain(|t| entries.contains_key(t));
            !fifo.is_empty()
        });
        self.stale = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(key: &str, version: u64) -> HeldBack {
        HeldBack {
            timer: PackedTimer::with_meta("t", key, b"m", b"").expect("short"),
            version,
        }
    }

    fn host() -> Cap {
        Cap::Host(Target {
            https: false,
            host: "h".into(),
            port: 80,
        })
    }

    fn id(key: &str) -> Box<[u8]> {
        held(key, 0).timer.identity().into()
    }

    #[test]
    fn a_timer_held_again_keeps_one_entry_and_its_place() {
        let mut q = Queues::default();
        assert!(q.hold(host(), held("a", 1)));
        assert!(q.hold(host(), held("b", 1)));
        for _ in 0..1000 {
            assert!(!q.hold(host(), held("a", 1)));
        }
        assert_eq!((q.len(), q.tickets()), (2, 2));
        assert_eq!(
            q.pop(&host()).map(|h| h.timer.key().to_string()).as_deref(),
            Some("a")
        );
        assert_eq!(
            q.pop(&host()).map(|h| h.timer.key().to_string()).as_deref(),
            Some("b")
        );
        assert!(q.pop(&host()).is_none() && q.is_empty());
    }

    #[test]
    fn a_forgotten_timer_is_never_woken_and_stale_tickets_stay_bounded() {
        let mut q = Queues::default();
        for round in 0..100u64 {
            for k in 0..100 {
                q.hold(host(), held(&format!("k{k}"), round));
            }
            for k in 0..100 {
                assert!(q.forget(&id(&format!("k{k}"))));
            }
            assert!(q.tickets() <= 2 * q.len() + 64, "{}", q.tickets());
        }
        q.hold(host(), held("live", 1));
        assert_eq!(
            q.pop(&host()).map(|h| h.timer.key().to_string()).as_deref(),
            Some("live")
        );
        assert!(q.pop(&host()).is_none());
        assert!(!q.forget(&id("live")));
    }

    #[test]
    fn a_new_version_or_another_cap_goes_to_the_back() {
        let mut q = Queues::default();
        let tenant = Cap::Tenant("t".into());
        q.hold(host(), held("a", 1));
        q.hold(host(), held("b", 1));
        q.hold(host(), held("a", 2));
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(&host()).map(|h| h.version), Some(1));
        let a = q.pop(&host()).expect("a");
        assert_eq!((a.timer.key(), a.version), ("a", 2));
        q.hold(host(), held("c", 1));
        q.hold(tenant.clone(), held("c", 1));
        assert!(q.pop(&host()).is_none());
        assert_eq!(
            q.pop(&tenant).map(|h| h.timer.key().to_string()).as_deref(),
            Some("c")
        );
    }
}
