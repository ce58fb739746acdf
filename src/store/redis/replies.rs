//! Judging Redis's replies to one pipeline: which writes were applied, and whether the
//! pipeline has to be written again.
//!
//! Error replies: OOM, READONLY, LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, MISCONF,
//! NOREPLICAS, MOVED and ASK are transient (logged, counted, the pipeline written again after a
//! backoff, on a fresh connection). Any other error reply is that write's own fault: logged,
//! counted, its caller answered `StoreUnavailable`, and the rest of the pipeline goes on.
//!
//! Inside MULTI/EXEC an error while queueing aborts the whole transaction (EXECABORT): the
//! queueing error decides, and since the commands built here are well-formed, such errors are
//! the transient kinds above (OOM, READONLY), so the pipeline is written again.
//!
//! A pipeline whose replies do not have the expected shape is treated like a lost
//! connection: written again whole.

use super::RedisLink;
use crate::error::Error;
use crate::metrics::StoreMetrics;
use redis::Value;

/// Commands per entry, whether the pipeline is wrapped in MULTI/EXEC, and whether it ends
/// with a `WAIT` (whose reply the store task takes off before [`judge`] sees the rest).
#[derive(Debug)]
pub(crate) struct Shape {
    pub sizes: Vec<usize>,
    pub atomic: bool,
    pub wait: bool,
}

impl Shape {
    pub fn commands(&self) -> usize {
        self.sizes.iter().sum::<usize>() + if self.atomic { 2 } else { 0 } + usize::from(self.wait)
    }
}

/// Whether an error reply with this code clears up by itself (the write is sent again).
pub(crate) fn transient(code: &str) -> bool {
    matches!(
        code,
        "OOM"
            | "READONLY"
            | "LOADING"
            | "BUSY"
            | "MASTERDOWN"
            | "TRYAGAIN"
            | "CLUSTERDOWN"
            | "MISCONF"
            | "NOREPLICAS"
            | "MOVED"
            | "ASK"
            | "EXECABORT"
    )
}

/// Reads the RESP bytes of one pipeline's replies and judges them against a pipeline of
/// `sizes` commands per entry (`atomic`: wrapped in MULTI/EXEC), as the store task does: for
/// the fuzz target `redis_replies`, which feeds it arbitrary bytes. Never panics; how many
/// entries were settled, or why the pipeline would be replayed.
#[doc(hidden)]
pub fn judge_wire(sizes: &[usize], atomic: bool, wire: &[u8]) -> Result<usize, String> {
    let shape = Shape {
        sizes: sizes.to_vec(),
        atomic,
        wait: false,
    };
    let mut reader = super::conn::ReplyReader::default();
    let mut values = Vec::new();
    // The bytes arrive in pieces, as a socket hands them over.
    for piece in wire.chunks(7) {
        let space = reader.space();
        let n = piece.len().min(space.len());
        space[..n].copy_from_slice(&piece[..n]);
        reader.filled(n);
        while values.len() < shape.commands() {
            match reader.next_value() {
                Ok(Some(v)) => values.push(v),
                Ok(None) => break,
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    if values.len() < shape.commands() {
        return Err(format!(
            "{} replies for {} commands",
            values.len(),
            shape.commands()
        ));
    }
    let shared = super::detached_link();
    judge(&shared, &shape, values).map(|outcomes| outcomes.len())
}

/// Per-entry outcomes, or `Err` (keep everything queued) on a transient failure.
pub(crate) fn judge(
    shared: &RedisLink,
    shape: &Shape,
    replies: Vec<Value>,
) -> Result<Vec<Result<(), Error>>, String> {
    // The replies that speak for the entries' commands, in order.
    let results: Vec<Value> = if shape.atomic {
        let mut it = replies.into_iter();
        let _multi = it.next();
        let queued: Vec<Value> = it.by_ref().take(shape.sizes.iter().sum()).collect();
        match it.next() {
            Some(Value::Array(results)) => results,
            Some(Value::ServerError(e)) => {
                // EXECABORT: nothing applied. Report the first error a command got queueing.
                let first = queued.iter().find_map(|v| match v {
                    Value::ServerError(q) => Some(q.clone()),
                    _ => None,
                });
                let cause = first.unwrap_or(e);
                return Err(server_error(shared, cause.code(), cause.details()));
            }
            other => return Err(format!("unexpected EXEC reply {other:?}")),
        }
    } else {
        replies
    };
    let expected: usize = shape.sizes.iter().sum();
    if results.len() != expected {
        // Not a reply to this pipeline: treat the connection as broken and replay.
        return Err(format!("{} results for {expected} commands", results.len()));
    }
    let mut results = results.into_iter();
    let mut outcomes = Vec::with_capacity(shape.sizes.len());
    for &n in &shape.sizes {
        let mut outcome = Ok(());
        for v in results.by_ref().take(n) {
            if let Value::ServerError(e) = v {
                if transient(e.code()) {
                    return Err(server_error(shared, e.code(), e.details()));
                }
                let reason = server_error(shared, e.code(), e.details());
                tracing::error!(shard = shared.shard, %reason, "store: Redis refused a write for good");
                outcome = Err(shared.unavailable());
            }
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

fn server_error(shared: &RedisLink, code: &str, details: Option<&str>) -> String {
    StoreMetrics::count(&shared.m().errors_total, 1);
    format!("Redis answered {code} {}", details.unwrap_or(""))
}

#[cfg(test)]
#[path = "replies_tests.rs"]
mod tests;
