//! The sink: how a fired timer reaches the application.
//!
//! Two ways, both on the shard's thread: the in-process handler ([`crate::FiredTimer`], set
//! with `EngineBuilder::on_fire`), and, with Redis configured, one entry in the tenant's
//! stream `punctual:fired:{<tenant>}` (the braces are literal: a Redis Cluster hash tag).
//!
//! Stream entries have the fields `key`, `version`, `fire_at_us`, `fired_at_us` and `payload`
//! (the JSON text as given, `null` when none was). The XADD is written by the store in the
//! same MULTI/EXEC as the removal of the pending record (see `store`), so an entry exists
//! exactly when the timer is no longer pending, except that a lost connection or a crash can
//! repeat an entry; both copies carry the same (tenant, key, version), which is what consumers
//! de-duplicate on. The stream is trimmed with `MAXLEN ~` to the configured length.
//!
//! Cost: one XADD per fire, pipelined with the rest of the shard's writes.

use crate::units::{UtcMicros, UtcNanos};

/// The stream a tenant's fired timers are appended to: `punctual:fired:{<tenant>}`.
pub fn stream_key(tenant: &str) -> String {
    format!("punctual:fired:{{{tenant}}}")
}

/// The payload as the stream carries it: the JSON text, or `null` for an empty payload.
pub fn payload_text(payload: &[u8]) -> &[u8] {
    if payload.is_empty() {
        b"null"
    } else {
        payload
    }
}

/// One fired timer, as the store turns it into a stream entry.
pub struct FiredEntry<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub version: u64,
    pub fire_at: UtcMicros,
    pub fired_at: UtcNanos,
    pub payload: &'a [u8],
}

/// `XADD punctual:fired:{tenant} MAXLEN ~ <maxlen> * key … version … fire_at_us …
/// fired_at_us … payload …`
pub fn xadd(entry: &FiredEntry<'_>, maxlen: u64) -> redis::Cmd {
    let size = 128 + 2 * entry.tenant.len() + entry.key.len() + entry.payload.len();
    let mut c = redis::Cmd::with_capacity(16, size);
    c.arg("XADD")
        .arg(crate::store::layout::Arg::Stream {
            tenant: entry.tenant,
        })
        .arg("MAXLEN")
        .arg("~")
        .arg(maxlen)
        .arg("*")
        .arg("key")
        .arg(entry.key)
        .arg("version")
        .arg(entry.version)
        .arg("fire_at_us")
        .arg(entry.fire_at.0)
        .arg("fired_at_us")
        .arg(entry.fired_at.as_micros().0)
        .arg("payload")
        .arg(payload_text(entry.payload));
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_key_has_a_literal_hash_tag() {
        assert_eq!(stream_key("shop"), "punctual:fired:{shop}");
    }

    #[test]
    fn xadd_names_every_field_and_trims_approximately() {
        let e = FiredEntry {
            tenant: "shop",
            key: "o1",
            version: 7,
            fire_at: UtcMicros(10),
            fired_at: UtcNanos(12_999),
            payload: b"",
        };
        let packed = String::from_utf8(xadd(&e, 1000).get_packed_command()).unwrap_or_default();
        for part in [
            "XADD",
            "MAXLEN",
            "~",
            "1000",
            "key",
            "o1",
            "fired_at_us",
            "12",
            "null",
        ] {
            assert!(packed.contains(part), "{part} missing in {packed:?}");
        }
    }
}
