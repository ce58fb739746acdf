//! The store task: one per shard, spawned on the shard's executor. It turns the outbox into
//! pipelines, reconnects with backoff, and judges Redis's replies.
//!
//! ```text
//!   loop:
//!     answer callers whose ack timed out (their writes stay queued)
//!     nothing queued?                       wait for the shard's kick
//!     no fire, fewer than N writes, oldest < interval? wait for a kick or the interval
//!     no connection?                        connect (backoff 10 ms doubling to backoff_max)
//!     pump: while fewer than DEPTH pipelines are in flight and writes wait, encode the next
//!           batch (MULTI … EXEC when it holds a fire) and write it; then read the oldest
//!           pipeline's replies and judge them:
//!           all applied → pop and answer; transient error → drop the connection, keep
//!           everything queued, back off, write it all again
//! ```
//!
//! Several pipelines are in flight at once (Redis answers them in order), so a burst is
//! limited by Redis, not by round trips.
//!
//! # Waiting for replicas
//!
//! With `wait_replicas` = n > 0, each pipeline ends with `WAIT n <ms>`, one pipeline is in
//! flight at a time, and its writes are answered only once `WAIT` says n replicas hold them.
//! When fewer answer in time, the writes are applied on the master but not yet safe: the
//! pipeline stays unanswered, the store reports `stalled`, and the task asks again with a
//! lone `WAIT` (each blocks up to its timeout) until enough replicas have caught up. The
//! writes are not sent again, so a wait adds no duplicate stream entries; callers whose ack
//! timeout passes meanwhile get `StoreUnavailable`, and their writes stay queued. A
//! connection lost during the wait replays the pipeline, like any other.
//!
//! How replies are judged (which error replies are transient) is `replies`.

use super::conn::{Conn, ConnError};
use super::outbox::PIPELINE_BYTES;
use super::replies::{judge, Shape};
use super::RedisLink;
use crate::metrics::{StoreMetrics, StoreState};
use crate::units::capped;
use std::rc::Rc;
use std::time::{Duration, Instant};

const BACKOFF_START: Duration = Duration::from_millis(10);

/// Pipelines written and not yet answered.
const DEPTH: usize = 4;

pub(crate) async fn run(shared: Rc<RedisLink>, mut conn: Option<Conn>) {
    let mut backoff = BACKOFF_START;
    // The master switches announced when `conn` was made (see `endpoint`).
    let mut switches = shared.endpoint.switches();
    loop {
        match due(&shared).await {
            Due::Stop => return,
            Due::Later => continue,
            Due::Now => {}
        }
        if conn.is_some() && shared.endpoint.switches() != switches {
            tracing::info!(
                shard = shared.shard,
                "store: Redis master switched; reconnecting through the sentinels"
            );
            conn = None;
            shared.m().set_state(StoreState::Reconnecting);
        }
        let Some(c) = conn.as_mut() else {
            switches = shared.endpoint.switches();
            conn = reconnect(&shared, &mut backoff).await;
            if conn.is_none() && shared.closing.get() {
                return;
            }
            continue;
        };
        match pump(&shared, c).await {
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

/// Whether the outbox holds a batch to write now.
pub(crate) enum Due {
    /// Closing, and nothing is left: the task ends.
    Stop,
    /// Waited for a kick or the batching interval: look again.
    Later,
    /// A fire waits, enough writes wait, the oldest waited `flush_interval`, or the store closes.
    Now,
}

/// Answers callers whose ack timed out, then waits (for the shard's kick or the batching
/// interval) unless a batch is due now: the loop head of both store tasks (this one and
/// `clustered`'s).
pub(crate) async fn due(shared: &RedisLink) -> Due {
    shared.expire();
    let (len, oldest, fires) = {
        let o = shared.outbox.borrow();
        (o.len(), o.acks.queued_at(0), o.acks.has_fires())
    };
    let closing = shared.closing.get();
    if len == 0 {
        if closing {
            return Due::Stop;
        }
        let listener = shared.wake.listen();
        if shared.outbox.borrow().is_empty() && !shared.closing.get() {
            listener.await;
        }
        return Due::Later;
    }
    let age = oldest.map_or(Duration::ZERO, |t| t.elapsed());
    let batch_more = len < shared.cfg.flush_max_commands && age < shared.cfg.flush_interval;
    if !closing && !fires && batch_more {
        let listener = shared.wake.listen();
        let wait = capped(shared.cfg.flush_interval.saturating_sub(age));
        futures_lite::future::or(listener, glommio::timer::sleep(wait)).await;
        return Due::Later;
    }
    Due::Now
}

/// A pipeline written and not yet answered.
struct Flight {
    shape: Shape,
    started: Instant,
}

/// Writes and settles pipelines, up to [`DEPTH`] in flight, until the outbox holds nothing
/// more to send and nothing is in flight. `Err` drops the connection; nothing is lost.
async fn pump(shared: &RedisLink, conn: &mut Conn) -> Result<(), String> {
    let mut flights: std::collections::VecDeque<Flight> = std::collections::VecDeque::new();
    let mut in_flight = 0; // entries covered by `flights`
    let depth = if shared.cfg.wait_replicas > 0 {
        1
    } else {
        DEPTH
    };
    loop {
        while flights.len() < depth {
            let shape = encode(shared, in_flight, conn.out());
            if shape.sizes.is_empty() {
                break;
            }
            conn.send().await.map_err(|e: ConnError| e.to_string())?;
            in_flight += shape.sizes.len();
            flights.push_back(Flight {
                shape,
                started: Instant::now(),
            });
        }
        let Some(flight) = flights.pop_front() else {
            return Ok(());
        };
        let commands = flight.shape.commands();
        let mut replies = conn
            .receive(commands)
            .await
            .map_err(|e: ConnError| e.to_string())?;
        let waited = flight.shape.wait.then(|| replies.pop());
        shared
            .m()
            .flush_seconds
            .observe(flight.started.elapsed().as_nanos() as u64);
        shared.m().batch_commands.observe(commands as u64);
        let outcomes = judge(shared, &flight.shape, replies)?;
        if let Some(reply) = waited {
            replicas_hold(shared, conn, reply).await?;
        }
        debug_assert_eq!(
            outcomes.len(),
            flight.shape.sizes.len(),
            "one outcome per entry"
        );
        in_flight -= flight.shape.sizes.len();
        let mut outbox = shared.outbox.borrow_mut();
        outbox.complete(outcomes);
        debug_assert!(
            in_flight <= outbox.len(),
            "the pipelines in flight cover a prefix of the outbox"
        );
        shared
            .m()
            .pending_writes
            .store(outbox.len() as u64, std::sync::atomic::Ordering::Relaxed);
        shared.expire_in(&mut outbox.acks);
    }
}

/// Encodes the batch after the first `skip` entries into `out`; its shape (empty: nothing).
fn encode(shared: &RedisLink, skip: usize, out: &mut Vec<u8>) -> Shape {
    let outbox = shared.outbox.borrow();
    let batch: Vec<_> = outbox
        .batch(skip, shared.cfg.flush_max_commands, PIPELINE_BYTES)
        .collect();
    let atomic = batch.iter().any(|e| e.is_atomic());
    let wait = shared.cfg.wait_replicas > 0;
    if batch.is_empty() {
        return Shape {
            sizes: Vec::new(),
            atomic,
            wait,
        };
    }
    if atomic {
        redis::cmd("MULTI").write_packed_command(out);
    }
    let mut sizes = Vec::with_capacity(batch.len());
    for e in &batch {
        e.first.write_packed_command(out);
        for c in e.rest() {
            c.write_packed_command(out);
        }
        sizes.push(e.commands());
    }
    if atomic {
        redis::cmd("EXEC").write_packed_command(out);
    }
    if wait {
        wait_cmd(shared).write_packed_command(out);
    }
    Shape {
        sizes,
        atomic,
        wait,
    }
}

/// `WAIT n <ms>`: the replicas to wait for, and for how long at most (half the I/O timeout,
/// at most 500 ms, so that the reply arrives before the connection's read timeout).
fn wait_cmd(shared: &RedisLink) -> redis::Cmd {
    let ms = (shared.cfg.io_timeout / 2)
        .min(Duration::from_millis(500))
        .as_millis()
        .max(1) as u64;
    redis::cmd("WAIT")
        .arg(shared.cfg.wait_replicas)
        .arg(ms)
        .clone()
}

/// Returns once `WAIT` says enough replicas hold the pipeline's writes, asking again with a
/// lone `WAIT` while too few do. `Err` (drop the connection, replay) on an error reply or a
/// lost connection.
async fn replicas_hold(
    shared: &RedisLink,
    conn: &mut Conn,
    mut reply: Option<redis::Value>,
) -> Result<(), String> {
    let want = i64::from(shared.cfg.wait_replicas);
    let mut warned = false;
    loop {
        match reply {
            Some(redis::Value::Int(n)) if n >= want => {
                if warned {
                    shared.m().set_state(StoreState::Ready);
                    tracing::info!(
                        shard = shared.shard,
                        replicas = n,
                        "store: replicas caught up; acknowledging writes again"
                    );
                }
                return Ok(());
            }
            Some(redis::Value::Int(n)) => {
                if !warned {
                    warned = true;
                    shared.m().set_state(StoreState::Stalled);
                    tracing::warn!(
                        shard = shared.shard,
                        replicas = n,
                        wanted = want,
                        "store: too few Redis replicas confirm writes; holding acknowledgements until they do (check the replicas' link to the master)"
                    );
                }
            }
            other => return Err(format!("unexpected WAIT reply {other:?}")),
        }
        if shared.closing.get() {
            return Err("closing while waiting for replicas".into());
        }
        // No backoff: the WAIT itself blocks up to its timeout, and asking again at once
        // acknowledges as soon as a replica catches up.
        shared.expire();
        wait_cmd(shared).write_packed_command(conn.out());
        reply = conn
            .round_trip(1)
            .await
            .map_err(|e: ConnError| e.to_string())?
            .pop();
    }
}

/// Connects, or backs off once. `None` when this attempt failed.
async fn reconnect(shared: &RedisLink, backoff: &mut Duration) -> Option<Conn> {
    match super::endpoint::connect(&shared.endpoint, shared.cfg.io_timeout).await {
        Ok(c) => {
            StoreMetrics::count(&shared.m().reconnects_total, 1);
            shared.m().set_state(StoreState::Ready);
            tracing::info!(
                shard = shared.shard,
                redis = %c.peer(),
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

/// Sleeps one backoff step (answering timed-out callers meanwhile) and doubles it, up to
/// `backoff_max`.
pub(crate) async fn pause(shared: &RedisLink, backoff: &mut Duration) {
    shared.pause(backoff, shared.cfg.backoff_max).await;
}
