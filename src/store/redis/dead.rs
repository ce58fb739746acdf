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
mod tests {
    use super::*;
    use crate::timer::PackedTimer;
    use crate::units::UtcMicros;

    #[test]
    fn burying_moves_the_record_and_names_the_outcome() {
        let t = PackedTimer::with_meta("shop", "o1", b"M", b"{\"a\":1}").expect("short");
        let l = DeadLetter {
            timer: &t,
            version: 7,
            fire_at: UtcMicros(9),
            attempts: 3,
            last_status: Some(503),
            last_error: None,
            callback: "http://h/x",
        };
        let [hset, hdel, xadd] = bury(&l, 100);
        let text = |c: &redis::Cmd| String::from_utf8_lossy(&c.get_packed_command()).into_owned();
        let p = partition_of("shop", "o1");
        assert!(text(&hset).contains(&dead_key(p)) && text(&hset).contains("7 9 m1:M {\"a\":1}"));
        assert!(text(&hdel).contains(&layout::timers_key(p)));
        let x = text(&xadd);
        for part in [
            "punctual:dead:{shop}",
            "attempts",
            "last_status",
            "503",
            "http://h/x",
        ] {
            assert!(x.contains(part), "{part} missing in {x:?}");
        }
        assert!(!x.contains("last_error"));
    }
}
