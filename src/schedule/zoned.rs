//! From civil seconds to instants in a time zone, under the schedule's daylight-saving policy.
//!
//! A zone's time line is a run of *segments*, each between two transitions, with one UTC
//! offset across it. Inside a segment, local time and UTC map one to one. At a transition
//! where the offset grows (spring forward) the local times in between never occur: a **gap**.
//! Where it shrinks (fall back) the local times in between occur twice: an **overlap**, its
//! *first* pass at the end of the earlier segment, its *second* at the start of the later.
//!
//! ```text
//!  America/New_York, 2027-03-14 (gap) and 2027-11-07 (overlap), `30 1,2 * * *`
//!
//!   local   00:30 01:30 [02:00──03:00) 03:30          00:30 01:30 01:30  02:30
//!   offset   -5    -5      no such     -4              -4   -4 ▲  -5 ▲    -5
//!   gap shift:  02:30 fires at 03:30 EDT (07:30Z)      overlap first: 05:30Z only
//!   gap skip:   nothing at 02:30 that day              overlap last:  06:30Z only
//!                                                      overlap both:  05:30Z and 06:30Z
//! ```
//!
//! [`next_cron`] walks segments from the instant asked about. In each it takes the earliest of
//! (a) the first civil match inside the segment's own local range, less the passes the
//! overlap policy gives to the other side, and (b) when the segment opens with a gap and the
//! policy is `shift`, the first civil match inside the gap, moved forward by the gap's length
//! (`c - offset_before`: RFC 5545, java.time, jiff's `compatible`). A shifted time that lands
//! on a time that matches in its own right is one instant, so it fires once. Every answer is
//! strictly after the instant asked about, so repeated calls are strictly increasing.
//!
//! Cost: three transition look-ups (binary searches in the bundled tz data, or the zone's
//! POSIX rule past its table) per segment visited, plus the civil search; a daily cron visits
//! one segment per call except across a transition.

use super::cron::CronFields;
use super::dst::{DstSpec, Gap, Overlap};
use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// The first instant, in whole Unix seconds, strictly after `after_s` and before `until_s`,
/// at which `fields` fire in `tz` under `policy`, with the offset in force then.
pub fn next_cron(
    fields: &CronFields,
    tz: &TimeZone,
    policy: DstSpec,
    after_s: i64,
    until_s: i64,
) -> Option<(i64, Offset)> {
    let overlap = if fields.every_hour() {
        Overlap::Both
    } else {
        policy.overlap
    };
    let mut x = after_s.checked_add(1)?;
    while x < until_s {
        let seg = Segment::at(tz, x, until_s)?;
        let own = own_match(fields, &seg, overlap, x);
        let shifted = match policy.gap {
            Gap::Shift => shifted_match(fields, &seg, x),
            Gap::Skip => None,
        };
        let best = match (own, shifted) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(t) = best {
            return Some((t, seg.offset));
        }
        x = seg.end;
    }
    None
}

/// One stretch of a zone's time line with a single offset: instants `[start, end)`.
struct Segment {
    /// The transition that opened it and the offset before that transition, if any.
    opened: Option<(i64, i64)>,
    offset: Offset,
    /// Where it ends (the next transition, or the search's limit), and the offset after.
    end: i64,
    next_offset: Option<i64>,
}

impl Segment {
    fn at(tz: &TimeZone, x: i64, until_s: i64) -> Option<Segment> {
        let ts = Timestamp::from_second(x).ok()?;
        let offset = tz.to_offset(ts);
        let just_after = ts.checked_add(SignedDuration::from_nanos(1)).ok()?;
        let opened = tz.preceding(just_after).next().and_then(|t| {
            let at = t.timestamp().as_second();
            let before = tz.to_offset(Timestamp::from_second(at.checked_sub(1)?).ok()?);
            Some((at, before.seconds() as i64))
        });
        let (end, next_offset) = match tz.following(ts).next() {
            Some(t) if t.timestamp().as_second() < until_s => {
                (t.timestamp().as_second(), Some(t.offset().seconds() as i64))
            }
            _ => (until_s, None),
        };
        Some(Segment {
            opened,
            offset,
            end,
            next_offset,
        })
    }

    fn off(&self) -> i64 {
        self.offset.seconds() as i64
    }
}

/// The first match among the segment's own local times at or after instant `x`, as an
/// instant. Under `first`, the second pass of an overlap that opened the segment belongs to
/// the segment before; under `last`, the first pass of an overlap that closes it belongs to
/// the segment after.
fn own_match(fields: &CronFields, seg: &Segment, overlap: Overlap, x: i64) -> Option<i64> {
    let o = seg.off();
    let mut lo = x.checked_add(o)?;
    if let (Some((at, before)), Overlap::First) = (seg.opened, overlap) {
        if before > o {
            lo = lo.max(at.checked_add(before)?);
        }
    }
    let mut hi = seg.end.checked_add(o)?;
    if let (Some(after), Overlap::Last) = (seg.next_offset, overlap) {
        if after < o {
            hi = seg.end.checked_add(after)?;
        }
    }
    let c = fields.first_match(civil(lo)?, civil(hi)?)?;
    local_seconds(c)?.checked_sub(o)
}

/// Under `shift`: the first local time inside the gap that opened the segment, at or after
/// instant `x` once moved forward by the gap's length, as an instant.
fn shifted_match(fields: &CronFields, seg: &Segment, x: i64) -> Option<i64> {
    let (at, before) = seg.opened?;
    let o = seg.off();
    if before >= o || x >= at.checked_add(o - before)? {
        return None;
    }
    let lo = x.max(at).checked_add(before)?;
    let hi = at.checked_add(o)?;
    let c = fields.first_match(civil(lo)?, civil(hi)?)?;
    local_seconds(c)?.checked_sub(before)
}

/// The civil date-time `s` seconds after 1970-01-01T00:00:00 local.
fn civil(s: i64) -> Option<DateTime> {
    Some(Offset::UTC.to_datetime(Timestamp::from_second(s).ok()?))
}

fn local_seconds(c: DateTime) -> Option<i64> {
    Some(Offset::UTC.to_timestamp(c).ok()?.as_second())
}
