//! `punctual_stream_length`: the length of every tenant's fired stream, sampled.
//!
//! Shard 0 runs this task (one per process is enough: the streams are shared). Every
//! [`PERIOD`] it lists the `punctual:fired:*` keys with `SCAN` (the keyspace holds only the
//! 1,024 partition hashes and the streams, so this is a few round trips) and asks `XLEN` of
//! each, on its own connection so that it never sits between the shard's writes and their
//! replies. The figures are published for exporters under a mutex that only this task and a
//! scrape take, never the shard's loop.
//!
//! Trimming (`MAXLEN ~`) drops the oldest entries whether or not a consumer read them, so
//! this length has to stay well under the configured maximum.

use super::conn::Conn;
use super::Shared;
use redis::Value;
use std::rc::Rc;
use std::time::Duration;

/// How often the lengths are sampled.
pub const PERIOD: Duration = Duration::from_secs(5);

pub(crate) async fn run(shared: Rc<Shared>) {
    let mut conn: Option<Conn> = None;
    while !shared.closing.get() {
        if conn.is_none() {
            conn = super::endpoint::connect(&shared.endpoint, shared.cfg.io_timeout)
                .await
                .ok();
        }
        if let Some(c) = conn.as_mut() {
            match sample(c).await {
                Ok(lengths) => {
                    if let Ok(mut m) = shared.m().stream_lengths.lock() {
                        *m = lengths;
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "store: stream lengths not sampled");
                    conn = None;
                }
            }
        }
        // Detached: it ends with the shard's executor; it never listens to the kicks that
        // are meant for the store task.
        glommio::timer::sleep(PERIOD).await;
    }
}

/// (tenant, XLEN) of every fired stream.
async fn sample(conn: &mut Conn) -> Result<Vec<(String, u64)>, String> {
    let mut keys = Vec::new();
    let mut cursor = b"0".to_vec();
    loop {
        redis::cmd("SCAN")
            .arg(&cursor[..])
            .arg("MATCH")
            .arg("punctual:fired:*")
            .arg("COUNT")
            .arg(1000)
            .write_packed_command(conn.out());
        let mut reply = conn.round_trip(1).await.map_err(|e| e.to_string())?;
        let Some(Value::Array(mut parts)) = reply.pop() else {
            return Err("unexpected SCAN reply".into());
        };
        if let (Some(Value::Array(found)), Some(Value::BulkString(next))) =
            (parts.pop(), parts.pop())
        {
            keys.extend(found.into_iter().filter_map(|k| match k {
                Value::BulkString(k) => String::from_utf8(k).ok(),
                _ => None,
            }));
            cursor = next;
        } else {
            return Err("unexpected SCAN reply".into());
        }
        if cursor == b"0" {
            break;
        }
    }
    for k in &keys {
        redis::cmd("XLEN").arg(k).write_packed_command(conn.out());
    }
    let lens = conn
        .round_trip(keys.len())
        .await
        .map_err(|e| e.to_string())?;
    let mut out: Vec<(String, u64)> = keys
        .iter()
        .zip(lens)
        .filter_map(|(k, v)| {
            let tenant = k.strip_prefix("punctual:fired:{")?.strip_suffix('}')?;
            match v {
                Value::Int(n) => Some((tenant.to_string(), n.max(0) as u64)),
                _ => None,
            }
        })
        .collect();
    out.sort();
    Ok(out)
}
