//! A paged timer's record in its bucket's file: what a load reads back into the wheel.
//!
//! ```text
//!   crc32c: u32 | len: u32 | deadline_us: u64 | version: u64 | packed timer (len − 16 bytes)
//! ```
//!
//! The CRC covers everything after it. A page file is not durable (the journal is: the pages
//! are rebuilt from it at every start), so a record needs no commit marker; the CRC is there
//! so that a damaged page is reported, never read as another timer.

use crate::timer::PackedTimer;
use crate::units::UtcMicros;

/// Where a paged timer's record is: its bucket, and its offset in the bucket's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub bucket: u32,
    pub offset: u32,
}

/// Where the entry of a held timer points (no bucket is numbered so: `Pager::bucket` in `page`).
pub const HELD: Loc = Loc {
    bucket: u32::MAX,
    offset: 0,
};

/// Bytes before the packed timer: CRC, length, deadline, version.
pub const HEAD: usize = 24;

/// Appends the record of `timer` to `out`; `None`, with `out` unchanged, when the timer is too
/// long for one record (it cannot be: a packed timer is capped far below `u32::MAX`).
pub fn put(
    out: &mut Vec<u8>,
    timer: &PackedTimer,
    deadline: UtcMicros,
    version: u64,
) -> Option<()> {
    let packed = timer.packed();
    put_with(out, packed.len(), deadline, version, |out| {
        out.extend_from_slice(packed)
    })
}

/// [`put`] of a timer given in its parts, as a store hands it over at recovery: the same bytes
/// as `put` of `PackedTimer::with_meta(tenant, key, meta, payload)`, without making that
/// timer. `None` when a part is too long to pack.
pub fn put_parts(
    out: &mut Vec<u8>,
    (tenant, key, meta, payload): (&str, &str, &[u8], &[u8]),
    deadline: UtcMicros,
    version: u64,
) -> Option<()> {
    let t = u8::try_from(tenant.len()).ok()?;
    let k = u8::try_from(key.len()).ok()?;
    let m = u16::try_from(meta.len()).ok()?;
    let len = 2 + tenant.len() + key.len() + 2 + meta.len() + payload.len();
    put_with(out, len, deadline, version, |out| {
        out.extend_from_slice(&[t, k]);
        out.extend_from_slice(tenant.as_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(&m.to_le_bytes());
        out.extend_from_slice(meta);
        out.extend_from_slice(payload);
    })
}

/// The record's head, the `packed_len` bytes that `packed` writes, and the CRC over them.
fn put_with(
    out: &mut Vec<u8>,
    packed_len: usize,
    deadline: UtcMicros,
    version: u64,
    packed: impl FnOnce(&mut Vec<u8>),
) -> Option<()> {
    let len = u32::try_from(packed_len.checked_add(16)?).ok()?;
    let start = out.len();
    out.reserve(HEAD + packed_len);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&deadline.0.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    packed(out);
    debug_assert_eq!(out.len() - start, HEAD + packed_len);
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// A paged timer's record, read back from its page.
#[derive(Clone)]
pub struct PageRecord {
    pub deadline: UtcMicros,
    pub version: u64,
    pub timer: PackedTimer,
}

/// What [`take`] found at the front of some bytes.
pub enum Taken {
    /// A whole record, and how many bytes it took.
    Record(PageRecord, usize),
    /// The bytes end inside a record: read more.
    Short,
    /// Not a record: a bad CRC, an impossible length, or a timer that does not unpack.
    Damaged,
}

/// Reads the record at the front of `bytes`.
pub fn take(bytes: &[u8]) -> Taken {
    let Some(head) = bytes.get(..HEAD) else {
        return Taken::Short;
    };
    let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let long = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&head[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let (crc, len) = (word(0), word(4) as usize);
    if len < 16 {
        return Taken::Damaged;
    }
    let Some(body) = bytes.get(4..8 + len) else {
        return Taken::Short;
    };
    if crc32c::crc32c(body) != crc {
        return Taken::Damaged;
    }
    match PackedTimer::from_packed(&bytes[HEAD..8 + len]) {
        Some(timer) => Taken::Record(
            PageRecord {
                deadline: UtcMicros(long(8)),
                version: long(16),
                timer,
            },
            8 + len,
        ),
        None => Taken::Damaged,
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
