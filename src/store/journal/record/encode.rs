//! Encoding: each record type's frame appended to a buffer (see the module doc of `record`
//! for the layout). Every function returns the frame's size.

use super::{kind, End};
use crate::timer::PackedTimer;
use crate::units::UtcMicros;

/// Appends one frame to `out`: `body` writes the body, then len and crc are filled in.
fn frame(out: &mut Vec<u8>, kind: u8, body: impl FnOnce(&mut Vec<u8>)) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    out.push(kind);
    body(out);
    let len = (out.len() - start - 8) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), &out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out.len() - start
}

/// A schedule (or, with `attempt`, a retry that keeps its version); the frame's size.
pub fn put_timer(
    out: &mut Vec<u8>,
    attempt: bool,
    version: u64,
    deadline: UtcMicros,
    timer: &PackedTimer,
) -> usize {
    let kind = if attempt {
        kind::ATTEMPT
    } else {
        kind::SCHEDULE
    };
    put_timer_as(out, kind, version, deadline, timer)
}

/// A dead letter: `timer` (with the metadata that says it is dead) under `version`, due at
/// `fire_at`; the pending timer of its identity leaves. The frame's size.
pub fn put_dead_letter(
    out: &mut Vec<u8>,
    version: u64,
    fire_at: UtcMicros,
    timer: &PackedTimer,
) -> usize {
    put_timer_as(out, kind::DEAD_LETTER, version, fire_at, timer)
}

/// A re-drive: the dead letter of `timer`'s identity goes, and `timer` is pending. The
/// frame's size.
pub fn put_redrive(
    out: &mut Vec<u8>,
    version: u64,
    deadline: UtcMicros,
    timer: &PackedTimer,
) -> usize {
    put_timer_as(out, kind::REDRIVE, version, deadline, timer)
}

fn put_timer_as(
    out: &mut Vec<u8>,
    kind: u8,
    version: u64,
    deadline: UtcMicros,
    timer: &PackedTimer,
) -> usize {
    frame(out, kind, |b| {
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&deadline.0.to_le_bytes());
        b.extend_from_slice(timer.identity());
        b.extend_from_slice(&(timer.meta().len() as u16).to_le_bytes());
        b.extend_from_slice(timer.meta());
        b.extend_from_slice(timer.payload());
    })
}

/// A cancel of (tenant, key); names longer than 255 bytes never reach a store.
pub fn put_cancel(out: &mut Vec<u8>, tenant: &str, key: &str) -> usize {
    frame(out, kind::CANCEL, |b| put_identity(b, tenant, key))
}

/// A fire of (tenant, key) at `version`.
pub fn put_fired(out: &mut Vec<u8>, version: u64, tenant: &str, key: &str) -> usize {
    frame(out, kind::FIRED, |b| {
        b.extend_from_slice(&version.to_le_bytes());
        put_identity(b, tenant, key);
    })
}

/// The dead letter of (tenant, key) discarded.
pub fn put_dead_removed(out: &mut Vec<u8>, tenant: &str, key: &str) -> usize {
    frame(out, kind::DEAD_REMOVED, |b| put_identity(b, tenant, key))
}

pub fn put_batch(out: &mut Vec<u8>, seq: u64, records: u32) -> usize {
    frame(out, kind::BATCH, |b| {
        b.extend_from_slice(&seq.to_le_bytes());
        b.extend_from_slice(&records.to_le_bytes());
    })
}

pub fn put_end(out: &mut Vec<u8>, end: End) -> usize {
    frame(out, kind::END, |b| {
        b.extend_from_slice(&end.entries.to_le_bytes());
        b.extend_from_slice(&end.last_batch.to_le_bytes());
        b.extend_from_slice(&end.version_floor.to_le_bytes());
    })
}

fn put_identity(b: &mut Vec<u8>, tenant: &str, key: &str) {
    let (t, k) = (tenant.len().min(255), key.len().min(255));
    b.extend_from_slice(&[t as u8, k as u8]);
    b.extend_from_slice(&tenant.as_bytes()[..t]);
    b.extend_from_slice(&key.as_bytes()[..k]);
}

/// A version lease: every version up to `ceiling` is covered (`lease`).
pub fn put_lease(out: &mut Vec<u8>, ceiling: u64) -> usize {
    frame(out, kind::LEASE, |b| {
        b.extend_from_slice(&ceiling.to_le_bytes())
    })
}
