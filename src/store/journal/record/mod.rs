//! The journal's record format, version 2: how one record is framed, encoded and decoded.
//!
//! ```text
//!   frame:  len: u32 LE | crc32c: u32 LE | type: u8 | body: len - 1 bytes
//!           crc32c covers the 4 bytes of len, the type and the body
//!
//!   type  name          body                                    timers      dead letters
//!   1     batch         seq: u64 | records: u32                 (first record of every commit)
//!   2     schedule      version: u64 | deadline_us: u64 | timer pending
//!   3     attempt       version: u64 | deadline_us: u64 | timer pending (a retry: same version)
//!   4     cancel        identity                                gone
//!   5     fired         version: u64 | identity                 gone
//!   6     dead letter   version: u64 | fire_at_us: u64 | timer  gone        filed
//!   7     end           entries: u64 | last_batch: u64 | version_floor: u64   (last record of a snapshot)
//!   8     dead removed  identity                                            gone (discarded)
//!   9     redrive       version: u64 | deadline_us: u64 | timer pending     gone (re-driven)
//!   10    lease         ceiling: u64                            (versions up to it may be out: `lease`)
//!
//!   identity = tenant_len: u8 | key_len: u8 | tenant | key
//!   timer    = identity | meta_len: u16 LE | meta | payload (the rest of the body)
//! ```
//!
//! A pending timer and a dead letter may share an identity (the API's `409 timer_pending`
//! says they coexist), so replay keeps two sets, and each record says what it does to each
//! ([`Record::effect`]): a record about one set never touches the other, except the two that
//! are one operation on both — a dead letter (its timer died: it leaves the pending set) and a
//! re-drive (the dead letter goes, the timer is pending again) — which are single records so
//! that no crash can apply half of one.
//!
//! The batch sequence runs 1, 2, 3… across segments, restarts and snapshots (a snapshot's end
//! record holds the last one it covers), so that recovery can prove that nothing is missing
//! between two commits (`replay`). The end record also holds the highest version the covered
//! records ever carried, so that versions only grow even after the records that carried them
//! are compacted away and the clock steps back; a lease record (a version ceiling, see `lease`)
//! counts in that floor like a version.
//!
//! All integers are little-endian. A timer's bytes after the version and deadline are laid out
//! like a `PackedTimer`, so a schedule is encoded with four copies and decoded without any.
//!
//! Decoding never panics and never trusts a length: every read is bounds-checked, a `len`
//! outside `1..=MAX_LEN` or past the buffer, a CRC mismatch, an unknown type, a body of the
//! wrong size or a name that is not UTF-8 is [`Step::Bad`]. Zero bytes where a frame would
//! start are padding (to the end of the block) or, at a block boundary, the end of the data.

mod encode;

pub use encode::*;

use crate::units::UtcMicros;

/// The format's version, written in every file header.
pub const FORMAT: u16 = 2;

/// Bytes before the body: len, crc, type.
pub const FRAME: usize = 9;

/// The longest `len`: the largest timer (two 255-byte names, 64 KiB of meta, a 64 KiB
/// payload) fits with room to spare; anything longer is damage, not data.
pub const MAX_LEN: usize = 256 * 1024;

/// Record types (the `type` byte).
pub mod kind {
    pub const BATCH: u8 = 1;
    pub const SCHEDULE: u8 = 2;
    pub const ATTEMPT: u8 = 3;
    pub const CANCEL: u8 = 4;
    pub const FIRED: u8 = 5;
    pub const DEAD_LETTER: u8 = 6;
    pub const END: u8 = 7;
    pub const DEAD_REMOVED: u8 = 8;
    pub const REDRIVE: u8 = 9;
    pub const LEASE: u8 = 10;
}

/// A timer as a schedule or attempt record holds it; borrowed from the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer<'a> {
    pub version: u64,
    pub deadline: UtcMicros,
    /// `tenant_len | key_len | tenant | key`: the key of the journal's indexes.
    pub identity: &'a [u8],
    pub tenant: &'a str,
    pub key: &'a str,
    pub meta: &'a [u8],
    pub payload: &'a [u8],
}

/// One decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Batch {
        seq: u64,
        records: u32,
    },
    Schedule(Timer<'a>),
    Attempt(Timer<'a>),
    Cancel {
        identity: &'a [u8],
    },
    Fired {
        version: u64,
        identity: &'a [u8],
    },
    /// A dead letter, with its timer's final metadata and payload; `deadline` is the timer's
    /// own deadline.
    DeadLetter(Timer<'a>),
    End(End),
    DeadRemoved {
        identity: &'a [u8],
    },
    Redrive(Timer<'a>),
    /// Every version up to `ceiling` may have been handed out (`lease`).
    Lease {
        ceiling: u64,
    },
}

/// The end record of a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct End {
    /// Records in the snapshot: pending timers and dead letters.
    pub entries: u64,
    /// The last batch sequence the snapshot covers (0: none); the next segment's first commit
    /// carries the one after it.
    pub last_batch: u64,
    /// The highest version any covered record carried.
    pub version_floor: u64,
}

/// What a record does to one of the two sets replay rebuilds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The identity is in the set, as this record holds it.
    Live,
    /// The identity leaves the set.
    Gone,
}

impl<'a> Record<'a> {
    /// The (tenant, key) this record is about, if any.
    pub fn identity(&self) -> Option<&'a [u8]> {
        match *self {
            Record::Schedule(t)
            | Record::Attempt(t)
            | Record::DeadLetter(t)
            | Record::Redrive(t) => Some(t.identity),
            Record::Cancel { identity }
            | Record::Fired { identity, .. }
            | Record::DeadRemoved { identity } => Some(identity),
            Record::Batch { .. } | Record::End(_) | Record::Lease { .. } => None,
        }
    }

    /// What the record does to (the pending timers, the dead letters).
    pub fn effect(&self) -> (Option<Effect>, Option<Effect>) {
        use Effect::{Gone, Live};
        match self {
            Record::Schedule(_) | Record::Attempt(_) => (Some(Live), None),
            Record::Cancel { .. } | Record::Fired { .. } => (Some(Gone), None),
            Record::DeadLetter(_) => (Some(Gone), Some(Live)),
            Record::DeadRemoved { .. } => (None, Some(Gone)),
            Record::Redrive(_) => (Some(Live), Some(Gone)),
            Record::Batch { .. } | Record::End(_) | Record::Lease { .. } => (None, None),
        }
    }

    /// The version the record carries, if any.
    pub fn version(&self) -> Option<u64> {
        match *self {
            Record::Schedule(t)
            | Record::Attempt(t)
            | Record::DeadLetter(t)
            | Record::Redrive(t) => Some(t.version),
            Record::Fired { version, .. } => Some(version),
            Record::End(e) => Some(e.version_floor),
            Record::Lease { ceiling } => Some(ceiling),
            _ => None,
        }
    }

    /// The timer (or dead letter) a record that makes an entry live holds.
    pub fn entry(&self) -> Option<Timer<'a>> {
        match *self {
            Record::Schedule(t)
            | Record::Attempt(t)
            | Record::DeadLetter(t)
            | Record::Redrive(t) => Some(t),
            _ => None,
        }
    }
}

/// (tenant, key) of an identity's bytes.
pub fn names(identity: &[u8]) -> Option<(&str, &str)> {
    let (_, tenant, key, end) = self::identity(identity, 0)?;
    (end == identity.len()).then_some((tenant, key))
}

/// Whether a whole frame is a dead letter (and not a pending timer).
pub fn is_dead_letter(frame: &[u8]) -> bool {
    frame.get(8) == Some(&kind::DEAD_LETTER)
}

/// Why the bytes at an offset are not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// `len` is 0 mid-frame, over [`MAX_LEN`], or runs past the buffer.
    Length(u32),
    Crc,
    UnknownType(u8),
    /// The body does not have the shape its type requires.
    Body(u8),
    /// Padding that is not all zeros.
    Padding,
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bad::Length(n) => write!(f, "record length {n} is impossible here"),
            Bad::Crc => f.write_str("CRC mismatch"),
            Bad::UnknownType(t) => write!(f, "unknown record type {t}"),
            Bad::Body(t) => write!(f, "malformed body for record type {t}"),
            Bad::Padding => f.write_str("non-zero bytes in block padding"),
        }
    }
}

/// What lies at an offset of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// A record, its whole frame, and the offset after it.
    Record {
        record: Record<'a>,
        frame: &'a [u8],
        next: usize,
    },
    /// Zero padding up to `next`, the following block boundary.
    Padding {
        next: usize,
    },
    /// No more data: zeros (or nothing) at a block boundary.
    End,
    Bad(Bad),
}

/// Decodes what lies at `at` in `buf`, whose blocks are `block` bytes (a power of two).
pub fn decode_at(buf: &[u8], at: usize, block: usize) -> Step<'_> {
    let rest = buf.get(at..).unwrap_or_default();
    let len = match read_u32(rest, 0) {
        Some(len) => len,
        None => return zeros_to_block(buf, at, block),
    };
    if len == 0 {
        return zeros_to_block(buf, at, block);
    }
    let Some(frame) = usize::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_LEN)
        .and_then(|l| rest.get(..8 + l))
    else {
        return Step::Bad(Bad::Length(len));
    };
    let stored = read_u32(frame, 4).unwrap_or(0);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&frame[..4]), &frame[8..]);
    if crc != stored {
        return Step::Bad(Bad::Crc);
    }
    let (kind, body) = (frame[8], &frame[FRAME..]);
    match decode_body(kind, body) {
        Ok(record) => Step::Record {
            record,
            frame,
            next: at + frame.len(),
        },
        Err(bad) => Step::Bad(bad),
    }
}

/// At `at` there is no frame: padding to the next block boundary if the rest of the block is
/// zeros, the end if `at` is on a boundary (or past the buffer), else damage.
fn zeros_to_block(buf: &[u8], at: usize, block: usize) -> Step<'_> {
    let block = block.max(1);
    let next = (at / block + 1).saturating_mul(block);
    let upto = next.min(buf.len());
    let zeros = buf.get(at..upto).is_none_or(|b| b.iter().all(|&x| x == 0));
    if !zeros {
        return Step::Bad(Bad::Padding);
    }
    if at % block == 0 || at >= buf.len() || upto == buf.len() {
        Step::End
    } else {
        Step::Padding { next }
    }
}

fn decode_body(kind: u8, body: &[u8]) -> Result<Record<'_>, Bad> {
    let bad = Bad::Body(kind);
    match kind {
        kind::BATCH => match (read_u64(body, 0), read_u32(body, 8), body.len()) {
            (Some(seq), Some(records), 12) => Ok(Record::Batch { seq, records }),
            _ => Err(bad),
        },
        kind::SCHEDULE | kind::ATTEMPT | kind::DEAD_LETTER | kind::REDRIVE => {
            let t = timer(body).ok_or(bad)?;
            Ok(match kind {
                kind::SCHEDULE => Record::Schedule(t),
                kind::ATTEMPT => Record::Attempt(t),
                kind::DEAD_LETTER => Record::DeadLetter(t),
                _ => Record::Redrive(t),
            })
        }
        kind::CANCEL | kind::DEAD_REMOVED => match identity(body, 0) {
            Some((identity, _, _, end)) if end == body.len() => Ok(if kind == kind::CANCEL {
                Record::Cancel { identity }
            } else {
                Record::DeadRemoved { identity }
            }),
            _ => Err(bad),
        },
        kind::FIRED => {
            let version = read_u64(body, 0).ok_or(bad)?;
            match identity(body, 8) {
                Some((identity, _, _, end)) if end == body.len() => {
                    Ok(Record::Fired { version, identity })
                }
                _ => Err(bad),
            }
        }
        kind::END => match (read_u64(body, 0), read_u64(body, 8), read_u64(body, 16)) {
            (Some(entries), Some(last_batch), Some(version_floor)) if body.len() == 24 => {
                Ok(Record::End(End {
                    entries,
                    last_batch,
                    version_floor,
                }))
            }
            _ => Err(bad),
        },
        kind::LEASE => match read_u64(body, 0) {
            Some(ceiling) if body.len() == 8 => Ok(Record::Lease { ceiling }),
            _ => Err(bad),
        },
        other => Err(Bad::UnknownType(other)),
    }
}

/// `version | deadline | identity | meta_len | meta | payload`.
fn timer(body: &[u8]) -> Option<Timer<'_>> {
    let version = read_u64(body, 0)?;
    let deadline = UtcMicros(read_u64(body, 8)?);
    let (identity, tenant, key, at) = identity(body, 16)?;
    let meta_len = usize::from(u16::from_le_bytes(body.get(at..at + 2)?.try_into().ok()?));
    let meta = body.get(at + 2..at + 2 + meta_len)?;
    let payload = body.get(at + 2 + meta_len..)?;
    Some(Timer {
        version,
        deadline,
        identity,
        tenant,
        key,
        meta,
        payload,
    })
}

/// The identity at `at`: its bytes, the tenant, the key, and the offset after it.
fn identity(body: &[u8], at: usize) -> Option<(&[u8], &str, &str, usize)> {
    let t = usize::from(*body.get(at)?);
    let k = usize::from(*body.get(at + 1)?);
    let end = at + 2 + t + k;
    let whole = body.get(at..end)?;
    let tenant = std::str::from_utf8(whole.get(2..2 + t)?).ok()?;
    let key = std::str::from_utf8(whole.get(2 + t..)?).ok()?;
    if tenant.is_empty() || key.is_empty() {
        return None;
    }
    Some((whole, tenant, key, end))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests;
