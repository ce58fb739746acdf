//! A timer, as it travels between the parts: packed once by the caller's thread
//! ([`PackedTimer`]: tenant, key, delivery metadata and payload in one allocation), held by a
//! shard's wheel, written by its store, and, when it fires, shown to the sinks and the store as
//! a [`FiredTimer`].
//!
//! This is a leaf: it imports only `units`, so the wheel, the stores, the sinks and the shard
//! all speak of a timer in the same terms without importing one another.

use crate::units::{UtcMicros, UtcNanos};
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::marker::PhantomData;
use std::ptr::NonNull;

/// Tenant, key, delivery metadata and payload in one allocation:
/// `[tenant_len][key_len][tenant][key][meta_len: u16 LE][meta][payload]`.
///
/// The handle is one pointer ([`ThinBytes`]: the length lies in the allocation), not a 16-byte
/// boxed slice, so a pending timer's slab entry is 40 bytes instead of 48.
///
/// `meta` is opaque here: what a sink needs to deliver the timer (a callback and its retry
/// state), encoded and read by that sink; stores persist it verbatim. Most timers have none
/// (two bytes of length). Building one validates nothing; callers validate names first
/// (`error::validate_name`).
#[derive(Clone, PartialEq, Eq)]
pub struct PackedTimer {
    data: ThinBytes,
}

impl PackedTimer {
    /// `None` when the tenant or key is longer than 255 bytes (validation caps them at 128), or
    /// the whole is longer than `u32::MAX` bytes (a payload is capped far below).
    pub fn new(tenant: &str, key: &str, payload: &[u8]) -> Option<PackedTimer> {
        PackedTimer::with_meta(tenant, key, &[], payload)
    }

    /// With delivery metadata; `None` also when `meta` is longer than 65,535 bytes.
    pub fn with_meta(tenant: &str, key: &str, meta: &[u8], payload: &[u8]) -> Option<PackedTimer> {
        let t = u8::try_from(tenant.len()).ok()?;
        let k = u8::try_from(key.len()).ok()?;
        let m = u16::try_from(meta.len()).ok()?;
        let data = ThinBytes::concat(&[
            &[t, k],
            tenant.as_bytes(),
            key.as_bytes(),
            &m.to_le_bytes(),
            meta,
            payload,
        ])?;
        Some(PackedTimer { data })
    }

    /// This timer with other delivery metadata: the same tenant, key and payload (what a
    /// timer kept pending becomes). `None` when `meta` is longer than 65,535 bytes.
    pub fn with_new_meta(&self, meta: &[u8]) -> Option<PackedTimer> {
        PackedTimer::with_meta(self.tenant(), self.key(), meta, self.payload())
    }

    /// The timer's bytes as one string (tenant, key, metadata and payload with their
    /// lengths): what a page file keeps, and [`PackedTimer::from_packed`] reads back.
    pub fn packed(&self) -> &[u8] {
        &self.data
    }

    /// A timer from bytes [`PackedTimer::packed`] gave; `None` when they are not such bytes
    /// (lengths that do not add up, a tenant or key that is not UTF-8).
    pub fn from_packed(bytes: &[u8]) -> Option<PackedTimer> {
        let (t, k) = (*bytes.first()? as usize, *bytes.get(1)? as usize);
        let tenant = std::str::from_utf8(bytes.get(2..2 + t)?).ok()?;
        let key = std::str::from_utf8(bytes.get(2 + t..2 + t + k)?).ok()?;
        let at = 2 + t + k;
        let m = u16::from_le_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]) as usize;
        let meta = bytes.get(at + 2..at + 2 + m)?;
        let payload = bytes.get(at + 2 + m..)?;
        PackedTimer::with_meta(tenant, key, meta, payload)
    }

    fn tenant_len(&self) -> usize {
        self.data[0] as usize
    }

    fn key_len(&self) -> usize {
        self.data[1] as usize
    }

    /// Where the metadata's length starts.
    fn meta_at(&self) -> usize {
        2 + self.tenant_len() + self.key_len()
    }

    fn meta_len(&self) -> usize {
        let at = self.meta_at();
        u16::from_le_bytes([self.data[at], self.data[at + 1]]) as usize
    }

    /// The bytes that identify the timer: both lengths, the tenant and the key.
    pub fn identity(&self) -> &[u8] {
        &self.data[..self.meta_at()]
    }

    pub fn tenant(&self) -> &str {
        self.str_at(2, self.tenant_len())
    }

    pub fn key(&self) -> &str {
        self.str_at(2 + self.tenant_len(), self.key_len())
    }

    /// The delivery metadata (empty for most timers).
    pub fn meta(&self) -> &[u8] {
        let at = self.meta_at() + 2;
        &self.data[at..at + self.meta_len()]
    }

    pub fn payload(&self) -> &[u8] {
        &self.data[self.meta_at() + 2 + self.meta_len()..]
    }

    fn str_at(&self, start: usize, len: usize) -> &str {
        let bytes = &self.data[start..start + len];
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: `data` is private and only `with_meta` fills it, copying the tenant and the
        // key from `&str`s whole, at the offsets their length bytes give: these bytes are one
        // of those strings, so they are UTF-8. (Read on every fire; validating them again
        // cost a few percent of a burst.)
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// The same timer in an allocation made on the calling thread; this one is freed. A
    /// shard calls it for a timer that another thread packed (an HTTP server on another
    /// shard, a library caller) before the wheel keeps it. mimalloc frees a block on the
    /// thread that owns its page with a plain push; a block from another thread's page goes
    /// through that page's atomic list, and once that thread has ended, through the
    /// reclaiming of its abandoned pages. Every fire frees its timer on the shard, so a
    /// burst of fires paid that for each one: re-homed at schedule, where it costs one copy
    /// and moves the cross-thread free off the fire path.
    pub fn into_local(self) -> PackedTimer {
        self.clone()
    }
}

/// An immutable byte string behind one pointer: `[len: u32 LE][bytes]` in one allocation of
/// alignment 1. Alignment 1 matters: Rust's global allocator asks mimalloc for every block by
/// `mi_malloc_aligned`, which serves a larger alignment from its plain path only while the
/// size class's current page has a free block, and otherwise over-allocates into the next
/// class up (a `ThinVec`'s 8-aligned 157 bytes landed in 192-byte blocks).
struct ThinBytes {
    ptr: NonNull<u8>,
    _owns: PhantomData<Box<[u8]>>,
}

/// Bytes of the length prefix.
const THIN_LEN: usize = 4;

impl ThinBytes {
    /// The parts one after another; `None` when they add up to more than `u32::MAX` bytes.
    fn concat(parts: &[&[u8]]) -> Option<ThinBytes> {
        let len = parts
            .iter()
            .try_fold(0usize, |n, p| n.checked_add(p.len()))?;
        let len32 = u32::try_from(len).ok()?;
        let layout = Layout::from_size_align(THIN_LEN + len, 1).ok()?;
        // SAFETY: the layout's size is at least `THIN_LEN`, never zero.
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        // SAFETY: the allocation holds `THIN_LEN + len` bytes: the prefix, then each part in
        // turn, `len` bytes in all; the parts are borrowed, so they cannot overlap it.
        unsafe {
            std::ptr::copy_nonoverlapping(len32.to_le_bytes().as_ptr(), raw, THIN_LEN);
            let mut at = THIN_LEN;
            for part in parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), raw.add(at), part.len());
                at += part.len();
            }
        }
        Some(ThinBytes {
            ptr,
            _owns: PhantomData,
        })
    }

    fn len(&self) -> usize {
        let mut prefix = [0u8; THIN_LEN];
        // SAFETY: the allocation starts with the `THIN_LEN`-byte prefix `concat` wrote.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), prefix.as_mut_ptr(), THIN_LEN) };
        u32::from_le_bytes(prefix) as usize
    }

    /// The layout `concat` allocated `self` with.
    fn layout(&self) -> Layout {
        // SAFETY: `concat` made this very layout with `Layout::from_size_align`, which
        // checked it (size `THIN_LEN + len()`, alignment 1).
        unsafe { Layout::from_size_align_unchecked(THIN_LEN + self.len(), 1) }
    }
}

impl std::ops::Deref for ThinBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `concat` wrote `len()` initialised bytes after the prefix, and nothing
        // writes them again while `self` lives (the type hands out only shared borrows).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(THIN_LEN), self.len()) }
    }
}

impl Drop for ThinBytes {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated with this layout and is freed only here, once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout()) }
    }
}

impl Clone for ThinBytes {
    fn clone(&self) -> ThinBytes {
        let layout = self.layout();
        // SAFETY: the layout's size is at least `THIN_LEN`, never zero.
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        // SAFETY: both allocations hold `layout.size()` bytes, all initialised in `self`'s,
        // and they are distinct.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), raw, layout.size()) };
        ThinBytes {
            ptr,
            _owns: PhantomData,
        }
    }
}

impl PartialEq for ThinBytes {
    fn eq(&self, other: &ThinBytes) -> bool {
        **self == **other
    }
}

impl Eq for ThinBytes {}

// SAFETY: `ThinBytes` owns its allocation alone, as a `Box<[u8]>` does, and hands out only
// shared borrows of immutable bytes, so moving it to another thread or sharing a reference
// across threads is as safe as for `Box<[u8]>` (which is Send and Sync).
unsafe impl Send for ThinBytes {}
// SAFETY: as above.
unsafe impl Sync for ThinBytes {}

impl std::fmt::Debug for PackedTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} ({} payload bytes)",
            self.tenant(),
            self.key(),
            self.payload().len()
        )
    }
}

/// A fired timer, as sinks and the handler see it.
#[derive(Debug, Clone, Copy)]
pub struct FiredTimer<'a> {
    pub shard: usize,
    pub tenant: &'a str,
    pub key: &'a str,
    pub version: u64,
    pub deadline: UtcMicros,
    pub fired_at: UtcNanos,
    /// Delivery metadata (empty for a timer without a callback; see `webhook::meta`).
    pub meta: &'a [u8],
    pub payload: &'a [u8],
    /// Which firing of the timer this is, read from `meta` once, by the shard that fired it.
    pub firing: Firing,
}

/// Which firing of its timer a fire is. A timer with a callback fires at its deadline and then
/// again for each step of its delivery (`sink::webhook`); the shard reads which from the
/// timer's delivery metadata when it fires it, and the sinks and the store go by that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Firing {
    /// At its deadline: every timer without a callback (or with metadata that cannot be read),
    /// and a callback's first. The stream entry, the handler and the fired count are for this
    /// one only.
    Own,
    /// A step of its delivery: an attempt, a retry, a held-back timer's turn.
    Step,
    /// A dead letter's metadata, in the wheel all the same: nothing is delivered.
    Dead,
}

/// A debounced timer's burst (docs/API.md, "Debounce"): when the key was first armed in it
/// and how long past that its deadline may move. It leads the timer's `meta`, ahead of a
/// sink's section, as `[b'D', 1][first_at_us: u64 LE][max_wait_us: u64 LE]`, so every store
/// persists it with the timer as it persists `meta` (verbatim), and a restart, a partition's
/// handoff and a page load bring it back. No sink's section starts with `b'D'` (a webhook's
/// starts with `b'W'`), so a timer written before it reads as it did. Its fire ends the burst:
/// a kept timer's new `meta` is its sink's alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    pub first_at: UtcMicros,
    pub max_wait_us: u64,
}

const DEBOUNCE_MAGIC: [u8; 2] = [b'D', 1];
const DEBOUNCE_LEN: usize = 18;

impl Debounce {
    /// The latest deadline the burst allows.
    pub fn cap(&self) -> UtcMicros {
        self.first_at.saturating_add_micros(self.max_wait_us)
    }

    /// `meta` led by this burst (whatever burst led it before dropped).
    pub fn lead(&self, meta: &[u8]) -> Vec<u8> {
        let rest = sink_meta(meta);
        let mut out = Vec::with_capacity(DEBOUNCE_LEN + rest.len());
        out.extend_from_slice(&DEBOUNCE_MAGIC);
        out.extend_from_slice(&self.first_at.0.to_le_bytes());
        out.extend_from_slice(&self.max_wait_us.to_le_bytes());
        out.extend_from_slice(rest);
        out
    }

    /// The burst that leads `meta`, if one does.
    pub fn of(meta: &[u8]) -> Option<Debounce> {
        if meta.len() < DEBOUNCE_LEN || meta[..2] != DEBOUNCE_MAGIC {
            return None;
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&meta[at..at + 8]);
            u64::from_le_bytes(b)
        };
        Some(Debounce {
            first_at: UtcMicros(word(2)),
            max_wait_us: word(10),
        })
    }
}

/// `meta` without the burst that may lead it: the sinks' section (empty for a timer without a
/// callback).
pub fn sink_meta(meta: &[u8]) -> &[u8] {
    match Debounce::of(meta) {
        Some(_) => &meta[DEBOUNCE_LEN..],
        None => meta,
    }
}

/// A payload as JSON text: the bytes as given, or `null` for an empty payload.
pub fn payload_json(payload: &[u8]) -> &[u8] {
    if payload.is_empty() {
        b"null"
    } else {
        payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_timer_round_trips_its_parts() {
        let p = PackedTimer::new("t1", "order:9", b"xyz").expect("short names");
        assert_eq!(
            (p.tenant(), p.key(), p.meta(), p.payload()),
            ("t1", "order:9", &b""[..], &b"xyz"[..])
        );
        let m = PackedTimer::with_meta("t1", "order:9", b"\x01cb", b"{}").expect("short");
        assert_eq!((m.meta(), m.payload()), (&b"\x01cb"[..], &b"{}"[..]));
        assert_eq!(
            m.identity(),
            p.identity(),
            "metadata is not part of the identity"
        );
        assert!(PackedTimer::with_meta("t", "k", &vec![0; 65_536], b"").is_none());
        let kept = m.with_new_meta(b"\x02").expect("short");
        assert_eq!(
            (kept.identity(), kept.meta(), kept.payload()),
            (m.identity(), &b"\x02"[..], m.payload())
        );
        assert!(m.with_new_meta(&vec![0; 65_536]).is_none());
        // Same key under another tenant is another identity.
        let q = PackedTimer::new("t", "1order:9", b"").expect("short names");
        assert_ne!(p.identity(), q.identity());
    }

    /// The thin handle: one pointer, its bytes whole for every size (empty parts, a payload of
    /// a mebibyte), a clone equal and independent of its original, and both freed once (the
    /// address and leak sanitizers run this).
    #[test]
    fn a_packed_timer_is_one_pointer_to_all_its_bytes() {
        assert_eq!(std::mem::size_of::<PackedTimer>(), 8);
        assert_eq!(std::mem::size_of::<Option<PackedTimer>>(), 8);
        fn shared_across_threads<T: Send + Sync>() {}
        shared_across_threads::<PackedTimer>();
        for size in [0usize, 1, 3, 4, 100, 4_096, 1 << 20] {
            let payload: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
            let p = PackedTimer::with_meta("", "", b"", &payload).expect("empty names");
            assert_eq!((p.tenant(), p.key(), p.meta()), ("", "", &b""[..]));
            assert_eq!(p.payload(), &payload[..]);
            let q = p.clone();
            drop(p);
            assert_eq!(q.payload(), &payload[..], "a clone outlives its original");
            let r = PackedTimer::with_meta("t", "k", b"m", &payload).expect("short");
            assert_ne!(q, r);
            assert_eq!(r.clone(), r);
        }
    }

    #[test]
    fn a_burst_leads_the_meta_and_leaves_a_sinks_section_as_it_was() {
        let d = Debounce {
            first_at: UtcMicros(1_796_110_651_546_380),
            max_wait_us: 3_600_000_000,
        };
        for sink in [&b""[..], b"W\x03rest of a webhook's section"] {
            let led = d.lead(sink);
            assert_eq!(Debounce::of(&led), Some(d));
            assert_eq!(sink_meta(&led), sink);
            // Led again: one burst, the latest.
            let later = Debounce {
                max_wait_us: 5,
                ..d
            };
            let again = later.lead(&led);
            assert_eq!(
                (Debounce::of(&again), sink_meta(&again)),
                (Some(later), sink)
            );
        }
        // Metadata written before bursts existed reads as it did.
        for old in [&b""[..], b"W\x01abc", b"D", b"D\x01short"] {
            assert_eq!((Debounce::of(old), sink_meta(old)), (None, old));
        }
        assert_eq!(d.cap(), UtcMicros(1_796_114_251_546_380));
    }
}
