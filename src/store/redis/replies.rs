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
mod tests {
    use super::*;

    fn shared() -> RedisLink {
        crate::store::redis::detached_link()
    }

    fn reply(resp: &[u8]) -> Value {
        redis::parse_redis_value(resp).expect("valid RESP")
    }

    #[test]
    fn a_transient_error_keeps_the_whole_pipeline_for_a_replay() {
        let s = shared();
        let shape = Shape {
            sizes: vec![1, 2],
            atomic: true,
            wait: false,
        };
        let replies = vec![
            Value::Okay,
            reply(b"+QUEUED\r\n"),
            reply(b"-OOM command not allowed when used memory > 'maxmemory'\r\n"),
            reply(b"+QUEUED\r\n"),
            reply(b"-EXECABORT Transaction discarded because of previous errors.\r\n"),
        ];
        let err = judge(&s, &shape, replies).expect_err("transient");
        assert!(err.contains("OOM"), "{err}");
        assert!(
            s.m()
                .errors_total
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 1
        );
    }

    #[test]
    fn a_permanent_error_fails_only_its_own_write() {
        let s = shared();
        let shape = Shape {
            sizes: vec![1, 1],
            atomic: false,
            wait: false,
        };
        let replies = vec![
            Value::Int(1),
            reply(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
        ];
        let outcomes = judge(&s, &shape, replies).expect("settled");
        assert_eq!(outcomes[0], Ok(()));
        assert!(matches!(outcomes[1], Err(Error::StoreUnavailable { .. })));
    }

    #[test]
    fn the_wire_judge_reads_resp_in_pieces_and_settles_each_entry() {
        // MULTI, two queued commands, EXEC with two results: one entry of two commands.
        let wire = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$3\r\n1-0\r\n:1\r\n";
        assert_eq!(judge_wire(&[2], true, wire), Ok(1));
        assert_eq!(judge_wire(&[1, 1], false, b":1\r\n:0\r\n"), Ok(2));
        assert!(
            judge_wire(&[1], false, b":1").is_err(),
            "a cut reply is a replay"
        );
        assert!(judge_wire(&[1], false, b"?x\r\n").is_err());
    }

    #[test]
    fn a_reply_of_the_wrong_size_is_a_broken_connection() {
        let s = shared();
        let shape = Shape {
            sizes: vec![2],
            atomic: true,
            wait: false,
        };
        let replies = vec![
            Value::Okay,
            reply(b"+QUEUED\r\n"),
            reply(b"+QUEUED\r\n"),
            Value::Array(vec![Value::Int(1)]),
        ];
        assert!(judge(&s, &shape, replies).is_err());
    }
}
