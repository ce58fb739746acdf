//! A webhook timer's delivery state, as it rides in the timer's opaque `meta` section (see
//! `wheel::table::PackedTimer`) and so in every store record: the callback, the retry policy,
//! how far delivery has got, and the last outcome.
//!
//! # Layout (version 1, little endian)
//!
//! ```text
//!   b'W' 1 | state u8 | attempts u32 | max_attempts u32 | base_delay_ms u64 | max_delay_ms u64
//!        | fire_at_us u64 | last: 0 | 1 status u16 | 2 len u16 error… | url_len u16 url…
//! ```
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
//! without a callback.

/// Tag and format version: the first two bytes.
const MAGIC: [u8; 2] = [b'W', 1];

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
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.url.len());
        out.extend_from_slice(&MAGIC);
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
        out
    }

    /// `None` for an empty or malformed section.
    pub fn decode(meta: &[u8]) -> Option<Delivery> {
        let mut r = Reader(meta);
        if r.take(2)? != MAGIC {
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
        Some(Delivery {
            state,
            attempts,
            retry,
            fire_at_us,
            last,
            url,
        })
    }

    /// Whether another attempt is allowed after the ones made.
    pub fn has_budget(&self) -> bool {
        self.attempts < self.retry.max_attempts
    }
}

/// Whether a firing with this meta is the timer's own (its deadline), as opposed to a step of
/// its delivery: the stream entry and the in-process handler are for the timer's own firing
/// only. True for a timer without a callback.
pub fn is_own_firing(meta: &[u8]) -> bool {
    meta.is_empty() || Delivery::decode(meta).is_none_or(|d| d.state == State::New)
}

/// Whether this meta marks a dead letter (recovery puts those in the dead-letter table).
pub fn is_dead(meta: &[u8]) -> bool {
    Delivery::decode(meta).is_some_and(|d| d.state == State::Dead)
}

/// The meta of a re-driven dead letter: waiting for attempt 1 of a fresh budget, its own
/// firing long done. `None` when `meta` is not a dead letter's.
pub fn redriven(meta: &[u8]) -> Option<Vec<u8>> {
    let mut d = Delivery::decode(meta).filter(|d| d.state == State::Dead)?;
    d.state = State::Waiting;
    d.attempts = 0;
    Some(d.encode())
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
mod tests {
    use super::*;

    fn sample() -> Delivery {
        Delivery::new(
            "https://example.com/hook".into(),
            RetryPolicy {
                max_attempts: 3,
                base_delay_ms: 1000,
                max_delay_ms: 60_000,
            },
            1_700_000_000_000_000,
        )
    }

    #[test]
    fn every_state_and_outcome_round_trips() {
        for (state, last) in [
            (State::New, Last::None),
            (State::InFlight, Last::Status(503)),
            (State::Waiting, Last::Error("connection refused".into())),
            (State::Dead, Last::Status(404)),
        ] {
            let mut d = sample();
            d.state = state;
            d.attempts = 2;
            d.last = last;
            assert_eq!(Delivery::decode(&d.encode()), Some(d));
        }
    }

    #[test]
    fn any_truncation_or_garbage_decodes_to_none_without_panicking() {
        let mut d = sample();
        d.last = Last::Error("é".repeat(300));
        let bytes = d.encode();
        for n in 0..bytes.len() {
            assert_eq!(Delivery::decode(&bytes[..n]), None, "cut at {n}");
        }
        assert_eq!(Delivery::decode(b"{\"json\":1}"), None);
        let mut bad_state = bytes.clone();
        bad_state[2] = 9;
        assert_eq!(Delivery::decode(&bad_state), None);
        // The long error was cut at a character boundary, not mid-character.
        let back = Delivery::decode(&bytes).expect("valid");
        assert!(
            matches!(back.last, Last::Error(e) if e.len() <= MAX_ERROR && e.chars().all(|c| c == 'é'))
        );
    }

    #[test]
    fn only_a_new_or_plain_timer_is_its_own_firing_and_redrive_resets_the_budget() {
        let mut d = sample();
        assert!(is_own_firing(&[]) && is_own_firing(&d.encode()));
        d.state = State::Waiting;
        assert!(!is_own_firing(&d.encode()));
        assert_eq!(
            redriven(&d.encode()),
            None,
            "only a dead letter is re-driven"
        );
        d.state = State::Dead;
        d.attempts = 3;
        assert!(is_dead(&d.encode()));
        let r = Delivery::decode(&redriven(&d.encode()).expect("dead")).expect("valid");
        assert_eq!((r.state, r.attempts), (State::Waiting, 0));
        assert!(r.has_budget());
    }
}
