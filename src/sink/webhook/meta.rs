//! A webhook timer's delivery state, as it rides in the timer's opaque `meta` section (see
//! `timer::PackedTimer`) and so in every store record: the callback, the retry policy,
//! how far delivery has got, and the last outcome.
//!
//! # Layout (version 1, little endian)
//!
//! ```text
//!   b'W' 1 | state u8 | attempts u32 | max_attempts u32 | base_delay_ms u64 | max_delay_ms u64
//!        | fire_at_us u64 | last: 0 | 1 status u16 | 2 len u16 error… | url_len u16 url…
//! ```
//!
//! Version 2 is version 1 with `b'W' 2` and one more byte at the end, `cuts u8`: attempts cut
//! short (no outcome: the process stopped or crashed during them) not counted yet. Version 3
//! is version 1 with `b'W' 3` and two more bytes, `cuts u8, busy u8`: `busy` counts the
//! attempts in a row that our own name resolver refused (see below). A delivery with neither
//! is written as version 1, byte for byte as before, one with cuts only as version 2; all three
//! versions are read (the journal and Redis keep meta verbatim).
//!
//! # Attempts cut short
//!
//! An attempt whose outcome never came is made again under the same number: a shutdown or
//! crash does not spend the receiver's budget. But `punctual serve` aborts on a panic, so a
//! delivery whose own attempt crashes the process would otherwise be retried forever. So
//! at most [`MAX_CUTS`] cuts in a row are free: the next one counts as an attempt (last error
//! `interrupted: …`), and `max_attempts` ends the delivery as a dead letter.
//!
//! # Attempts our resolver refused
//!
//! An attempt whose host name our own resolver had no room to look up (`Busy`: its queue, or
//! the tenant's share of it, is full) never reached the receiver either, so it uses up no
//! attempt: it is made again after a backoff that grows with each refusal in a row. Nothing
//! queues meanwhile (the resolver refuses at once; the timer waits in the wheel as it would
//! for any retry): what a resolver that stays busy costs is re-fires, each a store write and a
//! lookup asked. So at most [`MAX_BUSY`] refusals in a row are free, spread over a backoff of
//! up to about a minute; the next counts as an attempt (last error `resolver busy: …`), so a
//! timer re-fires at most `MAX_BUSY + 1` times per attempt of its budget. An attempt that gets
//! further starts the count again.
//!
//! A timer without a callback has no meta at all (zero bytes), and behaves as before.
//!
//! # States
//!
//! | state | the timer in the wheel is | fires into |
//! |---|---|---|
//! | `New` | the timer itself, at its deadline | its own firing (stream entry, handler), then attempt 1 |
//! | `InFlight` | attempt `attempts` under way; deadline = start + timeout + margin | only when the outcome never came (a crash): the next attempt |
//! | `Waiting` | the next attempt, at its backoff (or after a cap refusal) | attempt `attempts + 1` |
//! | `Dead` | not in the wheel: a dead letter | nothing (re-drive makes it `Waiting` with a fresh budget) |
//!
//! Decoding never panics: anything malformed is `None`, and the timer is treated as one
//! without a callback. Encoding is bounded: the URL is cut at [`MAX_URL`] bytes and the last
//! error at `MAX_ERROR`, so a delivery's state always fits the 65,535 bytes of a timer's
//! metadata, whatever a receiver or the network answered.

use crate::timer::Firing;

/// Tag and format version: the first two bytes.
const MAGIC: [u8; 2] = [b'W', 1];
/// Version 2: version 1 and a trailing `cuts` byte.
const MAGIC_CUTS: [u8; 2] = [b'W', 2];
/// Version 3: version 1 and trailing `cuts` and `busy` bytes.
const MAGIC_BUSY: [u8; 2] = [b'W', 3];

/// Attempts cut short that are made again under the same number; the next counts.
pub const MAX_CUTS: u8 = 3;

/// Attempts in a row our resolver refused (`Busy`) that are made again under the same
/// number; the next counts. With the default policy's 1 s base, the backoff between them
/// grows to a 32 s ceiling: about a minute at most in all.
pub const MAX_BUSY: u8 = 6;

/// Longest callback URL, in bytes.
pub const MAX_URL: usize = 2048;

/// Longest last-error text kept (longer is cut at a character boundary).
const MAX_ERROR: usize = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    New = 0,
    InFlight = 1,
    Waiting = 2,
    Dead = 3,
}

/// How often and how patiently a callback is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = no retry).
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    pub max_delay_ms: u64,
}

/// What the last attempt came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Last {
    None,
    /// The endpoint answered with this status.
    Status(u16),
    /// No answer: connection error, timeout, …
    Error(String),
}

/// A webhook timer's delivery state (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub state: State,
    /// Attempts started so far.
    pub attempts: u32,
    pub retry: RetryPolicy,
    /// The timer's own deadline (retries keep it: it goes in every delivery's body).
    pub fire_at_us: u64,
    pub last: Last,
    pub url: String,
    /// Attempts cut short since the last one that counted (see the module doc).
    pub cuts: u8,
    /// Attempts in a row our resolver refused, not counted (see the module doc).
    pub busy: u8,
}

impl Delivery {
    /// A freshly registered callback.
    pub fn new(url: String, retry: RetryPolicy, fire_at_us: u64) -> Delivery {
        Delivery {
            state: State::New,
            attempts: 0,
            retry,
            fire_at_us,
            last: Last::None,
            url,
            cuts: 0,
            busy: 0,
        }
    }

    /// The attempt in flight never reported (the process stopped or crashed during it): it
    /// is made again under the same number, unless [`MAX_CUTS`] were already, when it counts.
    pub fn cut_short(&mut self) {
        if self.cuts < MAX_CUTS {
            self.cuts += 1;
            self.attempts = self.attempts.saturating_sub(1);
            self.last =
                Last::Error("no outcome: the process stopped or crashed during the attempt".into());
        } else {
            self.cuts = 0;
            self.last = Last::Error(format!(
                "interrupted: {} attempts in a row were cut short (the process stopped or crashed during them)",
                MAX_CUTS + 1
            ));
        }
    }

    /// The attempt never left: our resolver had no room for its lookup. Made again under the
    /// same number, unless [`MAX_BUSY`] in a row were already, when it counts; whether it
    /// was free.
    pub fn resolver_busy(&mut self, error: &str) -> bool {
        if self.busy < MAX_BUSY {
            self.busy += 1;
            self.attempts = self.attempts.saturating_sub(1);
            self.last = Last::Error(format!("resolver busy (not counted): {error}"));
            true
        } else {
            self.busy = 0;
            self.last = Last::Error(format!(
                "resolver busy: {} attempts in a row: {error}",
                MAX_BUSY + 1
            ));
            false
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.url.len());
        out.extend_from_slice(match (self.cuts, self.busy) {
            (0, 0) => &MAGIC,
            (_, 0) => &MAGIC_CUTS,
            _ => &MAGIC_BUSY,
        });
        out.push(self.state as u8);
        out.extend_from_slice(&self.attempts.to_le_bytes());
        out.extend_from_slice(&self.retry.max_attempts.to_le_bytes());
        out.extend_from_slice(&self.retry.base_delay_ms.to_le_bytes());
        out.extend_from_slice(&self.retry.max_delay_ms.to_le_bytes());
        out.extend_from_slice(&self.fire_at_us.to_le_bytes());
        match &self.last {
            Last::None => out.push(0),
            Last::Status(s) => {
                out.push(1);
                out.extend_from_slice(&s.to_le_bytes());
            }
            Last::Error(e) => {
                let e = cut(e, MAX_ERROR);
                out.push(2);
                out.extend_from_slice(&(e.len() as u16).to_le_bytes());
                out.extend_from_slice(e.as_bytes());
            }
        }
        let url = cut(&self.url, MAX_URL);
        out.extend_from_slice(&(url.len() as u16).to_le_bytes());
        out.extend_from_slice(url.as_bytes());
        if self.cuts != 0 || self.busy != 0 {
            out.push(self.cuts);
        }
        if self.busy != 0 {
            out.push(self.busy);
        }
        out
    }

    /// `None` for an empty or malformed section.
    pub fn decode(meta: &[u8]) -> Option<Delivery> {
        // A debounced timer's burst leads the section (`timer::Debounce`).
        let mut r = Reader(crate::timer::sink_meta(meta));
        let magic = r.take(2)?;
        let with_busy = magic == MAGIC_BUSY;
        let with_cuts = magic == MAGIC_CUTS || with_busy;
        if magic != MAGIC && !with_cuts {
            return None;
        }
        let state = match r.u8()? {
            0 => State::New,
            1 => State::InFlight,
            2 => State::Waiting,
            3 => State::Dead,
            _ => return None,
        };
        let attempts = r.u32()?;
        let retry = RetryPolicy {
            max_attempts: r.u32()?,
            base_delay_ms: r.u64()?,
            max_delay_ms: r.u64()?,
        };
        let fire_at_us = r.u64()?;
        let last = match r.u8()? {
            0 => Last::None,
            1 => Last::Status(r.u16()?),
            2 => {
                let n = r.u16()? as usize;
                Last::Error(std::str::from_utf8(r.take(n)?).ok()?.to_string())
            }
            _ => return None,
        };
        let n = r.u16()? as usize;
        let url = std::str::from_utf8(r.take(n)?).ok()?.to_string();
        let cuts = if with_cuts { r.u8()? } else { 0 };
        let busy = if with_busy { r.u8()? } else { 0 };
        Some(Delivery {
            state,
            attempts,
            retry,
            fire_at_us,
            last,
            url,
            cuts,
            busy,
        })
    }

    /// Whether another attempt is allowed after the ones made.
    pub fn has_budget(&self) -> bool {
        self.attempts < self.retry.max_attempts
    }
}

/// Which firing a fire with this meta is: the timer's own (its deadline; also a timer without
/// a callback, or with a section that cannot be read), a step of its delivery, or a dead
/// letter's. The shard reads it once per fire and carries it on the `FiredTimer`.
pub fn firing_of(meta: &[u8]) -> Firing {
    // A queued message's state changes are steps, never its own firing again.
    if crate::queue::is_message(meta) {
        return Firing::Step;
    }
    if crate::timer::sink_meta(meta).is_empty() {
        return Firing::Own;
    }
    match Delivery::decode(meta).map(|d| d.state) {
        None | Some(State::New) => Firing::Own,
        Some(State::InFlight | State::Waiting) => Firing::Step,
        Some(State::Dead) => Firing::Dead,
    }
}

/// Whether a firing with this meta is the timer's own (its deadline), as opposed to a step of
/// its delivery: the stream entry and the in-process handler are for the timer's own firing
/// only. True for a timer without a callback.
pub fn is_own_firing(meta: &[u8]) -> bool {
    firing_of(meta) == Firing::Own
}

/// Whether this meta marks a dead letter (recovery puts those in the dead-letter table).
pub fn is_dead(meta: &[u8]) -> bool {
    firing_of(meta) == Firing::Dead
}

/// The meta of a re-driven dead letter: waiting for attempt 1 of a fresh budget, its own
/// firing long done. `None` when `meta` is not a dead letter's.
pub fn redriven(meta: &[u8]) -> Option<Vec<u8>> {
    let mut d = Delivery::decode(meta).filter(|d| d.state == State::Dead)?;
    d.state = State::Waiting;
    d.attempts = 0;
    d.cuts = 0;
    d.busy = 0;
    Some(d.encode())
}

/// The metadata of one occurrence of a recurring schedule whose callback is `meta`'s: a fresh
/// delivery to the same URL under the same retry policy, its own deadline the occurrence's.
/// `None` when `meta` holds no delivery that reads.
pub fn for_occurrence(meta: &[u8], fire_at_us: u64) -> Option<Vec<u8>> {
    let d = Delivery::decode(meta)?;
    Some(Delivery::new(d.url, d.retry, fire_at_us).encode())
}

/// `s`, cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
#[path = "meta_tests.rs"]
mod tests;
