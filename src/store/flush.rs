//! The store task: one per shard, spawned on the shard's executor. It turns the outbox into
//! pipelines, reconnects with backoff, and judges Redis's replies.
//!
//! ```text
//!   loop:
//!     answer callers whose ack timed out (their writes stay queued)
//!     nothing queued?                       wait for the shard's kick
//!     fewer than N writes, oldest < interval? wait for a kick or the interval
//!     no connection?                        connect (backoff 10 ms doubling to backoff_max)
//!     encode the outbox's prefix (MULTI … EXEC when it holds a fire), write, read replies
//!     judge: all applied → pop and answer; transient error → keep, back off, write again
//! ```
//!
//! Error replies: OOM, READONLY, LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, MISCONF,
//! NOREPLICAS, MOVED and ASK are transient (logged, counted, the pipeline written again after a
//! backoff, on a fresh connection). Any other error reply is that write's own fault: logged,
//! counted, its caller answered `StoreUnavailable`, and the rest of the pipeline goes on.

use super::conn::{Conn, ConnError};
use super::metrics::{StoreMetrics, StoreState};
use super::Shared;
use crate::error::Error;
use redis::Value;
use std::rc::Rc;
use std::time::{Duration, Instant};

const BACKOFF_START: Duration = Duration::from_millis(10);

pub(crate) async fn run(shared: Rc<Shared>, mut conn: Option<Conn>) {
    let mut backoff = BACKOFF_START;
    loop {
        expire(&shared);
        let (len, oldest) = {
            let o = shared.outbox.borrow();
            (o.len(), o.oldest())
        };
        let closing = shared.closing.get();
        if len == 0 {
            if closing {
                return;
            }
            let listener = shared.wake.listen();
            if shared.outbox.borrow().is_empty() && !shared.closing.get() {
                listener.await;
            }
            continue;
        }
        let age = oldest.map_or(Duration::ZERO, |t| t.elapsed());
        if !closing && len < shared.cfg.flush_max_commands && age < shared.cfg.flush_interval {
            let listener = shared.wake.listen();
            let wait = shared.cfg.flush_interval - age;
            futures_lite::future::or(listener, glommio::timer::sleep(wait)).await;
            continue;
        }
        let Some(c) = conn.as_mut() else {
            conn = reconnect(&shared, &mut backoff).await;
            if conn.is_none() && shared.closing.get() {
                return;
            }
            continue;
        };
        match write_prefix(&shared, c).await {
            Ok(()) => backoff = BACKOFF_START,
            Err(reason) => {
                StoreMetrics::count(&shared.m().errors_total, 1);
                tracing::warn!(shard = shared.shard, %reason, "store: pipeline not applied; writing it again after a reconnect");
                conn = None;
                shared.m().set_state(StoreState::Reconnecting);
                if shared.closing.get() {
                    return;
                }
                pause(&shared, &mut backoff).await;
            }
        }
    }
}

/// Connects, or backs off once. `None` when this attempt failed.
async fn reconnect(shared: &Shared, backoff: &mut Duration) -> Option<Conn> {
    match Conn::connect(&shared.info, shared.cfg.io_timeout).await {
        Ok(c) => {
            StoreMetrics::count(&shared.m().reconnects_total, 1);
            shared.m().set_state(StoreState::Ready);
            tracing::info!(
                shard = shared.shard,
                "store: reconnected to Redis; replaying buffered writes"
            );
            *backoff = BACKOFF_START;
            Some(c)
        }
        Err(e) => {
            StoreMetrics::count(&shared.m().errors_total, 1);
            tracing::debug!(shard = shared.shard, error = %e, "store: Redis unreachable");
            if !shared.closing.get() {
                pause(shared, backoff).await;
            }
            None
        }
    }
}

/// Sleeps one backoff step (answering timed-out callers meanwhile) and doubles the step.
pub(crate) async fn pause(shared: &Shared, backoff: &mut Duration) {
    let until = Instant::now() + *backoff;
    while Instant::now() < until && !shared.closing.get() {
        expire(shared);
        let step = until
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(20));
        glommio::timer::sleep(step).await;
    }
    *backoff = (*backoff * 2).min(shared.cfg.backoff_max);
}

fn expire(shared: &Shared) {
    let n = shared
        .outbox
        .borrow_mut()
        .expire(Instant::now(), shared.cfg.backoff_max.as_secs().max(1));
    if n > 0 {
        StoreMetrics::count(&shared.m().ack_timeouts_total, n);
    }
}

/// Writes the outbox's prefix as one pipeline and settles it. `Err` keeps it queued.
async fn write_prefix(shared: &Shared, conn: &mut Conn) -> Result<(), String> {
    let (entries, shape) = {
        let outbox = shared.outbox.borrow();
        let out = conn.out();
        let prefix: Vec<_> = outbox.prefix(shared.cfg.flush_max_commands).collect();
        let atomic = prefix.iter().any(|e| e.second.is_some());
        if atomic {
            redis::cmd("MULTI").write_packed_command(out);
        }
        let mut shape = Vec::with_capacity(prefix.len());
        for e in &prefix {
            e.first.write_packed_command(out);
            if let Some(s) = &e.second {
                s.write_packed_command(out);
            }
            shape.push(e.commands());
        }
        if atomic {
            redis::cmd("EXEC").write_packed_command(out);
        }
        (
            prefix.len(),
            Shape {
                sizes: shape,
                atomic,
            },
        )
    };
    let commands = shape.commands();
    let started = Instant::now();
    let replies = conn
        .round_trip(commands)
        .await
        .map_err(|e: ConnError| e.to_string())?;
    shared
        .m()
        .flush_seconds
        .observe(started.elapsed().as_secs_f64());
    shared.m().batch_commands.observe(commands as f64);
    let outcomes = judge(shared, &shape, replies)?;
    debug_assert_eq!(outcomes.len(), entries, "one outcome per entry: {shape:?}");
    let mut outbox = shared.outbox.borrow_mut();
    outbox.complete(outcomes);
    shared
        .m()
        .pending_writes
        .store(outbox.len() as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// Commands per entry, and whether the pipeline is wrapped in MULTI/EXEC.
#[derive(Debug)]
struct Shape {
    sizes: Vec<usize>,
    atomic: bool,
}

impl Shape {
    fn commands(&self) -> usize {
        self.sizes.iter().sum::<usize>() + if self.atomic { 2 } else { 0 }
    }
}

fn transient(code: &str) -> bool {
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

/// Per-entry outcomes, or `Err` (keep everything queued) on a transient failure.
fn judge(
    shared: &Shared,
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

fn server_error(shared: &Shared, code: &str, details: Option<&str>) -> String {
    StoreMetrics::count(&shared.m().errors_total, 1);
    format!("Redis answered {code} {}", details.unwrap_or(""))
}
