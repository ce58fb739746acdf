//! Stream entries written under the partition's lease: on a node among others, a fire's or a
//! dead letter's stream entry is first written into the partition's own relay stream by the
//! partition's fenced script, then relayed to the tenant's stream, once.
//!
//! # Why a relay
//!
//! A tenant's stream (`punctual:fired:{<tenant>}`) and a partition's keys lie in two slots,
//! and one script runs on one slot: the lease check cannot cover an `XADD` to the tenant's
//! stream. Sent on its own, that `XADD` goes out whatever became of the lease: a deposed node
//! (paused, or retrying for minutes) adds fire entries after its deadline, and a dead letter
//! decided after it adds a dead entry for a timer the new owner then delivers. So the entry is
//! written where the lease is checked, and moved from there:
//!
//! ```text
//!   script of p (fenced):  HDEL timers a  +  XADD punctual:{pN}:relay * to <stream> opts "<opts…>" <fields…>
//!                          → FENCED: neither lands; else both, and the relay entry's id
//!   relay (tenant's slot): SET punctual:relayed:{<tenant>}:p<N>:<id> NX PX 600000
//!                          and only if it was set: XADD <stream> <opts…> * <fields…>
//!   then:                  XDEL punctual:{pN}:relay <id>; then DEL of the marker
//! ```
//!
//! The marker makes the relay idempotent: an entry relayed again (the `XDEL` was lost, the
//! process died between the steps) finds it and adds nothing. A relay entry left behind is
//! relayed by the node that holds the partition (`nodes::sweep`), at most a few seconds
//! later. An entry reaches its tenant's stream once, unless its marker expired first (ten
//! minutes: a partition no node held for that long); then it may repeat, with the same key
//! and version, as a fire repeated after a crash does.
//!
//! The alternative, a check of the lease before each `XADD` and a proof carried with it, still
//! leaves a window between the check and the `XADD`: a relay has none, since nothing reaches
//! the tenant's stream that a fenced script did not write first.
//!
//! # Cost
//!
//! Per entry: its fields written twice (relay, then stream), and three more commands (the
//! relay script, `XDEL`, `DEL`), in three more pipelined calls per batch that holds stream
//! entries. The relay stream holds entries only between a batch's script and its relay.

use super::cluster::{ClusterClient, ClusterError, Routed};
use redis::Value;

/// Why a relay did not complete (what is left is relayed at the next sweep).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("Redis answered {0}")]
    Reply(String),
}

/// How long a relay marker lasts: longer than any relay entry waits for its relay (a sweep
/// every few seconds by the partition's holder).
const MARKER_MS: u64 = 600_000;

/// Partition `p`'s relay stream: `punctual:{pN}:relay`, in p's slot.
pub fn relay_key(partition: u32) -> String {
    format!("punctual:{{p{partition}}}:relay")
}

/// A stream entry on its way to its tenant's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relayed {
    pub partition: u32,
    /// The tenant's stream key.
    pub stream: Vec<u8>,
    /// The `XADD` options before `*` (`MAXLEN ~ n`).
    pub opts: Vec<Vec<u8>>,
    /// Field, value, field, value…
    pub fields: Vec<Vec<u8>>,
}

/// The `XADD` `cmd` (to a tenant's stream) as an `XADD` to `partition`'s relay stream, and
/// what it carries; `None` for anything that is not such an `XADD`.
pub fn divert(cmd: &redis::Cmd, partition: u32) -> Option<(redis::Cmd, Relayed)> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => Some(b),
            redis::Arg::Cursor => None,
        })
        .collect::<Option<_>>()?;
    let (name, rest) = args.split_first()?;
    if !name.eq_ignore_ascii_case(b"XADD") {
        return None;
    }
    let (stream, rest) = rest.split_first()?;
    let star = rest.iter().position(|a| *a == b"*")?;
    let r = Relayed {
        partition,
        stream: stream.to_vec(),
        opts: rest[..star].iter().map(|a| a.to_vec()).collect(),
        fields: rest[star + 1..].iter().map(|a| a.to_vec()).collect(),
    };
    let mut x = redis::cmd("XADD");
    x.arg(relay_key(partition))
        .arg("*")
        .arg("to")
        .arg(&r.stream)
        .arg("opts")
        .arg(r.opts.join(&b' '));
    for f in &r.fields {
        x.arg(f);
    }
    Some((x, r))
}

/// The relay entry `fields` (as [`divert`] wrote them) of `partition`, read back.
fn undivert(partition: u32, fields: &[Vec<u8>]) -> Option<Relayed> {
    let [to, stream, opts, joined, rest @ ..] = fields else {
        return None;
    };
    if to.as_slice() != b"to" || opts.as_slice() != b"opts" {
        return None;
    }
    Some(Relayed {
        partition,
        stream: stream.clone(),
        opts: joined
            .split(|&b| b == b' ')
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
        fields: rest.to_vec(),
    })
}

/// The hash tag of a stream key (`{shop}` of `punctual:fired:{shop}`), for a key in its slot.
fn tag(stream: &[u8]) -> &[u8] {
    let open = stream.iter().position(|&b| b == b'{');
    let close = open.and_then(|o| {
        stream[o + 1..]
            .iter()
            .position(|&b| b == b'}')
            .map(|c| o + 1 + c)
    });
    match (open, close) {
        (Some(o), Some(c)) if c > o + 1 => &stream[o..=c],
        _ => stream,
    }
}

fn marker(r: &Relayed, id: &[u8]) -> Vec<u8> {
    let mut m = b"punctual:relayed:".to_vec();
    m.extend_from_slice(tag(&r.stream));
    m.extend_from_slice(format!(":p{}:", r.partition).as_bytes());
    m.extend_from_slice(id);
    m
}

const RELAY: &str = r"
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then
  return 0
end
local args = {'XADD', KEYS[1]}
for w in string.gmatch(ARGV[2], '%S+') do args[#args + 1] = w end
args[#args + 1] = '*'
for i = 3, #ARGV do args[#args + 1] = ARGV[i] end
redis.call(unpack(args))
return 1
";

/// Relays `entries` (each with its relay entry's id) to their tenants' streams, then deletes
/// them from the relay streams and their markers: three calls. An error leaves the rest to
/// the next sweep (`nodes::sweep`); nothing is relayed twice meanwhile.
pub async fn forward(
    client: &mut ClusterClient,
    entries: &[(Relayed, Vec<u8>)],
) -> Result<(), RelayError> {
    if entries.is_empty() {
        return Ok(());
    }
    let relays: Vec<Routed> = entries
        .iter()
        .map(|(r, id)| {
            let mut c = redis::cmd("EVAL");
            c.arg(RELAY)
                .arg(2)
                .arg(&r.stream)
                .arg(marker(r, id))
                .arg(MARKER_MS)
                .arg(r.opts.join(&b' '));
            for a in &r.fields {
                c.arg(a);
            }
            Routed::new(&r.stream, c)
        })
        .collect();
    check(client.pipeline(&relays).await?)?;
    let xdels: Vec<Routed> = entries
        .iter()
        .map(|(r, id)| {
            let key = relay_key(r.partition);
            Routed::new(&key, redis::cmd("XDEL").arg(&key).arg(id).clone())
        })
        .collect();
    check(client.pipeline(&xdels).await?)?;
    let markers: Vec<Routed> = entries
        .iter()
        .map(|(r, id)| {
            let m = marker(r, id);
            Routed::new(&m, redis::cmd("DEL").arg(&m).clone())
        })
        .collect();
    check(client.pipeline(&markers).await?)
}

fn check(replies: Vec<Value>) -> Result<(), RelayError> {
    match replies
        .into_iter()
        .find(|v| matches!(v, Value::ServerError(_)))
    {
        Some(Value::ServerError(e)) => Err(RelayError::Reply(format!(
            "{} {}",
            e.code(),
            e.details().unwrap_or("")
        ))),
        _ => Ok(()),
    }
}

/// Relay entries of `partitions` written before `before_ms` (Redis time, ms), up to `count`
/// per partition, in one pipelined call per master: what a batch left unrelayed.
pub async fn leftovers(
    client: &mut ClusterClient,
    partitions: &[u32],
    before_ms: u64,
    count: usize,
) -> Result<Vec<(Relayed, Vec<u8>)>, ClusterError> {
    let reads: Vec<Routed> = partitions
        .iter()
        .map(|&p| {
            let key = relay_key(p);
            let cmd = redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg(format!("{before_ms}"))
                .arg("COUNT")
                .arg(count)
                .clone();
            Routed::new(&key, cmd)
        })
        .collect();
    let replies = client.pipeline(&reads).await?;
    let mut out = Vec::new();
    for (&p, reply) in partitions.iter().zip(replies) {
        let Value::Array(entries) = reply else {
            continue;
        };
        for e in entries {
            let Value::Array(parts) = e else { continue };
            let [Value::BulkString(id), Value::Array(fields)] = &parts[..] else {
                continue;
            };
            let fields: Vec<Vec<u8>> = fields
                .iter()
                .filter_map(|f| match f {
                    Value::BulkString(b) => Some(b.clone()),
                    _ => None,
                })
                .collect();
            match undivert(p, &fields) {
                Some(r) => out.push((r, id.clone())),
                None => tracing::warn!(
                    partition = p,
                    "store: a relay entry that does not read back; left alone"
                ),
            }
        }
    }
    Ok(out)
}

/// The id a relay `XADD` answered, for [`forward`].
pub fn id_of(reply: &Value) -> Option<Vec<u8>> {
    match reply {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.as_bytes().to_vec()),
        _ => None,
    }
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
