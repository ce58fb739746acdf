//! Dead letters in Redis: kept in a hash per partition beside the pending timers, and appended
//! to a stream per tenant for consumers.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `punctual:{p<N>}:dead` | hash | field `<tenant>/<key>` → the record of the dead timer (the same text as a pending one: version, its own deadline, its final delivery metadata, payload) |
//! | `punctual:dead:{<tenant>}` | stream | one entry per timer that became dead: `key`, `version`, `fire_at_us`, `attempts`, `last_status` or `last_error`, `callback`, `payload` |
//!
//! A timer becomes dead in one transaction (`HSET` of the letter, `HDEL` of the pending
//! record, `XADD`), so it is pending or dead, never neither. Re-driving writes the pending
//! record, then deletes the letter: a crash between the two leaves both, and the timer is
//! delivered again (at least once) with its letter still listed.

use super::layout::{self, partition_of, Arg};
use crate::store::DeadLetter;
use crate::timer::payload_json;

/// The hash holding partition `p`'s dead letters: `punctual:{p<p>}:dead`.
pub fn dead_key(partition: u32) -> String {
    format!("punctual:{{p{partition}}}:dead")
}

/// The stream of a tenant's dead letters: `punctual:dead:{<tenant>}`.
pub fn dead_stream(tenant: &str) -> String {
    format!("punctual:dead:{{{tenant}}}")
}

/// `HSET` of the letter, `HDEL` of the pending record, `XADD` to the tenant's dead stream:
/// one transaction.
pub fn bury(l: &DeadLetter<'_>, maxlen: u64) -> [redis::Cmd; 3] {
    let (tenant, key) = (l.timer.tenant(), l.timer.key());
    let p = partition_of(tenant, key);
    let mut hset = redis::cmd("HSET");
    hset.arg(dead_key(p))
        .arg(Arg::Field { tenant, key })
        .arg(Arg::Record {
            version: l.version,
            fire_at_us: l.fire_at.0,
            meta: l.timer.meta(),
            payload: l.timer.payload(),
        });
    let mut hdel = redis::cmd("HDEL");
    hdel.arg(layout::timers_key_static(p))
        .arg(Arg::Field { tenant, key });
    let mut xadd = redis::cmd("XADD");
    xadd.arg(dead_stream(tenant))
        .arg("MAXLEN")
        .arg("~")
        .arg(maxlen)
        .arg("*")
        .arg("key")
        .arg(key)
        .arg("version")
        .arg(l.version)
        .arg("fire_at_us")
        .arg(l.fire_at.0)
        .arg("attempts")
        .arg(l.attempts);
    if let Some(s) = l.last_status {
        xadd.arg("last_status").arg(s);
    }
    if let Some(e) = l.last_error {
        xadd.arg("last_error").arg(e);
    }
    xadd.arg("callback")
        .arg(l.callback)
        .arg("payload")
        .arg(payload_json(l.timer.payload()));
    [hset, hdel, xadd]
}

/// `HDEL` of a dead letter (discarded or re-driven).
pub fn remove(tenant: &str, key: &str) -> redis::Cmd {
    let mut c = redis::cmd("HDEL");
    c.arg(dead_key(partition_of(tenant, key)))
        .arg(Arg::Field { tenant, key });
    c
}

#[cfg(test)]
#[path = "dead_tests.rs"]
mod tests;
