//! The read behind `GET /cluster`: the live set and every partition's lease, read from Redis
//! by a small service on the node's thread, for requests that arrive on the shards.
//!
//! # Where it runs, and what waits on what
//!
//! A request is answered on a shard's thread, which must never wait on Redis. So the shard
//! asks [`Status`], and the read runs in [`Status::serve`], a task on the node's own thread
//! (`punctual-node`, beside the loop and the reader: `start::spawn`), with a cluster client of
//! its own, connected at the first ask and kept (one connection per master; never one per
//! request). The shard's request waits asynchronously, at most its deadline
//! ([`ASK_TIMEOUT`]), and is then answered 503.
//!
//! # Coalescing
//!
//! An ask carries no data, so the mailbox between the shards and the service is one flag
//! (`wanted`) and the last answer, under one mutex, with an event each way: nothing queues
//! however many requests arrive. An ask is answered by the last read if that read started at
//! most [`FRESH`] before it; else by a read in flight that started within [`FRESH`]; else it
//! sets the flag, and the service starts one read for every ask waiting. So at most one read
//! is in flight, and a burst of requests costs one read of Redis a second at most.
//!
//! # One read
//!
//! One read-only script for the live set (`membership::live`) and one `GET` per partition's
//! lease key, pipelined by master (a few round trips of 1,024 small commands). The client
//! gives up after [`READ_FOR`], under the asks' deadline.
//!
//! # Cost model
//!
//! Per ask: two uncontended mutex locks and an event listener. Per read: the script, 1,024
//! `GET`s, and the snapshot (1,024 short strings) shared by every ask it answers.

use super::membership::{self, NodeRecord};
use crate::partition::PARTITIONS;
use crate::store::redis::cluster::{ClusterClient, ClusterConfig, Routed};
use crate::store::redis::layout::lease_key;
use event_listener::Event;
use redis::Value;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a request waits for the read before it is answered 503.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// How old (since its start) a read may be and still answer a new ask: about one round.
pub const FRESH: Duration = Duration::from_secs(1);

/// How long one read retries the cluster before it gives up (under [`ASK_TIMEOUT`]).
pub const READ_FOR: Duration = Duration::from_millis(1_500);

/// Why an ask got no snapshot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    #[error("Redis did not answer the read of the cluster's state within {} ms", ASK_TIMEOUT.as_millis())]
    Timeout,
    #[error("the read of the cluster's state from Redis failed: {0}")]
    Read(String),
}

/// One read of the cluster's state, as Redis answered it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The live nodes' records, sorted by id.
    pub live: Vec<NodeRecord>,
    /// Per partition, the lease key's value (`<node>/<nonce>-<token>:<epoch>`), if the key exists.
    pub leases: Vec<Option<String>>,
    /// When the read started (UTC microseconds).
    pub read_at_us: u64,
}

type Answer = Result<Arc<Snapshot>, StatusError>;

#[derive(Default)]
struct State {
    /// An ask waits for a read not yet started.
    wanted: bool,
    /// When the read in flight started, if one is.
    reading_since: Option<Instant>,
    /// The last read: when it started, and what it found.
    last: Option<(Instant, Answer)>,
}

/// The mailbox between the shards' requests and the service (see the module doc).
pub struct Status {
    /// This node's id (its advertised address).
    pub me: String,
    state: Mutex<State>,
    /// Notified when an ask set `wanted`.
    asked: Event,
    /// Notified when a read finished.
    answered: Event,
}

impl Status {
    pub fn new(me: &str) -> Status {
        Status {
            me: me.to_string(),
            state: Mutex::default(),
            asked: Event::new(),
            answered: Event::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned state is still whole: assignments only.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A snapshot whose read started at most [`FRESH`] before now, waiting for it at most
    /// [`ASK_TIMEOUT`] (on the caller's executor: a shard's).
    pub async fn ask(&self) -> Answer {
        let wait = self.answer(Instant::now());
        let expire = async {
            glommio::timer::sleep(ASK_TIMEOUT).await;
            Err(StatusError::Timeout)
        };
        futures_lite::future::or(wait, expire).await
    }

    async fn answer(&self, asked_at: Instant) -> Answer {
        let fresh_from = asked_at.checked_sub(FRESH).unwrap_or(asked_at);
        loop {
            let listener = self.answered.listen();
            {
                let mut s = self.state();
                if let Some((started, answer)) = &s.last {
                    if *started >= fresh_from {
                        return answer.clone();
                    }
                }
                let in_flight = s.reading_since.is_some_and(|t| t >= fresh_from);
                if !in_flight && !s.wanted {
                    s.wanted = true;
                    self.asked.notify(1);
                }
            }
            listener.await;
        }
    }

    /// The service: one read per batch of asks, with a client of its own, until dropped (it
    /// runs beside the node's loop and goes with it).
    pub async fn serve(&self, cluster: ClusterConfig) {
        let cluster = ClusterConfig {
            retry_for: READ_FOR,
            wait_replicas: 0,
            ..cluster
        };
        let mut client = None;
        loop {
            let listener = self.asked.listen();
            let started = {
                let mut s = self.state();
                if !s.wanted {
                    None
                } else {
                    s.wanted = false;
                    let now = Instant::now();
                    s.reading_since = Some(now);
                    Some(now)
                }
            };
            let Some(started) = started else {
                listener.await;
                continue;
            };
            let answer = read(&mut client, &cluster).await.map(Arc::new);
            {
                let mut s = self.state();
                s.reading_since = None;
                s.last = Some((started, answer));
            }
            self.answered.notify(usize::MAX);
        }
    }
}

/// One read (see the module doc), connecting `client` first if it is not yet.
async fn read(
    client: &mut Option<ClusterClient>,
    cluster: &ClusterConfig,
) -> Result<Snapshot, StatusError> {
    let fail = |e: String| StatusError::Read(e);
    let read_at_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let c = match client {
        Some(c) => c,
        None => client.insert(
            ClusterClient::connect(cluster.clone())
                .await
                .map_err(|e| fail(e.to_string()))?,
        ),
    };
    let live = membership::live(c)
        .await
        .map_err(|e| fail(format!("live set: {e}")))?;
    let gets: Vec<Routed> = (0..PARTITIONS)
        .map(|p| {
            let key = lease_key(p);
            let cmd = redis::cmd("GET").arg(&key).clone();
            Routed::new(key, cmd)
        })
        .collect();
    let replies = c
        .pipeline(&gets)
        .await
        .map_err(|e| fail(format!("leases: {e}")))?;
    let leases = replies
        .into_iter()
        .map(|v| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            Value::SimpleString(s) => Some(s),
            _ => None,
        })
        .collect();
    Ok(Snapshot {
        live,
        leases,
        read_at_us,
    })
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
