//! Who is alive: each node's heartbeat record, with a TTL, in Redis.
//!
//! Two keys, in one slot (hash tag `{members}`): a sorted set whose members are node ids and
//! whose scores are the Redis time (ms) each heartbeat expires at, and a hash of each node's
//! record ([`NodeRecord`], JSON). One script beats: it reads the master's clock (`TIME`), sets
//! this node's expiry to now + TTL, stores its record, drops every node whose expiry passed,
//! and returns the records of those still alive. Expiry is judged on one clock, the master's,
//! so the nodes' clocks need not agree; a node that stops beating is gone from every node's
//! view one TTL after its last beat, plus at most one beat interval for the others to look.
//!
//! A node's id is its advertised address (`10.0.0.5:7480`): stable across its restarts, so a
//! restart does not reshuffle partitions (`rendezvous` weighs ids). Its start time tells
//! incarnations apart in the record; the leases, not membership, keep two incarnations from
//! writing for one partition.
//!
//! Membership decides who *should* own a partition; it never lets a node write. A node acts
//! on a partition only under its lease (`lease`), so two nodes that briefly see different
//! live sets at worst wait for a lease, never both write.

use crate::store::redis::cluster::{ClusterClient, ClusterError, Routed};
use crate::store::redis::layout::{MEMBERS_KEY, MEMBERS_VERSION_KEY, MEMBER_RECORDS_KEY};
use redis::Value;
use std::time::Duration;

/// A node as the others see it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeRecord {
    /// The node's id: its advertised address.
    pub id: String,
    /// Where other nodes forward requests for this node's partitions (`host:port`).
    pub advertise: String,
    /// When this incarnation started (UTC microseconds).
    pub started_at_us: u64,
    /// The proof that whoever wrote the record holds the cluster's secret ([`prove`]); absent
    /// on a node given none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The MAC of a record's id, advertised address and start under `secret` (HMAC takes a key
/// of any length, so it is always `Some`).
fn mac(secret: &[u8], r: &NodeRecord) -> Option<HmacSha256> {
    use hmac::Mac;
    let mut m = <HmacSha256 as Mac>::new_from_slice(secret).ok()?;
    m.update(b"punctual node\n");
    m.update(r.id.as_bytes());
    m.update(b"\n");
    m.update(r.advertise.as_bytes());
    m.update(b"\n");
    m.update(r.started_at_us.to_string().as_bytes());
    Some(m)
}

/// A record's proof under the cluster's `secret`: HMAC-SHA256 of its id, its advertised
/// address and its start, in hex. A record copied from Redis proves only what it says, so a
/// forged or altered one (another address to forward to) proves nothing.
pub fn prove(secret: &[u8], r: &NodeRecord) -> Option<String> {
    use hmac::Mac;
    Some(hex::encode(mac(secret, r)?.finalize().into_bytes()))
}

/// Whether `r` carries the proof of `secret` (compared in constant time).
pub fn proven(secret: &[u8], r: &NodeRecord) -> bool {
    use hmac::Mac;
    let proof = r.proof.as_deref().and_then(|p| hex::decode(p).ok());
    match (proof, mac(secret, r)) {
        (Some(p), Some(m)) => m.verify_slice(&p).is_ok(),
        _ => false,
    }
}

/// The records of `live` that count under the cluster's `secret`: those that prove it, or
/// all without one. A record that does not prove it gets no partitions and no forwards: it is
/// not a node of this cluster, whatever Redis lists (said in the log, each round it is seen).
pub fn trusted(secret: Option<&[u8]>, live: Vec<NodeRecord>) -> Vec<NodeRecord> {
    let Some(secret) = secret else {
        return live;
    };
    let (trusted, forged): (Vec<_>, Vec<_>) = live.into_iter().partition(|r| proven(secret, r));
    if !forged.is_empty() {
        let ids: Vec<&str> = forged.iter().map(|r| r.id.as_str()).collect();
        tracing::warn!(
            ?ids,
            "node: live records that do not prove the cluster secret are ignored"
        );
    }
    trusted
}

/// The master's clock in ms, as `now`: every expiry is judged on it (see the module doc).
macro_rules! master_now {
    () => {
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"
    };
}

/// Appends the records of the nodes whose expiry is after `now` to `out`, and answers `out`.
macro_rules! live_records {
    () => {
        r"
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
for _, id in ipairs(live) do
  out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
end
return out
"
    };
}

/// Answers `{version, record, record, …}`.
const BEAT: &str = concat!(
    master_now!(),
    r"
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('HDEL', KEYS[2], unpack(gone))
end
local added = redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if added == 1 or #gone > 0 then
  redis.call('INCR', KEYS[3])
end
local out = {tonumber(redis.call('GET', KEYS[3]) or '0')}
",
    live_records!()
);

/// The records of the nodes whose heartbeat has not expired by the master's clock; writes
/// nothing.
const LIVE: &str = concat!(master_now!(), "local out = {}\n", live_records!());

const LEAVE: &str = r"
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('INCR', KEYS[3])
end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
";

/// What a heartbeat found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Beat {
    /// The live-set change counter after this beat (see the module doc).
    pub version: u64,
    /// Every live node's record (this one included), sorted by id.
    pub live: Vec<NodeRecord>,
}

/// Why a heartbeat failed.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("the heartbeat script answered {0}")]
    Reply(String),
    #[error("a node record does not serialise: {0}")]
    Record(#[from] serde_json::Error),
}

fn script(body: &str, me: &str) -> redis::Cmd {
    redis::cmd("EVAL")
        .arg(body)
        .arg(3)
        .arg(MEMBERS_KEY)
        .arg(MEMBER_RECORDS_KEY)
        .arg(MEMBERS_VERSION_KEY)
        .arg(me)
        .clone()
}

/// Records this node as alive for `ttl` and returns every live node's record (this one
/// included), sorted by id. Records that do not parse are skipped (a newer node's format).
pub async fn beat(
    client: &mut ClusterClient,
    me: &NodeRecord,
    ttl: Duration,
) -> Result<Vec<NodeRecord>, MembershipError> {
    Ok(beat_seen(client, me, ttl).await?.live)
}

/// [`beat`], with the live-set change counter it left.
pub async fn beat_seen(
    client: &mut ClusterClient,
    me: &NodeRecord,
    ttl: Duration,
) -> Result<Beat, MembershipError> {
    let mut cmd = script(BEAT, &me.id);
    cmd.arg(serde_json::to_string(me)?)
        .arg(ttl.as_millis().max(1) as u64);
    let reply = client.query(Routed::new(MEMBERS_KEY, cmd)).await?;
    match &reply {
        Value::Array(items) => match items.split_first() {
            Some((Value::Int(v), rest)) => Ok(Beat {
                version: u64::try_from(*v).unwrap_or(0),
                live: records(rest),
            }),
            _ => Err(MembershipError::Reply(format!("{reply:?}"))),
        },
        _ => Err(MembershipError::Reply(format!("{reply:?}"))),
    }
}

/// Every live node's record, sorted by id, as [`beat`] answers but without beating or
/// dropping anything: a read, for `punctual cluster status`.
pub async fn live(client: &mut ClusterClient) -> Result<Vec<NodeRecord>, MembershipError> {
    let cmd = redis::cmd("EVAL")
        .arg(LIVE)
        .arg(2)
        .arg(MEMBERS_KEY)
        .arg(MEMBER_RECORDS_KEY)
        .clone();
    match client.query(Routed::new(MEMBERS_KEY, cmd)).await? {
        Value::Array(items) => Ok(records(&items)),
        other => Err(MembershipError::Reply(format!("{other:?}"))),
    }
}

/// The records a script answered, sorted by id; those that do not parse are skipped (a newer
/// node's format).
fn records(values: &[Value]) -> Vec<NodeRecord> {
    let mut live: Vec<NodeRecord> = values
        .iter()
        .filter_map(|r| match r {
            Value::BulkString(b) => serde_json::from_slice(b).ok(),
            _ => None,
        })
        .collect();
    live.sort_by(|a, b| a.id.cmp(&b.id));
    live
}

/// The live-set change counter now (0 before any change): one `GET`, for a node to tell
/// between its beats whether the live set changed.
pub async fn version(client: &mut ClusterClient) -> Result<u64, MembershipError> {
    let reply = client
        .query(Routed::new(
            MEMBERS_VERSION_KEY,
            redis::cmd("GET").arg(MEMBERS_VERSION_KEY).clone(),
        ))
        .await?;
    match reply {
        Value::Nil => Ok(0),
        Value::BulkString(b) => std::str::from_utf8(&b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| MembershipError::Reply(String::from_utf8_lossy(&b).into_owned())),
        Value::Int(v) => Ok(u64::try_from(v).unwrap_or(0)),
        other => Err(MembershipError::Reply(format!("{other:?}"))),
    }
}

/// Removes this node's record at once (a planned stop), rather than one TTL later.
pub async fn leave(client: &mut ClusterClient, me: &NodeRecord) -> Result<(), MembershipError> {
    let reply = client
        .query(Routed::new(MEMBERS_KEY, script(LEAVE, &me.id)))
        .await?;
    match reply {
        Value::Int(1) => Ok(()),
        other => Err(MembershipError::Reply(format!("{other:?}"))),
    }
}

#[cfg(test)]
#[path = "membership_tests.rs"]
mod tests;
