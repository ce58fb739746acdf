//! Reading one partition's records when this node gains its lease, for a shard to load.
//!
//! A gained partition's pending timers (`punctual:{pN}:timers`) and dead letters
//! (`punctual:{pN}:dead`) are read with `HSCAN … COUNT <page>`, both hashes' pages in one
//! pipeline (one slot, so one master and one round trip a page), into owned [`Stored`]
//! records, in the format recovery reads (`store::redis::layout`). Records that do not parse,
//! or that lie in another partition than their key's, are counted and left in Redis, as
//! recovery leaves them. Before them, one call reads each partition's version floor
//! (`layout::versions_key`: the highest version any owner wrote there), which the shard's
//! versions then count on from, so that a key fired or cancelled at the old owner, of which no
//! record is left, still gets a version above the ones the old owner acknowledged, however far
//! this node's clock is behind.
//!
//! # Why the read is consistent
//!
//! It is made after the acquisition was answered, and nothing writes the partition between the
//! two: another node's writes are fenced by the lease, and this node's shard refuses the
//! partition's ops until the records are loaded. So the read sees exactly what the last holder
//! left. A slot that moves between two pages is followed by `MOVED` (a hash moves whole), so
//! the cursor stays valid.
//!
//! # Cost
//!
//! Per partition: one round trip per page of `page` records of each hash, and every record's
//! bytes copied once into its [`Stored`]. [`read_many`] reads several partitions' pages in one
//! pipeline (one call per master per page), so a handoff that gains a few hundred small
//! partitions reads them in a few round trips rather than one or more each. A caller that reads many partitions does so beside
//! the node's loop, not in it, so a large partition never makes a renewal late.

use crate::partition::partition_of;
use crate::store::redis::cluster::{ClusterClient, ClusterError, Routed};
use crate::store::redis::dead::dead_key;
use crate::store::redis::layout::{
    decode_record, parse_field, timers_key, versions_key, VERSIONS_TOP,
};
use crate::units::UtcMicros;
use redis::Value;

/// The least `COUNT` a scan of a batch asks for.
const MIN_COUNT: usize = 8;

/// A record of a gained partition: a pending timer, or a dead letter (its metadata says which,
/// as at recovery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub tenant: String,
    pub key: String,
    pub version: u64,
    pub deadline: UtcMicros,
    pub meta: Vec<u8>,
    pub payload: Vec<u8>,
}

/// What [`read`] found of one partition.
#[derive(Debug, Default)]
pub struct Read {
    pub records: Vec<Stored>,
    /// Records left in Redis: malformed, or filed under another partition.
    pub skipped: u64,
    /// The highest version any owner wrote in the partition (`layout::versions_key`), 0 when
    /// none did: the shard's versions count on from above it.
    pub floor: u64,
}

/// Why a partition could not be read (then nothing of it is loaded: read it again).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("HSCAN of partition {partition} answered {reply}")]
    Reply { partition: u32, reply: String },
}

/// Reads every pending timer and dead letter of `partition`, `page` records of each hash a
/// round trip.
pub async fn read(
    client: &mut ClusterClient,
    partition: u32,
    page: usize,
) -> Result<Read, LoadError> {
    let mut reads = read_many(client, &[partition], page).await?;
    Ok(reads.pop().unwrap_or_default())
}

/// [`read`] of each of `partitions` at once, their pages in one pipeline: the answer has one
/// [`Read`] per partition, in order. One failed call fails all (read them again). A call asks
/// for `2 × page` records in all, shared among the hashes still being read (at least
/// [`MIN_COUNT`] each), so a batch's replies stay about as large as one partition's page
/// (`COUNT` is a hint: a small hash answers whole), and a large partition left alone is read
/// at the full page again.
pub async fn read_many(
    client: &mut ClusterClient,
    partitions: &[u32],
    page: usize,
) -> Result<Vec<Read>, LoadError> {
    let mut out: Vec<Read> = partitions.iter().map(|_| Read::default()).collect();
    let floors: Vec<Routed> = partitions
        .iter()
        .map(|&p| {
            let key = versions_key(p);
            let mut score = redis::cmd("ZSCORE");
            score.arg(&key).arg(VERSIONS_TOP);
            Routed::new(&key, score)
        })
        .collect();
    for ((read, &p), reply) in out
        .iter_mut()
        .zip(partitions)
        .zip(client.pipeline(&floors).await?)
    {
        read.floor = floor(&reply).ok_or_else(|| unexpected(p, &reply))?;
    }
    // (index in `partitions`, hash, cursor); a hash whose cursor came back 0 is done and
    // leaves the list.
    let mut scans: Vec<(usize, String, Vec<u8>)> = partitions
        .iter()
        .enumerate()
        .flat_map(|(i, &p)| {
            [
                (i, timers_key(p), b"0".to_vec()),
                (i, dead_key(p), b"0".to_vec()),
            ]
        })
        .collect();
    while !scans.is_empty() {
        let each = count_each(page, scans.len());
        let commands: Vec<Routed> = scans
            .iter()
            .map(|(_, hash, cursor)| {
                let mut scan = redis::cmd("HSCAN");
                scan.arg(hash).arg(&cursor[..]).arg("COUNT").arg(each);
                Routed::new(hash, scan)
            })
            .collect();
        let replies = client.pipeline(&commands).await?;
        let mut next = Vec::with_capacity(scans.len());
        for ((i, hash, _), reply) in scans.into_iter().zip(replies) {
            let (partition, out) = match (partitions.get(i), out.get_mut(i)) {
                (Some(&p), Some(o)) => (p, o),
                _ => continue,
            };
            let (cursor, items) = match reply {
                Value::Array(parts) => match <[Value; 2]>::try_from(parts) {
                    Ok([cursor, items]) => (cursor, items),
                    Err(parts) => return Err(unexpected(partition, &parts)),
                },
                other => return Err(unexpected(partition, &other)),
            };
            if let Value::Array(items) = items {
                for pair in items.chunks_exact(2) {
                    match stored(partition, &pair[0], &pair[1]) {
                        Some(s) => out.records.push(s),
                        None => out.skipped += 1,
                    }
                }
            }
            match cursor {
                Value::BulkString(c) if c != b"0" => next.push((i, hash, c)),
                _ => {}
            }
        }
        scans = next;
    }
    Ok(out)
}

/// The `COUNT` each of `open` scans asks for in one call: `2 × page` shared, at least
/// [`MIN_COUNT`] (one partition's two hashes: `page` each).
fn count_each(page: usize, open: usize) -> usize {
    (page.max(1).saturating_mul(2) / open.max(1)).max(MIN_COUNT)
}

fn unexpected(partition: u32, reply: &dyn std::fmt::Debug) -> LoadError {
    LoadError::Reply {
        partition,
        reply: format!("{reply:?}"),
    }
}

/// A version floor's score: none yet is 0. A score is a double, exact for every version
/// (microseconds since 1970 stay below 2^53 until the year 2255).
fn floor(reply: &Value) -> Option<u64> {
    let score = match reply {
        Value::Nil => return Some(0),
        Value::Double(d) => *d,
        Value::BulkString(b) => {
            let text = std::str::from_utf8(b).ok()?;
            match text.parse::<u64>() {
                Ok(v) => return Some(v),
                Err(_) => text.parse::<f64>().ok()?,
            }
        }
        _ => return None,
    };
    (score.is_finite() && score >= 0.0).then_some(score as u64)
}

/// One hash field and its record, if it parses and belongs to `partition`.
fn stored(partition: u32, field: &Value, record: &Value) -> Option<Stored> {
    let (Value::BulkString(field), Value::BulkString(record)) = (field, record) else {
        return None;
    };
    let (tenant, key) = parse_field(field)?;
    let rec = decode_record(record)?;
    if partition_of(tenant, key) != partition {
        return None;
    }
    Some(Stored {
        tenant: tenant.to_owned(),
        key: key.to_owned(),
        version: rec.version,
        deadline: UtcMicros(rec.fire_at_us),
        meta: rec.meta.to_vec(),
        payload: rec.payload.to_vec(),
    })
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
