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

/// The partition whose hash tag `key` carries (`punctual:{p<N>}:…`, N written as
/// [`timers_key`] writes it), if any: where a routed command belongs.
pub fn partition_of_key(key: &[u8]) -> Option<u32> {
    let rest = key.strip_prefix(b"punctual:{p")?;
    let end = rest.iter().position(|&b| b == b'}')?;
    let digits = std::str::from_utf8(&rest[..end]).ok()?;
    let n: u32 = digits.parse().ok()?;
    (n < PARTITIONS && n.to_string() == digits).then_some(n)
}

/// Partition `p`'s lease: `<node>/<nonce>-<token>:<epoch>` of the node that owns it, with a TTL
/// (`punctual:{p<p>}:lease`, in the partition's own slot, so that a fenced write checks it
/// where the partition's data lives; see `store::redis::cluster::fence`).
pub fn lease_key(partition: u32) -> String {
    format!("punctual:{{p{partition}}}:lease")
}

/// Partition `p`'s lease epochs: a counter `INCR`ed by every acquisition, never reset
/// (`punctual:{p<p>}:epoch`, in the partition's slot).
pub fn epoch_key(partition: u32) -> String {
    format!("punctual:{{p{partition}}}:epoch")
}

/// The highest version any owner of partition `p` has written: a sorted set of one member,
/// [`VERSIONS_TOP`], whose score only grows (`ZADD … GT`, in the same fenced script as the
/// records it covers), `punctual:{p<p>}:versions`. A node that gains the partition counts its
/// versions on from above it, whatever its own clock says, so a key's versions only grow
/// across owners (`nodes::load`).
pub fn versions_key(partition: u32) -> String {
    format!("punctual:{{p{partition}}}:versions")
}

/// The one member of [`versions_key`]'s sorted set.
pub const VERSIONS_TOP: &str = "top";

/// The version a command writes, if it writes a record: `HSET <hash> <field> <record>`, the
/// record's leading decimal number (a pending timer's or a dead letter's, as
/// [`encode_record`] writes them).
pub fn written_version(cmd: &redis::Cmd) -> Option<u64> {
    let mut args = cmd.args_iter().map(|a| match a {
        redis::Arg::Simple(b) => b,
        redis::Arg::Cursor => &[][..],
    });
    if !args.next()?.eq_ignore_ascii_case(b"HSET") {
        return None;
    }
    let record = args.nth(2)?;
    let end = record.iter().position(|&b| b == b' ')?;
    std::str::from_utf8(&record[..end]).ok()?.parse().ok()
}

/// The live nodes of a cluster of punctual nodes: a sorted set, member the node's id,
/// score the Redis time (ms) its heartbeat expires at (see `nodes::membership`).
pub const MEMBERS_KEY: &str = "punctual:{members}:live";

/// Each node's record (JSON), by node id; in [`MEMBERS_KEY`]'s slot.
pub const MEMBER_RECORDS_KEY: &str = "punctual:{members}:records";

/// How many times the live set changed (a join, a leave, an expiry): a counter in
/// [`MEMBERS_KEY`]'s slot that nodes poll between beats (see `nodes::membership`).
pub const MEMBERS_VERSION_KEY: &str = "punctual:{members}:version";

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
        meta: &'a [u8],
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
                meta,
                payload,
            } => write_record(&mut w, *version, *fire_at_us, meta, payload),
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

/// A pending timer's record: `<version> <fire_at_us> [m<len>:<meta> ]<payload>` (decimal
/// numbers, one space each; the payload is the rest, spaces and all). The metadata part is
/// there only when the timer has any: it starts with `m`, which no JSON payload can start with,
/// so records written before it existed read the same.
pub fn encode_record(version: u64, fire_at_us: u64, meta: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(48 + meta.len() + payload.len());
    // Writing into a Vec cannot fail.
    let _ = write_record(&mut out, version, fire_at_us, meta, payload);
    out
}

fn write_record(
    w: &mut impl std::io::Write,
    version: u64,
    fire_at_us: u64,
    meta: &[u8],
    payload: &[u8],
) -> std::io::Result<()> {
    write!(w, "{version} {fire_at_us} ")?;
    if !meta.is_empty() {
        write!(w, "m{}:", meta.len())?;
        w.write_all(meta)?;
        w.write_all(b" ")?;
    }
    w.write_all(payload)
}

/// A timer's record in its partition's Redis hash, decoded (as [`encode_record`] writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashRecord<'a> {
    pub version: u64,
    pub fire_at_us: u64,
    pub meta: &'a [u8],
    pub payload: &'a [u8],
}

/// Decodes a record; `None` when it is malformed.
pub fn decode_record(record: &[u8]) -> Option<HashRecord<'_>> {
    let mut parts = record.splitn(3, |&b| b == b' ');
    let version = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let fire_at_us = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let rest = parts.next()?;
    let (meta, payload) = match rest.strip_prefix(b"m") {
        Some(tail) => {
            let colon = tail.iter().position(|&b| b == b':')?;
            let len: usize = std::str::from_utf8(&tail[..colon]).ok()?.parse().ok()?;
            let body = &tail[colon + 1..];
            let (meta, after) = (body.get(..len)?, body.get(len..)?);
            (meta, after.strip_prefix(b" ")?)
        }
        None => (&b""[..], rest),
    };
    Some(HashRecord {
        version,
        fire_at_us,
        meta,
        payload,
    })
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
