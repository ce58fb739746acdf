//! The shard's durable paths: how a shard with a store applies ring ops, and how it starts
//! (recovery first, ops held meanwhile). Kept apart from `shard` so that the in-memory loop
//! there reads as before; these are methods of the same `Shard`.
//!
//! A durable schedule or cancel changes the table at once (so the shard's own view, and
//! fires, follow the order of the ring) and queues the write with the caller's reply; the
//! reply goes out when Redis has acknowledged it (`outbox`). When the outbox is full the op is
//! refused before it touches the table.

use super::outbox::Ack;
use super::{put_cmd, recover};
use crate::clock::TimeSource;
use crate::error::Error;
use crate::op::{Cancelled, Op, Scheduled};
use crate::shard::{settle_quota, Shard};
use std::time::{Duration, Instant};

impl<S: TimeSource> Shard<S> {
    /// Applies one op with the store's rules (see the module doc).
    pub(crate) fn apply_durable(&mut self, op: Op) {
        let Some(store) = self.store.as_ref() else {
            return self.apply(op);
        };
        match op {
            Op::Schedule {
                timer,
                deadline,
                reply,
                slot,
            } => {
                if let Err(e) = store.admit() {
                    return answer_schedule(reply, Err(e));
                }
                let slot = match self.admit_quota(&timer, slot) {
                    Ok(slot) => slot,
                    Err(e) => return answer_schedule(reply, Err(e)),
                };
                let now = self.clock.now().as_micros();
                let version = self.table.next_version(now);
                // The write is built before the timer moves into the table.
                let write = put_cmd(
                    timer.tenant(),
                    timer.key(),
                    version,
                    deadline.0,
                    timer.payload(),
                );
                match self.table.insert_with_version(timer, deadline, version) {
                    Ok(u) => {
                        settle_quota(slot, u.replaced);
                        let s = Scheduled {
                            version,
                            deadline,
                            replaced: u.replaced,
                        };
                        let ack = reply.map_or(Ack::None, |tx| Ack::Schedule(tx, s));
                        store.queue(write, ack);
                    }
                    Err(e) => {
                        let err = self.upsert_error(e, deadline);
                        answer_schedule(reply, Err(err));
                    }
                }
            }
            Op::Cancel { timer, reply } => {
                if self.table.get(timer.identity()).is_none() {
                    let _ = reply.send(Ok(Cancelled::NotFound));
                    return;
                }
                if let Err(e) = store.admit() {
                    let _ = reply.send(Err(e));
                    return;
                }
                if let Some((deadline, record)) = self.table.cancel(timer.identity()) {
                    self.release_quota(record.timer.tenant());
                    let answer = Cancelled::Cancelled {
                        version: record.version,
                        deadline,
                    };
                    store.del(
                        record.timer.tenant(),
                        record.timer.key(),
                        Ack::Cancel(reply, answer),
                    );
                }
            }
            get @ Op::Get { .. } => self.apply(get),
        }
    }

    /// Recovers the shard's timers before its loop starts. Ops that arrive meanwhile wait
    /// (answered `StoreUnavailable` after the ack timeout) and are applied, in order, once the
    /// table is loaded. `false` when the shard was stopped first.
    pub(crate) async fn recover_first(&mut self) -> bool {
        let Some(store) = self.store.as_ref() else {
            return true;
        };
        let shared = store.shared().clone();
        let limit = store.ack_timeout();
        let mut held: Vec<(Instant, Op)> = Vec::new();
        let conn = {
            let (table, ring, stop, quotas) =
                (&mut self.table, &self.ring, &self.stop, &self.quotas);
            let hold = async {
                loop {
                    while let Some(op) = ring.pop() {
                        held.push((Instant::now(), op));
                    }
                    let expired = held.partition_point(|(t, _)| t.elapsed() >= limit);
                    for (_, op) in held.drain(..expired) {
                        op.refuse(shared.unavailable());
                    }
                    if stop.load(std::sync::atomic::Ordering::Acquire) {
                        return None;
                    }
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
            };
            futures_lite::future::or(recover::recover(&shared, table, quotas, stop), hold).await
        };
        let Some(conn) = conn else {
            return false;
        };
        if let Some(store) = self.store.as_mut() {
            store.start(conn);
            store.stamp();
        }
        for (_, op) in held {
            self.apply_durable(op);
        }
        true
    }
}

fn answer_schedule(
    reply: Option<crate::op::Reply<Result<Scheduled, Error>>>,
    r: Result<Scheduled, Error>,
) {
    match reply {
        Some(tx) => {
            let _ = tx.send(r);
        }
        None => {
            if let Err(e) = r {
                tracing::warn!(error = %e, "detached schedule refused");
            }
        }
    }
}
