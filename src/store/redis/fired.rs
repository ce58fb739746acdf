//! The Redis Stream entry of a fired timer.
//!
//! Entries go to `punctual:fired:{<tenant>}` (the braces are literal: a Redis Cluster hash
//! tag), with the fields `key`, `version`, `fire_at_us`, `fired_at_us` and `payload` (the
//! JSON text as given, `null` when none was). The Redis store writes the entry in the same
//! `MULTI`/`EXEC` as the removal of the pending record (see `store::redis`), so an entry
//! exists exactly when the timer is no longer pending, except that a lost connection or a
//! crash can repeat an entry; both copies carry the same (tenant, key, version), which is what
//! consumers de-duplicate on. The stream is trimmed with `MAXLEN ~` to the configured length.
//!
//! Cost: one XADD per fire, pipelined with the rest of the shard's writes; the arguments are
//! written straight into the command's buffer.

use crate::timer::{payload_json, FiredTimer};

/// The stream of a tenant's fired timers: `punctual:fired:{<tenant>}`.
pub fn stream_key(tenant: &str) -> String {
    format!("punctual:fired:{{{tenant}}}")
}

/// [`stream_key`] as a command argument, written without an intermediate `String`.
struct StreamName<'a>(&'a str);

impl redis::ToRedisArgs for StreamName<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        // Writing into the command's Vec cannot fail.
        let _ = write!(out.writer_for_next_arg(), "punctual:fired:{{{}}}", self.0);
    }
}

/// `XADD punctual:fired:{tenant} MAXLEN ~ <maxlen> * key … version … fire_at_us …
/// fired_at_us … payload …`
pub fn xadd(t: &FiredTimer<'_>, maxlen: u64) -> redis::Cmd {
    let size = 128 + 2 * t.tenant.len() + t.key.len() + t.payload.len();
    let mut c = redis::Cmd::with_capacity(16, size);
    c.arg("XADD")
        .arg(StreamName(t.tenant))
        .arg("MAXLEN")
        .arg("~")
        .arg(maxlen)
        .arg("*")
        .arg("key")
        .arg(t.key)
        .arg("version")
        .arg(t.version)
        .arg("fire_at_us")
        .arg(t.deadline.0)
        .arg("fired_at_us")
        .arg(t.fired_at.as_micros().0)
        .arg("payload")
        .arg(payload_json(t.payload));
    c
}

#[cfg(test)]
#[path = "fired_tests.rs"]
mod tests;
