//! Pull queues: a fired timer without a callback, of a tenant whose queue is on, waits as a
//! message until a consumer receives it (`POST /v1/queues/{tenant}/receive`) and acknowledges
//! it. This file holds what every part shares: the message's state as it rides in the
//! timer's metadata, the receipts handed to consumers, and the tenants' queue settings.
//!
//! # A message is a timer kept in its shard's table
//!
//! A queued message stays a pending timer of its key's shard, with this metadata in place of
//! a callback's, so every store already persists it (the kept record) and a restart brings it
//! back like any timer. Its deadline says when it next changes state by itself:
//!
//! | state | deadline in the wheel | at that deadline |
//! |---|---|---|
//! | `Ready` | queued at + its tenant's retention (`queue_retention_s`, [`DEFAULT_RETENTION`]) | a dead letter (too old) |
//! | `Leased` (received, not acked) | the end of its visibility timeout | `Ready` again, or a dead letter after `max_receives` receives |
//! | `Delayed` (nacked with a delay, or re-driven) | the end of the delay | `Ready` |
//!
//! # Layout (version 1, little endian, [`MESSAGE_LEN`] bytes)
//!
//! ```text
//!   b'Q' 1 | state u8 | receive_count u32 | lease u64 | fire_at_us u64 | fired_at_us u64 | queued_at_us u64
//! ```
//!
//! `lease` numbers a receive: a new one on each, so a receipt names one receive and no other.
//! Decoding never panics: anything else is `None` (a webhook's metadata starts with `W`).
//!
//! # Receipts
//!
//! `base64url(key_len u16 | key | version u64 | lease u64 | tag[16])`, the tag an HMAC-SHA256
//! of the tenant, key, version and lease under a key drawn at each start. A receipt cannot be
//! forged or moved to another tenant (its tag would not match: answered as unknown), and one
//! of a receive the message has moved past (acked, expired, nacked, received again) names a
//! lease the message no longer has (answered `409 lease_expired`). A restart draws a new key:
//! receipts handed out before it are unknown, and their messages come back when their
//! visibility passes.
//!
//! Cost: encoding and decoding a message are a few copies of 39 bytes; a receipt is one HMAC.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a message waits to be received before it becomes a dead letter, unless the
/// tenant sets it (`queue_retention_s`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest retention a tenant may set: a year.
pub const MAX_RETENTION_S: u64 = 365 * 24 * 3600;
/// Receives of one tenant that may wait for messages at once (all shards together), unless
/// the tenant sets it (`queue_max_waiting`); past it a receive that would wait is refused.
pub const DEFAULT_MAX_WAITING: u32 = 100;
/// The most waiting receives a tenant may allow.
pub const MAX_WAITING: u64 = 10_000;
/// Receives of one message before it becomes a dead letter, unless the tenant sets it.
pub const DEFAULT_MAX_RECEIVES: u32 = 10;
/// The longest a receive may wait for messages (`wait_ms`).
pub const MAX_WAIT_MS: u64 = 20_000;
/// The most messages one receive may ask for (`max`).
pub const MAX_BATCH: u64 = 1_000;
/// The most receipts in one ack, nack or extend.
pub const MAX_RECEIPTS: usize = 1_000;
/// The visibility timeout of a receive that names none.
pub const DEFAULT_VISIBILITY_MS: u64 = 30_000;
/// The longest visibility timeout (and nack delay): 12 hours.
pub const MAX_VISIBILITY_MS: u64 = 12 * 3600 * 1000;

const MAGIC: [u8; 2] = [b'Q', 1];
/// Bytes of a message's metadata.
pub const MESSAGE_LEN: usize = 2 + 1 + 4 + 8 + 8 + 8 + 8;
const TAG_LEN: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageState {
    Ready = 0,
    Leased = 1,
    Delayed = 2,
}

/// A queued message's state, as its metadata holds it (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    pub state: MessageState,
    pub receive_count: u32,
    pub lease: u64,
    /// The timer's own deadline, and when it fired.
    pub fire_at_us: u64,
    pub fired_at_us: u64,
    /// When it entered the queue (its fire, or its re-drive): its retention counts from here.
    pub queued_at_us: u64,
}

impl Message {
    /// A message just queued by its timer's fire.
    pub fn queued(fire_at_us: u64, fired_at_us: u64) -> Message {
        Message {
            state: MessageState::Ready,
            receive_count: 0,
            lease: 0,
            fire_at_us,
            fired_at_us,
            queued_at_us: fired_at_us,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MESSAGE_LEN);
        out.extend_from_slice(&MAGIC);
        out.push(self.state as u8);
        out.extend_from_slice(&self.receive_count.to_le_bytes());
        for w in [
            self.lease,
            self.fire_at_us,
            self.fired_at_us,
            self.queued_at_us,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The message `meta` holds; `None` for any other metadata.
    pub fn decode(meta: &[u8]) -> Option<Message> {
        if meta.len() != MESSAGE_LEN || meta[..2] != MAGIC {
            return None;
        }
        let state = match meta[2] {
            0 => MessageState::Ready,
            1 => MessageState::Leased,
            2 => MessageState::Delayed,
            _ => return None,
        };
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&meta[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let mut count = [0u8; 4];
        count.copy_from_slice(&meta[3..7]);
        Some(Message {
            state,
            receive_count: u32::from_le_bytes(count),
            lease: word(7),
            fire_at_us: word(15),
            fired_at_us: word(23),
            queued_at_us: word(31),
        })
    }

    /// When a ready message kept `retention_us` becomes a dead letter for its age.
    pub fn expires_at_us(&self, retention_us: u64) -> u64 {
        self.queued_at_us.saturating_add(retention_us)
    }
}

/// Whether `meta` is a queued message's.
pub fn is_message(meta: &[u8]) -> bool {
    Message::decode(meta).is_some()
}

/// The message of a re-driven dead letter: due now as `Delayed` (so it becomes ready at its
/// next fire), its receives counted afresh and its age from `now_us`. `None` when `meta` is
/// not a message's.
pub fn redriven(meta: &[u8], now_us: u64) -> Option<Vec<u8>> {
    let mut m = Message::decode(meta)?;
    m.state = MessageState::Delayed;
    m.receive_count = 0;
    m.queued_at_us = now_us;
    Some(m.encode())
}

/// What a receipt names: a message's key, version, and the receive (`lease`) it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiptOf {
    pub key: String,
    pub version: u64,
    pub lease: u64,
}

/// One tenant's queue settings (`[tenants.<name>]`: `queue_max_receives`,
/// `queue_retention_s`, `queue_max_waiting`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSettings {
    pub max_receives: u32,
    pub retention: Duration,
    pub max_waiting: u32,
}

impl Default for QueueSettings {
    fn default() -> QueueSettings {
        QueueSettings {
            max_receives: DEFAULT_MAX_RECEIVES,
            retention: DEFAULT_RETENTION,
            max_waiting: DEFAULT_MAX_WAITING,
        }
    }
}

impl From<u32> for QueueSettings {
    /// The defaults, with `max_receives`.
    fn from(max_receives: u32) -> QueueSettings {
        QueueSettings {
            max_receives,
            ..QueueSettings::default()
        }
    }
}

/// The tenants whose queue is on, the receipts' key, and per tenant the count each of its
/// messages bumps as it becomes ready (a waiting receive looks at it to know when to ask the
/// shards again), its waiting receives, and its figures for `/metrics`. Shared by all shards
/// and servers; the tenants are fixed at start, so the map is read without a lock.
pub struct PullQueues {
    tenants: HashMap<String, TenantQueue>,
    secret: [u8; 32],
}

struct TenantQueue {
    settings: QueueSettings,
    ready: AtomicU64,
    /// Receives waiting for messages now (at most `settings.max_waiting`).
    waiting: AtomicU32,
    figures: QueueFigures,
}

/// One tenant's queue figures, all shards together (`/metrics`). The counters are bumped by
/// the shards as messages change state; the gauges are filled by a scrape from the shards'
/// counts ([`PullQueues::set_counts`]).
#[derive(Default)]
pub struct QueueFigures {
    /// Messages handed out by receives.
    pub received: AtomicU64,
    pub acked: AtomicU64,
    pub nacked: AtomicU64,
    /// Leases that ended without an ack or a nack.
    pub expired: AtomicU64,
    /// Messages that became dead letters (too many receives, or too old).
    pub dead: AtomicU64,
    /// Receives refused for too many waiting (`429 too_many_receives`).
    pub refused: AtomicU64,
    pub ready: AtomicU64,
    pub in_flight: AtomicU64,
    pub delayed: AtomicU64,
    /// When the oldest ready message entered the queue, µs (0: none ready).
    pub oldest_queued_at_us: AtomicU64,
}

impl QueueFigures {
    /// `counter += n`, from any shard.
    pub fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// A receive waiting for messages, counted against its tenant's `max_waiting` until dropped.
pub struct Waiting {
    queues: Arc<PullQueues>,
    tenant: String,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(t) = self.queues.tenants.get(&self.tenant) {
            t.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl PullQueues {
    /// Queues on for `tenants` (name, settings, or only `max_receives`); a receipt key drawn
    /// from the OS.
    pub fn new<S: Into<QueueSettings>>(
        tenants: impl IntoIterator<Item = (String, S)>,
    ) -> PullQueues {
        let mut secret = [0u8; 32];
        if let Err(e) = getrandom::fill(&mut secret) {
            // Without the OS's randomness the key is the time's: receipts stay bound to
            // their tenant and lease, only guessable by one who knows the start's instant.
            tracing::error!(error = %e, "no OS randomness for the queues' receipt key");
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            secret[..8].copy_from_slice(&t.to_le_bytes());
        }
        PullQueues {
            tenants: tenants
                .into_iter()
                .map(|(name, settings)| {
                    let settings = settings.into();
                    let q = TenantQueue {
                        settings,
                        ready: AtomicU64::new(0),
                        waiting: AtomicU32::new(0),
                        figures: QueueFigures::default(),
                    };
                    (name, q)
                })
                .collect(),
            secret,
        }
    }

    /// `tenant`'s `max_receives` if its queue is on.
    pub fn max_receives(&self, tenant: &str) -> Option<u32> {
        self.tenants.get(tenant).map(|t| t.settings.max_receives)
    }

    /// `tenant`'s settings if its queue is on.
    pub fn settings(&self, tenant: &str) -> Option<QueueSettings> {
        self.tenants.get(tenant).map(|t| t.settings)
    }

    /// How long `tenant`'s messages are kept ready, in µs ([`DEFAULT_RETENTION`] for a
    /// tenant without a queue: a message of a tenant whose queue was turned off).
    pub fn retention_us(&self, tenant: &str) -> u64 {
        let r = self
            .tenants
            .get(tenant)
            .map_or(DEFAULT_RETENTION, |t| t.settings.retention);
        r.as_micros() as u64
    }

    /// `tenant`'s figures, if its queue is on.
    pub fn figures(&self, tenant: &str) -> Option<&QueueFigures> {
        self.tenants.get(tenant).map(|t| &t.figures)
    }

    /// The tenants whose queue is on, by name, with their figures.
    pub fn all_figures(&self) -> Vec<(&str, &QueueFigures)> {
        let mut all: Vec<_> = self
            .tenants
            .iter()
            .map(|(name, t)| (name.as_str(), &t.figures))
            .collect();
        all.sort_unstable_by_key(|(name, _)| *name);
        all
    }

    /// Receives of `tenant` waiting now.
    pub fn waiting(&self, tenant: &str) -> u32 {
        self.tenants
            .get(tenant)
            .map_or(0, |t| t.waiting.load(Ordering::Relaxed))
    }

    /// Stores a scrape's count of `tenant`'s messages in its gauges.
    pub fn set_counts(&self, tenant: &str, c: &QueueCounts) {
        if let Some(f) = self.figures(tenant) {
            f.ready.store(c.ready, Ordering::Relaxed);
            f.in_flight.store(c.in_flight, Ordering::Relaxed);
            f.delayed.store(c.delayed, Ordering::Relaxed);
            let oldest = c.oldest_queued_at_us.unwrap_or(0);
            f.oldest_queued_at_us.store(oldest, Ordering::Relaxed);
        }
    }

    /// One more receive of `tenant` waiting, or its `max_waiting` if that many wait already.
    pub fn start_waiting(self: &Arc<Self>, tenant: &str) -> Result<Waiting, u32> {
        let Some(t) = self.tenants.get(tenant) else {
            return Err(0);
        };
        let max = t.settings.max_waiting;
        let took = t
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            });
        match took {
            Ok(_) => Ok(Waiting {
                queues: self.clone(),
                tenant: tenant.to_string(),
            }),
            Err(_) => {
                QueueFigures::count(&t.figures.refused, 1);
                Err(max)
            }
        }
    }

    /// A message of `tenant` became ready on some shard, after its table changed.
    pub fn bump(&self, tenant: &str) {
        if let Some(t) = self.tenants.get(tenant) {
            t.ready.fetch_add(1, Ordering::Release);
        }
    }

    /// The count [`PullQueues::bump`] raises for `tenant` (0 for a tenant without a queue).
    pub fn ready_count(&self, tenant: &str) -> u64 {
        self.tenants
            .get(tenant)
            .map_or(0, |t| t.ready.load(Ordering::Acquire))
    }

    /// The MAC over a receipt's names, keyed by this process's secret.
    fn mac(&self, tenant: &str, key: &str, version: u64, lease: u64) -> Option<Hmac<Sha256>> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).ok()?;
        mac.update(&(tenant.len() as u16).to_le_bytes());
        mac.update(tenant.as_bytes());
        mac.update(key.as_bytes());
        mac.update(&version.to_le_bytes());
        mac.update(&lease.to_le_bytes());
        Some(mac)
    }

    /// The receipt of `tenant`'s message under `key`, `version`, received as `lease`.
    pub fn receipt(&self, tenant: &str, key: &str, version: u64, lease: u64) -> String {
        use base64::Engine;
        let mut raw = Vec::with_capacity(2 + key.len() + 16 + TAG_LEN);
        raw.extend_from_slice(&(key.len() as u16).to_le_bytes());
        raw.extend_from_slice(key.as_bytes());
        raw.extend_from_slice(&version.to_le_bytes());
        raw.extend_from_slice(&lease.to_le_bytes());
        let tag: [u8; 32] = self
            .mac(tenant, key, version, lease)
            .map_or([0; 32], |m| m.finalize().into_bytes().into());
        raw.extend_from_slice(&tag[..TAG_LEN]);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    /// What `receipt` names, if it is one this process handed out for `tenant`.
    pub fn open(&self, tenant: &str, receipt: &str) -> Option<ReceiptOf> {
        use base64::Engine;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(receipt)
            .ok()?;
        let key_len = u16::from_le_bytes([*raw.first()?, *raw.get(1)?]) as usize;
        if raw.len() != 2 + key_len + 16 + TAG_LEN {
            return None;
        }
        let key = std::str::from_utf8(&raw[2..2 + key_len]).ok()?;
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&raw[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let (version, lease) = (word(2 + key_len), word(10 + key_len));
        let mac = self.mac(tenant, key, version, lease)?;
        mac.verify_truncated_left(&raw[18 + key_len..]).ok()?;
        Some(ReceiptOf {
            key: key.to_string(),
            version,
            lease,
        })
    }
}

impl Default for PullQueues {
    /// No tenant has a queue.
    fn default() -> PullQueues {
        PullQueues::new::<u32>([])
    }
}

/// One message handed to a consumer by a receive.
#[derive(Clone, Debug)]
pub struct Received {
    pub key: String,
    pub version: u64,
    pub lease: u64,
    pub fire_at_us: u64,
    pub fired_at_us: u64,
    pub receive_count: u32,
    pub payload: Vec<u8>,
}

/// What an ack, nack or extend asks of one leased message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settlement {
    Ack,
    /// Back to the queue after this delay (0: at once).
    Nack {
        delay_ms: u64,
    },
    /// The lease lasts this long from now.
    Extend {
        visibility_ms: u64,
    },
}

/// How an ack, nack or extend of one receipt went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    Done,
    /// The receipt's lease has passed: the message is no longer leased under it.
    LeaseExpired,
}

/// One shard's count of a tenant's messages (`GET /v1/queues/{tenant}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub ready: u64,
    pub in_flight: u64,
    pub delayed: u64,
    /// When the oldest ready message entered the queue.
    pub oldest_queued_at_us: Option<u64>,
}

impl QueueCounts {
    pub fn add(&mut self, o: &QueueCounts) {
        self.ready += o.ready;
        self.in_flight += o.in_flight;
        self.delayed += o.delayed;
        self.oldest_queued_at_us = match (self.oldest_queued_at_us, o.oldest_queued_at_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
