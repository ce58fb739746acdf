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
//! - With `wait_replicas` = n > 0, each group ends with `WAIT n <io_timeout/2>`. This is what
//!   keeps an acknowledged write through a master's loss: Redis replicates asynchronously,
//!   and a master killed before its replica read a write takes it along. A group that fewer
//!   replicas confirmed was applied all the same: it is not sent again (an `XADD` would add
//!   a second entry per round while a replica resynchronises) but kept as landed
//!   ([`Sent::Landed`]), and the next round first sends a lone `WAIT` on the connection it
//!   went by, which covers every earlier write of that connection. Only when that connection
//!   is gone (lost, or closed because its node is no longer a master) is the write sent
//!   again. [`ClusterClient::pipeline_resume`] keeps this across calls for a caller that
//!   sends the same commands again after a call gave up.
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

/// Where one command of [`ClusterClient::pipeline_resume`] stands.
#[derive(Clone, Debug, Default)]
pub enum Sent {
    /// Not sent yet, or to be sent again.
    #[default]
    Unsent,
    /// Applied by the master at `at`, which fewer replicas than `wait_replicas` confirmed:
    /// confirmed later by a `WAIT` on the connection it went by, not sent again (an `XADD`
    /// sent again would add a second entry).
    Landed { at: Addr, reply: Value },
    /// Answered (and, with `wait_replicas`, confirmed): not sent again.
    Answered(Value),
}

/// What [`ClusterClient::confirm`] found.
enum Confirmed {
    /// Every landed write whose master still has its connection was confirmed: how many.
    All(usize),
    /// Some were not: why.
    Short(String),
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
        let mut state = vec![Sent::Unsent; commands.len()];
        self.pipeline_resume(commands, &mut state).await?;
        Ok(state
            .into_iter()
            .map(|s| match s {
                Sent::Answered(v) => v,
                _ => Value::Nil,
            })
            .collect())
    }

    /// [`ClusterClient::pipeline`] that leaves where each command stands in `state` (one entry
    /// per command), also when it gives up: a caller that sends the same commands again with
    /// the same `state` does not send again what was answered, and has what landed
    /// unconfirmed confirmed rather than applied twice. Entries already
    /// [`Sent::Answered`] are not sent.
    pub async fn pipeline_resume(
        &mut self,
        commands: &[Routed],
        state: &mut [Sent],
    ) -> Result<(), ClusterError> {
        let started = Instant::now();
        let deadline = started + self.cfg.retry_for;
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
            // What landed unconfirmed in an earlier round: a `WAIT` on the connection that
            // carried it, first thing, before anything else goes to that master (a `WAIT`
            // covers every earlier write of its connection, and only of its connection).
            match self.confirm(state).await {
                Confirmed::All(n) => answered += n,
                Confirmed::Short(why) => {
                    hindered = true;
                    last = why;
                }
            }
            let mut groups: BTreeMap<Addr, Vec<(usize, bool)>> = BTreeMap::new();
            for (i, c) in commands.iter().enumerate() {
                if !matches!(state[i], Sent::Unsent) {
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
                let (replies, confirmed) = match self.round_trip(&at, commands, &members).await {
                    Ok(r) => r,
                    Err(e) => {
                        self.stats.lost_connections += 1;
                        self.stale = true;
                        hindered = true;
                        last = format!("{at}: {e}");
                        continue;
                    }
                };
                if !confirmed {
                    hindered = true;
                    last = format!("{at}: WAIT: fewer than {} replicas", self.cfg.wait_replicas);
                }
                for (&(i, _), reply) in members.iter().zip(replies) {
                    match self.judge(reply, &at) {
                        Verdict::Answer(v) if confirmed || matches!(v, Value::ServerError(_)) => {
                            state[i] = Sent::Answered(v);
                            answered += 1;
                        }
                        Verdict::Answer(v) => {
                            state[i] = Sent::Landed {
                                at: at.clone(),
                                reply: v,
                            }
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
            if state.iter().all(|s| matches!(s, Sent::Answered(_))) {
                return Ok(());
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
                    pending: state
                        .iter()
                        .filter(|s| !matches!(s, Sent::Answered(_)))
                        .count(),
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

    /// One `WAIT` per master that holds writes [`Sent::Landed`] in `state`, on the connection
    /// they went by: confirmed, they are answered; short, they stay landed; with the
    /// connection gone (lost, or closed by a refresh that found its node no longer a master)
    /// they are sent again, since a master that went away may have taken them along.
    async fn confirm(&mut self, state: &mut [Sent]) -> Confirmed {
        if self.cfg.wait_replicas == 0 {
            // Nothing lands unconfirmed without `WAIT`.
            return Confirmed::All(0);
        }
        let mut at_masters: BTreeMap<Addr, Vec<usize>> = BTreeMap::new();
        for (i, s) in state.iter().enumerate() {
            if let Sent::Landed { at, .. } = s {
                at_masters.entry(at.clone()).or_default().push(i);
            }
        }
        let (mut done, mut short) = (0, None);
        for (at, members) in at_masters {
            let confirmed = match self.conns.remove(&at) {
                None => None,
                Some(mut conn) => {
                    self.wait_command().write_packed_command(conn.out());
                    match conn.round_trip(1).await {
                        Ok(r) => {
                            self.conns.insert(at.clone(), conn);
                            Some(self.enough(r.first()))
                        }
                        Err(e) => {
                            self.stats.lost_connections += 1;
                            self.stale = true;
                            short = Some(format!("{at}: {e}"));
                            None
                        }
                    }
                }
            };
            for i in members {
                let Sent::Landed { reply, .. } = std::mem::take(&mut state[i]) else {
                    continue;
                };
                state[i] = match confirmed {
                    Some(true) => {
                        done += 1;
                        Sent::Answered(reply)
                    }
                    Some(false) => Sent::Landed {
                        at: at.clone(),
                        reply,
                    },
                    None => Sent::Unsent,
                };
            }
            if confirmed == Some(false) {
                short = Some(format!(
                    "{at}: WAIT: fewer than {} replicas",
                    self.cfg.wait_replicas
                ));
            }
        }
        match short {
            Some(why) => Confirmed::Short(why),
            None => Confirmed::All(done),
        }
    }

    fn wait_command(&self) -> redis::Cmd {
        redis::cmd("WAIT")
            .arg(self.cfg.wait_replicas)
            .arg((self.cfg.io_timeout / 2).as_millis() as u64)
            .clone()
    }

    /// Whether a `WAIT`'s reply counts enough replicas.
    fn enough(&self, reply: Option<&Value>) -> bool {
        matches!(reply, Some(Value::Int(n)) if *n >= i64::from(self.cfg.wait_replicas))
    }

    /// Writes `members` of `commands` to `at` as one pipeline (each asked one after
    /// `ASKING`, a `WAIT` at the end when replicas must confirm) and returns their replies,
    /// one per member, and whether enough replicas confirmed them (always, without `WAIT`).
    async fn round_trip(
        &mut self,
        at: &Addr,
        commands: &[Routed],
        members: &[(usize, bool)],
    ) -> Result<(Vec<Value>, bool), ConnError> {
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
        let wait = self.cfg.wait_replicas > 0;
        if wait {
            self.wait_command().write_packed_command(conn.out());
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
        let confirmed = !wait || self.enough(replies.next().as_ref());
        Ok((out, confirmed))
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
