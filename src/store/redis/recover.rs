//! Recovery: on start, a shard loads the pending timers of the partitions it owns. A store
//! handed lease holders (a node that shares a Redis Cluster with others) loads none: its shard
//! loads each partition once the node holds its lease.
//!
//! Partitions are read with `HSCAN <partition> <cursor> COUNT <page>`, eight hashes per
//! pipeline, page by page (each partition's pending timers, then its dead letters, which the
//! shard tells apart by their metadata), so no reply holds more than about `8 × page` timers. Each timer is
//! handed to the shard with its stored version (the shard's table raises its version counter
//! past it). Nothing fires until every partition is loaded; the
//! shard's first poll then fires the overdue ones at once, in deadline order (the wheel's).
//!
//! A failure midway (connection lost, error reply) starts the load again on a new connection:
//! inserting a timer twice is an upsert with the same version, so a restart is harmless.
//!
//! Over a Redis Cluster the same scans go through the cluster client: each `HSCAN` to the
//! master of its partition's slot, the eight of a window grouped by master, redirects
//! followed. A slot that moves between two pages is followed by `MOVED`; the cursor stays
//! valid because a slot migrates whole hashes (`MIGRATE` moves a key at once).

use super::cluster::Routed;
use super::dead::dead_key;
use super::flush::pause;
use super::layout::{decode_record, parse_field, partition_of, timers_key, PARTITIONS};
use super::link::Link;
use super::RedisLink;
use crate::metrics::{StoreMetrics, StoreState};
use crate::store::Recovered;
use crate::units::UtcMicros;
use redis::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Partitions scanned in one pipeline.
const WINDOW: usize = 8;

/// Connects (retrying with backoff while Redis is unreachable) and loads the shard's
/// partitions, handing each timer to `insert`. Returns the connection (or cluster client) for
/// the store task, or `None` if `stop` was set first.
pub(crate) async fn recover(
    shared: &RedisLink,
    insert: &mut dyn FnMut(Recovered<'_>) -> bool,
    stop: &AtomicBool,
) -> Option<Link> {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(10);
    let mut warned = false;
    loop {
        if stop.load(Ordering::Acquire) {
            return None;
        }
        shared.m().set_state(StoreState::Connecting);
        let mut conn = match Link::connect(shared).await {
            Ok(c) => c,
            Err(e) => {
                StoreMetrics::count(&shared.m().errors_total, 1);
                if !warned {
                    tracing::warn!(shard = shared.shard, url = %super::endpoint::shown(&shared.cfg.url), error = %e, "store: Redis unreachable at start; retrying with backoff (not healthy until connected)");
                    warned = true;
                }
                pause(shared, &mut backoff).await;
                continue;
            }
        };
        shared.m().set_state(StoreState::Recovering);
        match load(shared, &mut conn, insert).await {
            Ok(loaded) => {
                shared.m().recovered(loaded, started.elapsed());
                tracing::info!(
                    shard = shared.shard,
                    timers = loaded,
                    ms = started.elapsed().as_millis() as u64,
                    "store: recovered pending timers from Redis"
                );
                return Some(conn);
            }
            Err(reason) => {
                StoreMetrics::count(&shared.m().errors_total, 1);
                tracing::warn!(shard = shared.shard, %reason, "store: recovery interrupted; starting it again");
                pause(shared, &mut backoff).await;
            }
        }
    }
}

/// Loads every owned partition; the number of timers loaded.
async fn load(
    shared: &RedisLink,
    conn: &mut Link,
    insert: &mut dyn FnMut(Recovered<'_>) -> bool,
) -> Result<u64, String> {
    // With lease holders (a node among others) every partition comes through a load once its
    // lease is held (`nodes::reader`): nothing is read here.
    let mut todo = (0..PARTITIONS)
        .filter(|_| shared.holders.is_none())
        .filter(|&p| crate::partition::owns(shared.shard, shared.shards, p))
        .flat_map(|p| [(p, timers_key(p)), (p, dead_key(p))]);
    let mut active: Vec<(u32, String, Vec<u8>)> = Vec::with_capacity(WINDOW);
    let mut loaded = 0u64;
    let mut skipped = 0u64;
    loop {
        while active.len() < WINDOW {
            match todo.next() {
                Some((p, hash)) => active.push((p, hash, b"0".to_vec())),
                None => break,
            }
        }
        if active.is_empty() {
            if skipped > 0 {
                tracing::error!(
                    shard = shared.shard,
                    skipped,
                    "store: timers left in Redis, not loaded (see the first one logged above)"
                );
            }
            return Ok(loaded);
        }
        let scans: Vec<Routed> = active
            .iter()
            .map(|(_, hash, cursor)| {
                let mut scan = redis::cmd("HSCAN");
                scan.arg(hash)
                    .arg(&cursor[..])
                    .arg("COUNT")
                    .arg(shared.cfg.recovery_page);
                Routed::new(hash, scan)
            })
            .collect();
        let replies = conn.round(&scans).await?;
        let mut next = Vec::with_capacity(WINDOW);
        for ((p, hash, _), reply) in active.drain(..).zip(replies) {
            let (cursor, items) = match reply {
                Value::Array(mut parts) if parts.len() == 2 => {
                    let items = parts.pop();
                    (parts.pop(), items)
                }
                Value::ServerError(e) => {
                    return Err(format!(
                        "HSCAN answered {} {}",
                        e.code(),
                        e.details().unwrap_or("")
                    ))
                }
                other => return Err(format!("unexpected HSCAN reply {other:?}")),
            };
            if let Some(Value::Array(items)) = items {
                for pair in items.chunks_exact(2) {
                    if load_one(shared, insert, p, &pair[0], &pair[1], skipped == 0) {
                        loaded += 1;
                    } else {
                        skipped += 1;
                    }
                }
            }
            match cursor {
                Some(Value::BulkString(c)) if c != b"0" => next.push((p, hash, c)),
                _ => {}
            }
        }
        active = next;
    }
}

/// Hands one stored timer to the shard; false when the record is malformed or does not fit
/// (counted; logged in detail when `log`, so a full table does not log a million lines).
fn load_one(
    shared: &RedisLink,
    insert: &mut dyn FnMut(Recovered<'_>) -> bool,
    partition: u32,
    field: &Value,
    record: &Value,
    log: bool,
) -> bool {
    let (Value::BulkString(field), Value::BulkString(record)) = (field, record) else {
        return false;
    };
    let parsed = parse_field(field).zip(decode_record(record));
    let Some(((tenant, key), rec)) = parsed else {
        StoreMetrics::count(&shared.m().errors_total, 1);
        if log {
            tracing::error!(shard = shared.shard, partition, field = %String::from_utf8_lossy(field), "store: malformed record skipped (left in Redis)");
        }
        return false;
    };
    if partition_of(tenant, key) != partition {
        StoreMetrics::count(&shared.m().errors_total, 1);
        if log {
            tracing::error!(
                shard = shared.shard,
                partition,
                tenant,
                key,
                "store: record in the wrong partition skipped"
            );
        }
        return false;
    }
    let fits = insert(Recovered {
        tenant,
        key,
        version: rec.version,
        deadline: UtcMicros(rec.fire_at_us),
        meta: rec.meta,
        payload: rec.payload,
        dead: None,
    });
    if !fits {
        StoreMetrics::count(&shared.m().errors_total, 1);
        if log {
            tracing::error!(
                shard = shared.shard,
                tenant,
                key,
                "store: recovered timer does not fit this shard (capacity or range); left in Redis"
            );
        }
    }
    fits
}
