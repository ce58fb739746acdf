//! The owner's memory of the forwards it served, so that a forward copied on the way between
//! nodes and sent again within its window is refused rather than applied twice.
//!
//! # What this part owns
//!
//! [`Seen`], one per process (all shards share it: a replay may reach any shard): the
//! (time, nonce) of every forward whose MAC verified (`forward_sign.rs`), kept until its
//! time is [`WINDOW`] behind this node's clock, when `check_time` refuses it as stale anyway.
//!
//! # Invariants
//!
//! - **A forward is served at most once.** [`Seen::admit`] answers `Ok` once per (time,
//!   nonce): a second one, on any shard, is [`Refusal::Replayed`]. Only forwards that proved
//!   the secret are remembered, so a sender without it cannot fill the memory or spoil a
//!   nonce.
//! - **Bounded.** At most [`MAX_SEEN`] are kept (24 bytes each in a B-tree: about 40 MiB at
//!   most). When full, the oldest is forgotten and its time becomes the floor: a forward
//!   signed at or before the floor is refused ([`Refusal::Forgotten`], counted `stale`),
//!   never served unchecked. A full memory narrows the window a forward may take (to
//!   [`MAX_SEEN`] forwards' worth: 10 s at about 100,000 forwards a second into one node)
//!   rather than growing; forwards signed now are served as before.
//!
//! # Cost model
//!
//! One process-wide mutex per forwarded request, held for a B-tree insert (and the removal of
//! the entries that left the window: each entry is removed once).

use super::forward_sign::{Refusal, NONCE_LEN, WINDOW};
use std::collections::BTreeSet;
use std::sync::Mutex;

/// The most (time, nonce) pairs kept.
pub const MAX_SEEN: usize = 1 << 20;

#[derive(Debug, Default)]
struct Memory {
    /// (signed at, ms; the nonce's two halves), oldest first.
    seen: BTreeSet<(u64, u64, u64)>,
    /// The time of the newest entry forgotten because the memory was full: forwards signed
    /// at or before it cannot be checked.
    floor_ms: Option<u64>,
}

/// The forwards served within the window, all shards together.
#[derive(Debug)]
pub struct Seen {
    memory: Mutex<Memory>,
    cap: usize,
}

impl Default for Seen {
    fn default() -> Self {
        Seen::with_cap(MAX_SEEN)
    }
}

/// A nonce's two halves (its form was checked by `check_time`: [`NONCE_LEN`] hex digits).
fn halves(nonce: &str) -> Option<(u64, u64)> {
    if nonce.len() != NONCE_LEN || !nonce.is_char_boundary(NONCE_LEN / 2) {
        return None;
    }
    let (hi, lo) = nonce.split_at(NONCE_LEN / 2);
    Some((
        u64::from_str_radix(hi, 16).ok()?,
        u64::from_str_radix(lo, 16).ok()?,
    ))
}

impl Seen {
    /// A memory of at most `cap` forwards (at least one).
    pub fn with_cap(cap: usize) -> Seen {
        Seen {
            memory: Mutex::default(),
            cap: cap.max(1),
        }
    }

    /// Whether the forward signed at `t_ms` with `nonce` (its MAC verified) may be served
    /// (`now_ms`: this node's clock); it is remembered when it may.
    pub fn admit(&self, t_ms: u64, nonce: &str, now_ms: u64) -> Result<(), Refusal> {
        let (hi, lo) = halves(nonce).ok_or(Refusal::Missing)?;
        // A poisoned lock only means a panic elsewhere while held: the set is still whole.
        let mut m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let expired = now_ms.saturating_sub(WINDOW.as_millis() as u64);
        while let Some(&first) = m.seen.first() {
            if first.0 >= expired {
                break;
            }
            m.seen.pop_first();
        }
        if t_ms < expired {
            // Checked at the head (`check_time`), but the body took time since.
            return Err(Refusal::Stale {
                off_ms: now_ms - t_ms,
            });
        }
        if let Some(floor) = m.floor_ms.filter(|f| t_ms <= *f) {
            return Err(Refusal::Forgotten {
                behind_ms: floor - t_ms,
            });
        }
        if !m.seen.insert((t_ms, hi, lo)) {
            return Err(Refusal::Replayed);
        }
        while m.seen.len() > self.cap {
            if let Some((t, _, _)) = m.seen.pop_first() {
                m.floor_ms = Some(m.floor_ms.map_or(t, |f| f.max(t)));
            }
        }
        Ok(())
    }

    /// How many forwards are remembered now.
    pub fn len(&self) -> usize {
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .seen
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "forward_replay_tests.rs"]
mod tests;
