//! A Redis Cluster client on the shard's glommio executor: commands routed by slot to their
//! master, redirects followed, the slot map refreshed when the cluster changed.
//!
//! # One call, walked through
//!
//! [`ClusterClient::pipeline`] is handed commands, each with its slot ([`Routed`]). A round
//! groups the commands not yet answered by the master that the slot map names, writes each
//! group as one pipeline on that master's connection (one per master, reused: `conn::Conn`),
//! and judges each reply:
//!
//! | reply | what the client does |
//! |---|---|
//! | a value, or an error that is the command's own (`WRONGTYPE`, a script's error) | the command's answer |
//! | `MOVED slot host:port` | that slot's entry in the map now names that master; the command goes there next round |
//! | `ASK slot host:port` | next round, to that node only: `ASKING`, then the command; the map is left as it is |
//! | `TRYAGAIN`, `LOADING`, `BUSY` | asked again after a backoff |
//! | `CLUSTERDOWN`, `READONLY`, `MASTERDOWN` | asked again after a backoff, and the map refreshed first |
//! | the connection failed (refused, reset, timed out, unparsable) | the connection is dropped, the map refreshed, the group asked again after a backoff |
//!
//! Rounds go on until every command has its answer or `retry_for` has passed since the call
//! began; then [`ClusterError::GaveUp`] says how many commands were left and the last reason.
//! A round hindered by an error waits a backoff (10 ms doubling to 500 ms); so does any round
//! after the second that answered nothing, with the map read again, so that two nodes that
//! briefly disagree about a slot (each answering `MOVED` to the other) are not asked in a
//! tight loop.
//!
//! # What a caller must know
//!
//! - A command refused with a redirect or a transient error was not applied, so asking again
//!   applies it once. A command whose connection failed may or may not have been applied
//!   before the failure: it is asked again, so commands must be idempotent (an `HSET` of the
//!   whole record, a fenced script that checks a version) for the exactly-once that the store
//!   needs. The store's own writes are.
//! - With `wait_replicas` = n > 0, each group ends with `WAIT n <io_timeout/2>`; a group that
//!   fewer replicas confirmed is asked again whole (hence, again, idempotent writes). This is
//!   what keeps an acknowledged write through a master's loss: Redis replicates
//!   asynchronously, and a master killed before its replica read a write takes it along.
//! - Commands for one slot keep their order within a round; a redirect can put a later
//!   command of the same slot ahead of an earlier one only across rounds, so a caller that
//!   needs two writes ordered sends them as one script (which runs on one slot, atomically).
//!   `MULTI`/`EXEC` is not routed.
//!
//! # Cost model
//!
//! A lookup is one array read ([`SlotMap`]); a round is one pipeline per master touched, sent
//! one master after another; a refresh is one `CLUSTER SHARDS` to the first node that
//! answers.

use super::map::{Addr, SlotMap};
use super::redirect::{redirect_of, Redirect};
use super::slot::slot_of;
use crate::store::redis::conn::{Conn, ConnError};
use redis::{ConnectionAddr, ConnectionInfo, RedisConnectionInfo, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Where the cluster is and how long to keep trying.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Nodes asked for the slot map when no known master answers (the URL's hosts).
    pub seeds: Vec<Addr>,
    /// Credentials for every node (a cluster has database 0 only).
    pub redis: RedisConnectionInfo,
    /// Each connect, write and read.
    pub io_timeout: Duration,
    /// How long one call keeps asking before it gives up.
    pub retry_for: Duration,
    /// Replicas that must confirm each group (`WAIT`); 0: none.
    pub wait_replicas: u32,
}

impl ClusterConfig {
    pub fn new(seeds: Vec<Addr>, redis: RedisConnectionInfo) -> ClusterConfig {
        ClusterConfig {
            seeds,
            redis,
            io_timeout: Duration::from_secs(2),
            retry_for: Duration::from_secs(10),
            wait_replicas: 0,
        }
    }
}

/// A command and the slot of the key it is for.
#[derive(Clone)]
pub struct Routed {
    pub slot: u16,
    pub cmd: redis::Cmd,
}

impl std::fmt::Debug for Routed {
    /// The slot and the command's first words (a script's text is long).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let words: Vec<String> = self
            .cmd
            .args_iter()
            .take(3)
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(&b[..b.len().min(24)]).into(),
                redis::Arg::Cursor => "<cursor>".into(),
            })
            .collect();
        write!(f, "Routed {{ slot: {}, cmd: {:?} }}", self.slot, words)
    }
}

impl Routed {
    /// `cmd`, sent to the master of `key`'s slot.
    pub fn new(key: impl AsRef<[u8]>, cmd: redis::Cmd) -> Routed {
        Routed {
            slot: slot_of(key.as_ref()),
            cmd,
        }
    }
}

/// What the client did, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterStats {
    pub moved: u64,
    pub asked: u64,
    pub refreshes: u64,
    pub lost_connections: u64,
    pub transient_errors: u64,
}

/// Why a call did not get every answer.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("no known cluster node answered CLUSTER SHARDS or CLUSTER SLOTS (last: {0})")]
    NoMap(String),
    #[error("{pending} of {total} commands unanswered after {rounds} rounds in {spent:?} (last: {last})")]
    GaveUp {
        pending: usize,
        total: usize,
        rounds: u32,
        spent: Duration,
        last: String,
    },
}

/// How one reply is taken.
enum Verdict {
    Answer(Value),
    /// Asked again next round (a `MOVED`: the map already says where); why.
    Again(String),
    /// Asked again next round, with `ASKING`, at this node.
    AskAt(Addr),
    /// Asked again after a backoff.
    Hindered(String),
}

pub struct ClusterClient {
    cfg: ClusterConfig,
    map: SlotMap,
    conns: HashMap<Addr, Conn>,
    /// The map may be out of date: refresh it before the next round.
    stale: bool,
    stats: ClusterStats,
}

impl ClusterClient {
    /// A client with the map read from the first node that answers.
    pub async fn connect(cfg: ClusterConfig) -> Result<ClusterClient, ClusterError> {
        let mut client = ClusterClient {
            cfg,
            map: SlotMap::default(),
            conns: HashMap::new(),
            stale: true,
            stats: ClusterStats::default(),
        };
        client.refresh().await?;
        Ok(client)
    }

    pub fn map(&self) -> &SlotMap {
        &self.map
    }

    pub fn stats(&self) -> ClusterStats {
        self.stats
    }

    /// One command's answer (see [`ClusterClient::pipeline`]).
    pub async fn query(&mut self, command: Routed) -> Result<Value, ClusterError> {
        let mut answers = self.pipeline(std::slice::from_ref(&command)).await?;
        answers
            .pop()
            .ok_or_else(|| ClusterError::NoMap("no answer".into()))
    }

    /// Every command's answer, in the order given (see the module doc for the rounds).
    pub async fn pipeline(&mut self, commands: &[Routed]) -> Result<Vec<Value>, ClusterError> {
        let started = Instant::now();
        let deadline = started + self.cfg.retry_for;
        let mut answers: Vec<Option<Value>> = vec![None; commands.len()];
        let mut ask: Vec<Option<Addr>> = vec![None; commands.len()];
        let mut backoff = MIN_BACKOFF;
        let mut rounds = 0;
        let mut last = String::new();
        loop {
            if self.stale {
                if let Err(e) = self.refresh().await {
                    last = e.to_string();
                }
            }
            let mut hindered = false;
            let mut answered = 0;
            let mut groups: BTreeMap<Addr, Vec<(usize, bool)>> = BTreeMap::new();
            for (i, c) in commands.iter().enumerate() {
                if answers[i].is_some() {
                    continue;
                }
                match ask[i].take() {
                    Some(at) => groups.entry(at).or_default().push((i, true)),
                    None => match self.map.master_of(c.slot) {
                        Some(m) => groups.entry(m.clone()).or_default().push((i, false)),
                        None => {
                            hindered = true;
                            self.stale = true;
                            last = format!("no master serves slot {}", c.slot);
                        }
                    },
                }
            }
            for (at, members) in groups {
                let replies = match self.round_trip(&at, commands, &members).await {
                    Ok(r) => r,
                    Err(e) => {
                        self.stats.lost_connections += 1;
                        self.stale = true;
                        hindered = true;
                        last = format!("{at}: {e}");
                        continue;
                    }
                };
                for (&(i, _), reply) in members.iter().zip(replies) {
                    match self.judge(reply, &at) {
                        Verdict::Answer(v) => {
                            answers[i] = Some(v);
                            answered += 1;
                        }
                        Verdict::Again(why) => last = why,
                        Verdict::AskAt(to) => ask[i] = Some(to),
                        Verdict::Hindered(why) => {
                            hindered = true;
                            last = why;
                        }
                    }
                }
            }
            if answers.iter().all(Option::is_some) {
                return Ok(answers.into_iter().flatten().collect());
            }
            rounds += 1;
            if answered == 0 && rounds > 2 {
                // Redirects alone for rounds on end: nodes that disagree about a slot while the
                // cluster settles. Wait, and read the map again, rather than spin between them.
                hindered = true;
                self.stale = true;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ClusterError::GaveUp {
                    pending: answers.iter().filter(|a| a.is_none()).count(),
                    total: commands.len(),
                    rounds,
                    spent: now - started,
                    last,
                });
            }
            if hindered {
                glommio::timer::sleep(backoff.min(deadline - now)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }

    /// Writes `members` of `commands` to `at` as one pipeline (each asked one after
    /// `ASKING`, a `WAIT` at the end when replicas must confirm) and returns their replies,
    /// one per member: a success that too few replicas confirmed comes back as `TRYAGAIN`.
    async fn round_trip(
        &mut self,
        at: &Addr,
        commands: &[Routed],
        members: &[(usize, bool)],
    ) -> Result<Vec<Value>, ConnError> {
        let mut conn = match self.conns.remove(at) {
            Some(c) => c,
            None => Conn::connect(&self.info(at), self.cfg.io_timeout).await?,
        };
        let mut expected = 0;
        for &(i, asking) in members {
            if asking {
                redis::cmd("ASKING").write_packed_command(conn.out());
                expected += 1;
            }
            commands[i].cmd.write_packed_command(conn.out());
            expected += 1;
        }
        let wait = self.cfg.wait_replicas;
        if wait > 0 {
            redis::cmd("WAIT")
                .arg(wait)
                .arg((self.cfg.io_timeout / 2).as_millis() as u64)
                .write_packed_command(conn.out());
            expected += 1;
        }
        let mut replies = conn.round_trip(expected).await?.into_iter();
        self.conns.insert(at.clone(), conn);
        let mut out = Vec::with_capacity(members.len());
        for &(_, asking) in members {
            if asking {
                // ASKING answers OK; were it refused, the command's own reply says so.
                replies.next();
            }
            out.push(replies.next().unwrap_or(Value::Nil));
        }
        if wait > 0 {
            let confirmed = match replies.next() {
                Some(Value::Int(n)) => n,
                _ => 0,
            };
            if confirmed < i64::from(wait) {
                let unconfirmed = format!("TRYAGAIN WAIT: {confirmed} of {wait} replicas");
                for v in &mut out {
                    if !matches!(v, Value::ServerError(_)) {
                        *v = tryagain(&unconfirmed);
                    }
                }
            }
        }
        Ok(out)
    }

    fn judge(&mut self, reply: Value, from: &Addr) -> Verdict {
        match redirect_of(&reply, from) {
            Some(Redirect::Moved { slot, to }) => {
                self.stats.moved += 1;
                self.map.assign(slot, &to);
                return Verdict::Again(format!("{from}: MOVED {slot} {to}"));
            }
            Some(Redirect::Ask { to, .. }) => {
                self.stats.asked += 1;
                return Verdict::AskAt(to);
            }
            None => {}
        }
        let Value::ServerError(e) = &reply else {
            return Verdict::Answer(reply);
        };
        let code = e.code();
        let again = matches!(code, "TRYAGAIN" | "LOADING" | "BUSY");
        let refresh = matches!(code, "CLUSTERDOWN" | "READONLY" | "MASTERDOWN");
        if !again && !refresh {
            return Verdict::Answer(reply);
        }
        self.stats.transient_errors += 1;
        self.stale |= refresh;
        Verdict::Hindered(format!("{from}: {code} {}", e.details().unwrap_or("")))
    }

    /// Reads the slot map from the first node that answers: the known masters, then the seeds.
    /// Connections to nodes that no longer serve a slot are closed.
    pub async fn refresh(&mut self) -> Result<(), ClusterError> {
        let mut candidates: Vec<Addr> = self.map.masters().to_vec();
        for s in &self.cfg.seeds {
            if !candidates.contains(s) {
                candidates.push(s.clone());
            }
        }
        let mut last = String::from("no node to ask");
        for at in candidates {
            match self.read_map(&at).await {
                Ok(map) => {
                    self.map = map;
                    self.stale = false;
                    self.stats.refreshes += 1;
                    let masters = self.map.masters().to_vec();
                    self.conns.retain(|a, _| masters.contains(a));
                    return Ok(());
                }
                Err(e) => last = format!("{at}: {e}"),
            }
        }
        Err(ClusterError::NoMap(last))
    }

    /// `CLUSTER SHARDS` at `at`, or `CLUSTER SLOTS` where that is unknown.
    async fn read_map(&mut self, at: &Addr) -> Result<SlotMap, String> {
        let mut conn = match self.conns.remove(at) {
            Some(c) => c,
            None => Conn::connect(&self.info(at), self.cfg.io_timeout)
                .await
                .map_err(|e| e.to_string())?,
        };
        redis::cmd("CLUSTER")
            .arg("SHARDS")
            .write_packed_command(conn.out());
        let reply = conn.round_trip(1).await.map_err(|e| e.to_string())?;
        let map = match reply.first() {
            Some(Value::ServerError(_)) => {
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .write_packed_command(conn.out());
                let reply = conn.round_trip(1).await.map_err(|e| e.to_string())?;
                SlotMap::from_slots(reply.first().unwrap_or(&Value::Nil), at)?
            }
            Some(shards) => SlotMap::from_shards(shards)?,
            None => return Err("no reply".into()),
        };
        self.conns.insert(at.clone(), conn);
        Ok(map)
    }

    fn info(&self, at: &Addr) -> ConnectionInfo {
        ConnectionInfo {
            addr: ConnectionAddr::Tcp(at.host.clone(), at.port),
            redis: self.cfg.redis.clone(),
        }
    }
}

/// A `TRYAGAIN` error reply carrying `why`.
fn tryagain(why: &str) -> Value {
    let wire = format!("-{why}\r\n");
    redis::parse_redis_value(wire.as_bytes()).unwrap_or(Value::Nil)
}
