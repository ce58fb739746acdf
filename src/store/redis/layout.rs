//! The Redis key layout: partitions, key names, and the text of a pending timer's record.
//!
//! Everything that decides *where* a timer lives in Redis is here, so that the layout is
//! changed in one place (and, because it is persistent, never changed lightly: see
//! `partition::PARTITIONS`).

pub use crate::partition::{partition_of, PARTITIONS};

/// The hash holding partition `p`'s pending timers: `punctual:{p<p>}:timers`. The braces are a
/// Redis Cluster hash tag, so one partition's keys share a slot.
pub fn timers_key(partition: u32) -> String {
    format!("punctual:{{p{partition}}}:timers")
}

/// [`timers_key`] without an allocation: the 1,024 names are made once per process.
pub fn timers_key_static(partition: u32) -> &'static str {
    static KEYS: std::sync::OnceLock<Box<[String]>> = std::sync::OnceLock::new();
    let keys = KEYS.get_or_init(|| (0..PARTITIONS).map(timers_key).collect());
    keys.get(partition as usize).map_or("", String::as_str)
}

/// A command argument written straight into the command's buffer from its parts: the field
/// (`<tenant>/<key>`) or a record, without an intermediate allocation.
pub enum Arg<'a> {
    Field {
        tenant: &'a str,
        key: &'a str,
    },
    Record {
        version: u64,
        fire_at_us: u64,
        payload: &'a [u8],
    },
}

impl redis::ToRedisArgs for Arg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let mut w = out.writer_for_next_arg();
        // Writes into the command's Vec cannot fail.
        let _ = match self {
            Arg::Field { tenant, key } => write!(w, "{tenant}/{key}"),
            Arg::Record {
                version,
                fire_at_us,
                payload,
            } => write!(w, "{version} {fire_at_us} ").and_then(|()| w.write_all(payload)),
        };
    }
}

/// The field of a pending timer inside its partition's hash: `<tenant>/<key>` (`/` never
/// occurs in a valid name, so the split is unambiguous).
pub fn field(tenant: &str, key: &str) -> String {
    let mut f = String::with_capacity(tenant.len() + 1 + key.len());
    f.push_str(tenant);
    f.push('/');
    f.push_str(key);
    f
}

/// Splits a field back into (tenant, key).
pub fn parse_field(field: &[u8]) -> Option<(&str, &str)> {
    let s = std::str::from_utf8(field).ok()?;
    let (tenant, key) = s.split_once('/')?;
    (!tenant.is_empty() && !key.is_empty()).then_some((tenant, key))
}

/// A pending timer's record: `<version> <fire_at_us> <payload bytes>` (decimal numbers, one
/// space each; the payload is the rest, spaces and all).
pub fn encode_record(version: u64, fire_at_us: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(42 + payload.len());
    out.extend_from_slice(version.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(fire_at_us.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// A decoded record: (version, fire_at_us, payload).
pub fn decode_record(record: &[u8]) -> Option<(u64, u64, &[u8])> {
    let mut parts = record.splitn(3, |&b| b == b' ');
    let version = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let fire_at = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    Some((version, fire_at, parts.next()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_payload_with_spaces() {
        let r = encode_record(17, 1_700_000_000_000_000, b"{\"a\": 1 }");
        assert_eq!(
            decode_record(&r),
            Some((17, 1_700_000_000_000_000, &b"{\"a\": 1 }"[..]))
        );
        assert_eq!(decode_record(b"1 2 "), Some((1, 2, &b""[..])));
        assert_eq!(decode_record(b"x 2 p"), None);
        assert_eq!(decode_record(b"1 2"), None);
    }

    #[test]
    fn args_write_the_same_bytes_as_the_strings() {
        let packed = |a: &dyn Fn(&mut redis::Cmd)| {
            let mut c = redis::cmd("X");
            a(&mut c);
            c.get_packed_command()
        };
        assert_eq!(
            packed(&|c| {
                c.arg(Arg::Field {
                    tenant: "t",
                    key: "k",
                })
                .arg(Arg::Record {
                    version: 3,
                    fire_at_us: 9,
                    payload: b"p q",
                });
            }),
            packed(&|c| {
                c.arg(field("t", "k")).arg(encode_record(3, 9, b"p q"));
            })
        );
        assert_eq!(timers_key_static(42), timers_key(42));
        assert_eq!(timers_key_static(PARTITIONS), "");
    }

    #[test]
    fn field_splits_at_the_first_slash() {
        assert_eq!(
            parse_field(field("t", "k:1").as_bytes()),
            Some(("t", "k:1"))
        );
        assert_eq!(parse_field(b"noslash"), None);
        assert_eq!(timers_key(42), "punctual:{p42}:timers");
    }
}
