//! The store task over a Redis Cluster (`redis+cluster://`): the outbox written through the
//! cluster client, each command routed to the master of its slot.
//!
//! # One batch, walked through
//!
//! The outbox holds the shard's writes in order: `HSET`/`HDEL` of a partition's hash
//! (`punctual:{pN}:timers`, `punctual:{pN}:dead`), and the stream entries of fires and dead
//! letters (`XADD punctual:fired:{<tenant>}`, `XADD punctual:dead:{<tenant>}`). On one Redis a
//! fire's `XADD` and `HDEL` are one `MULTI`/`EXEC`; here they lie in two slots (the tenant's and
//! the partition's), possibly on two masters, and `MULTI`/`EXEC` does not route. So a batch
//! (up to `flush_max_commands` commands, whole entries) is sent in two steps:
//!
//! 1. **The stream entries**, every `XADD` of the batch, in one call of the client.
//! 2. **One script per partition** holding that partition's commands of the batch in the
//!    outbox's order (`fence::ordered`, or `fence::fenced` when the store is given the
//!    partition's lease holder): a script runs atomically on its slot's master, so a
//!    partition's writes apply in order, whatever the redirects, and a dead letter's `HSET` and
//!    the pending record's `HDEL` apply together.
//!
//! Only when both steps are answered is the batch popped and its callers acknowledged.
//!
//! ```text
//!   outbox:  HSET p7 a | XADD {shop} a + HDEL p7 a | HSET p9 b | HDEL p7 c
//!   step 1:  XADD {shop} a                           → master of slot({shop})
//!   step 2:  EVAL [HSET p7 a, HDEL p7 a, HDEL p7 c]   → master of slot({p7})
//!            EVAL [HSET p9 b]                         → master of slot({p9})
//! ```
//!
//! # What a crash or a failure leaves
//!
//! The order (stream entry first, record's removal second) is the one `docs/SCALING.md` sets
//! for "a fire spans two slots": a process that dies, or a call that fails, between the steps
//! leaves the record, so the timer is recovered and fired again: a stream entry may repeat
//! (same key and version, which consumers de-duplicate on), never go missing. A failed call
//! (the client gave up after its `retry_for`, about an ack timeout) keeps the whole batch
//! queued, and the task backs off and sends it again: `HSET` of a whole record and `HDEL` are
//! assignments, so a script applied twice leaves what it left once. An `XADD` is not: sent
//! twice, it adds two entries. So the task keeps where each of the batch's stream entries
//! stands across its sends (`Streamed`, [`ClusterClient::pipeline_resume`]): one that a master
//! answered is not sent again when another master, or step 2, failed; one that a master
//! applied but too few replicas confirmed (`WAIT`) is confirmed by a later `WAIT` on the
//! same connection, not sent again. Only one whose connection was lost meanwhile (its master
//! may have died with it) is sent again, so a repeat needs a master's loss, not a slow
//! replica; an outage of one master adds no entry per retry.
//!
//! A script answered `FENCED` (another node holds the partition's lease) applies nothing; its
//! entries are answered `StoreUnavailable` and dropped from the outbox, not sent again: the
//! partition's new owner has its records and fires them. The holder source is told which
//! lease was refused (`Holders::fenced`, with the holder the script was fenced by), so the
//! node stops acting on the partition at once rather than at that lease's local deadline; a
//! later lease of the partition, under another value, is not touched. With a holder source but no holder
//! for a partition, nothing is sent for it, with the same outcome.
//!
//! # What runs where, and what grows
//!
//! The task runs on the shard's executor, as `flush` does; the client's connections are the
//! store's own glommio sockets, and host names are resolved off the thread (`crate::resolve`).
//! One batch is in flight at a time (the client's calls take it `&mut`). While a master does
//! not answer, its commands hold the batch, so the outbox fills behind it and is bounded as on
//! one Redis (`max_buffered`, `max_buffered_fires`: registrations get 503, fires wait in the
//! wheel). A tenant shares the batch with every other: a slot that is down delays every
//! tenant's writes of this shard, as one Redis that is down does.
//!
//! # Cost model
//!
//! Per batch: one client call for the stream entries and one for the scripts, each a pipeline
//! per master (sent one master after another); per partition touched, one `EVAL` carrying the
//! script's text (about 400 bytes) and its commands' arguments copied once. Per command, a
//! look at its first two arguments to find its partition.

use super::cluster::fence::{self, is_fenced};
use super::cluster::{ClusterClient, ClusterStats, Routed, Sent};
use super::flush::{due, pause, Due};
use super::layout::{self, partition_of_key};
use super::outbox::{Entry, PIPELINE_BYTES};
use super::relay::{self, Relayed};
use super::replies::transient;
use super::RedisLink;
use crate::error::Error;
use crate::metrics::{StoreMetrics, StoreState};
use redis::Value;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BACKOFF_START: Duration = Duration::from_millis(10);

/// Who holds each partition's lease, for fenced writes: `<node>/<nonce>-<token>:<epoch>`, or `None` when this
/// node does not hold the partition (its writes are then not sent). Given by the node's lease
/// loop; a store without one (a single node, which owns every partition) writes unfenced.
pub trait Holders: Send + Sync {
    fn holder(&self, partition: u32) -> Option<Arc<str>>;

    /// Whether this node may act on `partition` now ([`Holders::holder`] would name one),
    /// without copying the holder: the shards ask it on every keyed op and every fire.
    fn holds(&self, partition: u32) -> bool {
        self.holder(partition).is_some()
    }

    /// A write for `partition` fenced by `holder` was answered `FENCED`: the lease key holds
    /// another value, so the lease `holder` names is lost, whatever its local deadline says.
    /// From this call on, [`Holders::holder`] and [`Holders::holds`] must not name `holder`
    /// for `partition` (a later lease of it, under another value, is left alone). Called on a
    /// shard's thread, once per refused script: it must return at once.
    fn fenced(&self, _partition: u32, _holder: &str) {}
}

pub(crate) async fn run(shared: Rc<RedisLink>, mut client: ClusterClient) {
    let mut backoff = BACKOFF_START;
    let mut failing = false;
    let mut seen = client.stats();
    // Where the stream entries of the batch at the head of the outbox stand, kept across its
    // sends: a batch sent again does not add again what Redis already took.
    let mut streamed = Streamed::default();
    loop {
        match due(&shared).await {
            Due::Stop => return,
            Due::Later => continue,
            Due::Now => {}
        }
        let sent = send_batch(&shared, &mut client, &mut streamed).await;
        seen = publish(&shared, seen, client.stats());
        match sent {
            Ok(()) => {
                backoff = BACKOFF_START;
                if failing {
                    failing = false;
                    shared.m().set_state(StoreState::Ready);
                    tracing::info!(
                        shard = shared.shard,
                        "store: the cluster takes writes again; replaying buffered writes"
                    );
                }
            }
            Err(reason) => {
                StoreMetrics::count(&shared.m().errors_total, 1);
                if !failing {
                    tracing::warn!(shard = shared.shard, %reason, "store: batch not applied on the cluster; sending it again after a backoff");
                }
                failing = true;
                shared.m().set_state(StoreState::Reconnecting);
                if shared.closing.get() {
                    return;
                }
                pause(&shared, &mut backoff).await;
            }
        }
    }
}

/// Adds what the client did since `seen` to the store's counters; the client's totals now.
fn publish(shared: &RedisLink, seen: ClusterStats, now: ClusterStats) -> ClusterStats {
    let m = shared.m();
    StoreMetrics::count(&m.cluster_moved_total, now.moved.saturating_sub(seen.moved));
    StoreMetrics::count(&m.cluster_asked_total, now.asked.saturating_sub(seen.asked));
    StoreMetrics::count(
        &m.cluster_refreshes_total,
        now.refreshes.saturating_sub(seen.refreshes),
    );
    now
}

/// Sends the batch at the head of the outbox (both steps) and pops it, answering its callers;
/// `Err` keeps it queued to be sent again. `streamed`: where the batch's stream entries stand
/// from its earlier sends (cleared once the batch is popped).
async fn send_batch(
    shared: &RedisLink,
    client: &mut ClusterClient,
    streamed: &mut Streamed,
) -> Result<(), String> {
    let started = Instant::now();
    let plan = {
        let outbox = shared.outbox.borrow();
        Plan::of(
            outbox.batch(0, shared.cfg.flush_max_commands, PIPELINE_BYTES),
            shared.holders.is_some(),
        )
    };
    if plan.entries == 0 {
        return Ok(());
    }
    let mut outcomes: Vec<Result<(), Error>> = (0..plan.entries).map(|_| Ok(())).collect();
    if !plan.streams.is_empty() {
        streamed.follow(&plan.stream_owners);
        client
            .pipeline_resume(&plan.streams, &mut streamed.state)
            .await
            .map_err(|e| e.to_string())?;
        for (&owner, sent) in plan.stream_owners.iter().zip(&streamed.state) {
            if let Sent::Answered(reply) = sent {
                settle(shared, owner, reply, &mut outcomes)?;
            }
        }
    }
    // The stream entries the scripts wrote into their partitions' relays (`relay`).
    let mut relayed = Vec::new();
    if !plan.scripts.is_empty() {
        let replies = client
            .pipeline(&plan.scripts)
            .await
            .map_err(|e| e.to_string())?;
        for (group, reply) in plan.groups.iter().zip(replies) {
            if let Value::Array(items) = &reply {
                for (at, r) in &group.relays {
                    if let Some(id) = items.get(*at).and_then(relay::id_of) {
                        relayed.push((r.clone(), id));
                    }
                }
            }
            settle_script(shared, group, reply, &mut outcomes)?;
        }
    }
    for group in &plan.unsent {
        refuse(shared, group, "this node holds no lease for the partition");
        for &owner in &group.owners {
            outcomes[owner] = Err(shared.unavailable());
        }
    }
    let m = shared.m();
    m.flush_seconds.observe(started.elapsed().as_nanos() as u64);
    m.batch_commands.observe(plan.commands as u64);
    *streamed = Streamed::default();
    {
        let mut outbox = shared.outbox.borrow_mut();
        outbox.complete(outcomes);
        m.pending_writes
            .store(outbox.len() as u64, std::sync::atomic::Ordering::Relaxed);
        shared.expire_in(&mut outbox.acks);
    }
    // Past this point the batch is done: a relay that fails is not sent with it again (its
    // scripts would write the entries twice); the node's sweep relays what is left.
    if let Err(e) = relay::forward(client, &relayed).await {
        StoreMetrics::count(&m.errors_total, 1);
        tracing::warn!(shard = shared.shard, error = %e, "store: stream entries left in their partitions' relays; the next sweep relays them");
    }
    Ok(())
}

/// One command's reply, for its entry: an error that is transient sends the batch again; any
/// other fails the entry for good (logged, its caller answered `StoreUnavailable`).
fn settle(
    shared: &RedisLink,
    owner: usize,
    reply: &Value,
    outcomes: &mut [Result<(), Error>],
) -> Result<(), String> {
    let Value::ServerError(e) = reply else {
        return Ok(());
    };
    let reason = format!("Redis answered {} {}", e.code(), e.details().unwrap_or(""));
    StoreMetrics::count(&shared.m().errors_total, 1);
    if transient(e.code()) {
        return Err(reason);
    }
    tracing::error!(shard = shared.shard, %reason, "store: Redis refused a write for good");
    if let Some(o) = outcomes.get_mut(owner) {
        *o = Err(shared.unavailable());
    }
    Ok(())
}

/// A partition script's reply: an array of its commands' replies, `FENCED`, or an error of
/// the script as a whole.
fn settle_script(
    shared: &RedisLink,
    group: &Group,
    reply: Value,
    outcomes: &mut [Result<(), Error>],
) -> Result<(), String> {
    match reply {
        Value::Array(items) if items.len() == group.owners.len() + usize::from(group.floor) => {
            let mut items = items.into_iter();
            for (&owner, item) in group.owners.iter().zip(items.by_ref()) {
                settle(shared, owner, &item, outcomes)?;
            }
            // The floor's `ZADD`: refused (a Redis before 6.2 knows no `GT`), the records
            // stand, but a later owner may count versions from below them. Said, not hidden.
            if let Some(Value::ServerError(e)) = items.next() {
                StoreMetrics::count(&shared.m().errors_total, 1);
                // Said once per process: a Redis that refuses one refuses every batch's.
                static SAID: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::error!(
                        shard = shared.shard,
                        partition = group.partition,
                        code = e.code(),
                        details = e.details().unwrap_or(""),
                        "store: a partition's version floor was not raised (ZADD GT needs Redis 6.2 or later); \
                         a node that gains it may count versions from below its writes (counted in errors_total)"
                    );
                }
            }
            Ok(())
        }
        ref fenced if is_fenced(fenced) => {
            StoreMetrics::count(&shared.m().fenced_total, 1);
            refuse(
                shared,
                group,
                "FENCED: another node holds the partition's lease",
            );
            // The lease this group was fenced by is lost: the node stops acting on the
            // partition now, not at the lease's local deadline.
            if let (Some(holders), Some(holder)) = (&shared.holders, &group.holder) {
                holders.fenced(group.partition, holder);
            }
            for &owner in &group.owners {
                outcomes[owner] = Err(shared.unavailable());
            }
            Ok(())
        }
        Value::ServerError(e) if transient(e.code()) => {
            StoreMetrics::count(&shared.m().errors_total, 1);
            Err(format!(
                "Redis answered {} {}",
                e.code(),
                e.details().unwrap_or("")
            ))
        }
        Value::ServerError(e) => {
            StoreMetrics::count(&shared.m().errors_total, 1);
            let reason = format!("Redis answered {} {}", e.code(), e.details().unwrap_or(""));
            tracing::error!(shard = shared.shard, partition = group.partition, %reason, "store: Redis refused a partition's writes for good");
            for &owner in &group.owners {
                outcomes[owner] = Err(shared.unavailable());
            }
            Ok(())
        }
        other => Err(format!(
            "partition {}'s script answered {other:?}, not {} replies",
            group.partition,
            group.owners.len()
        )),
    }
}

fn refuse(shared: &RedisLink, group: &Group, why: &str) {
    tracing::warn!(
        shard = shared.shard,
        partition = group.partition,
        writes = group.owners.len(),
        why,
        "store: a partition's writes not applied; its next owner recovers its records"
    );
}

/// Step 1's progress on the batch at the head of the outbox, across its sends: the entry
/// (index in the batch) of each stream command sent, and where each stands
/// ([`ClusterClient::pipeline_resume`]). The head of the outbox stays put until the batch is
/// popped, and a batch sent again only grows at its tail.
#[derive(Debug, Default)]
struct Streamed {
    owners: Vec<usize>,
    state: Vec<Sent>,
}

impl Streamed {
    /// Lines the state up with a plan's stream commands (`owners`): the commands planned before
    /// keep where they stand, and new ones are unsent. Were the plan ever to differ in what it
    /// planned before, everything is sent again: a stream entry may then repeat (same key and
    /// version), as after a crash, but none is left out.
    fn follow(&mut self, owners: &[usize]) {
        if !owners.starts_with(&self.owners) {
            self.state.clear();
            self.owners.clear();
        }
        self.state.resize(owners.len(), Sent::Unsent);
        self.owners = owners.to_vec();
    }
}

/// A partition's commands of a batch: which outbox entry (index within the batch) each
/// belongs to, in order.
#[derive(Debug, Default)]
struct Group {
    partition: u32,
    owners: Vec<usize>,
    /// The lease holder the commands were queued under (fenced writes only).
    holder: Option<Arc<str>>,
    /// The stream entries among the commands, written into the partition's relay: each
    /// command's index in the script, and what to relay once it is answered.
    relays: Vec<(usize, Relayed)>,
    /// The script ends with the partition's version floor (`layout::versions_key`), one reply
    /// more than `owners`.
    floor: bool,
}

/// A partition's part of a batch being planned: whose commands (entry indexes), the keys they
/// touch, the commands, in the outbox's order, the stream entries among them (`Group`), and
/// the highest version its records carry.
#[derive(Default)]
struct Pending {
    owners: Vec<usize>,
    keys: Vec<String>,
    cmds: Vec<redis::Cmd>,
    relays: Vec<(usize, Relayed)>,
    top: Option<u64>,
}

impl Pending {
    fn key(&mut self, key: &[u8]) {
        if !self.keys.iter().any(|k| k.as_bytes() == key) {
            self.keys.push(String::from_utf8_lossy(key).into_owned());
        }
    }
}

/// A batch as the two steps send it.
#[derive(Default)]
struct Plan {
    /// Entries in the batch.
    entries: usize,
    /// Commands in the batch.
    commands: usize,
    /// Step 1: the commands outside every partition's slot (the stream entries).
    streams: Vec<Routed>,
    stream_owners: Vec<usize>,
    /// Step 2: one script per partition, and whose commands it holds.
    scripts: Vec<Routed>,
    groups: Vec<Group>,
    /// Partitions not written: no lease held, or their script could not be built.
    unsent: Vec<Group>,
}

impl Plan {
    /// The plan of `batch`.
    /// `fenced`: the store writes for a cluster of nodes, each entry under the holder it was
    /// queued with (`Entry::holder`), and a stream entry goes into its partition's script, to
    /// the partition's relay (`relay`), so that it lands only under the lease as well.
    fn of<'a>(batch: impl Iterator<Item = &'a Entry>, fenced: bool) -> Plan {
        let mut plan = Plan::default();
        // (partition, holder the entries were queued under) → (owners, keys, commands), in the
        // order of the outbox. Entries of one partition queued under two leases go in two
        // scripts: the earlier lease's is fenced (epochs only grow), whatever their order.
        let mut parts: BTreeMap<(u32, Option<Arc<str>>), Pending> = BTreeMap::new();
        for (i, entry) in batch.enumerate() {
            plan.entries += 1;
            // The partition of the entry's other commands: its stream entry's relay.
            let home = std::iter::once(&entry.first)
                .chain(entry.rest())
                .filter(|c| !is_xadd(c))
                .find_map(|c| key_of(c).and_then(partition_of_key));
            for cmd in std::iter::once(&entry.first).chain(entry.rest()) {
                plan.commands += 1;
                let diverted = home
                    .filter(|_| fenced && is_xadd(cmd))
                    .and_then(|p| relay::divert(cmd, p));
                if let Some((to_relay, r)) = diverted {
                    let relay_key = relay::relay_key(r.partition);
                    let part = parts
                        .entry((r.partition, entry.holder.clone()))
                        .or_default();
                    part.owners.push(i);
                    part.key(relay_key.as_bytes());
                    part.relays.push((part.cmds.len(), r));
                    part.cmds.push(to_relay);
                    continue;
                }
                let key = key_of(cmd);
                let partition = key.filter(|_| !is_xadd(cmd)).and_then(partition_of_key);
                match (partition, key) {
                    (Some(p), Some(key)) => {
                        let part = parts.entry((p, entry.holder.clone())).or_default();
                        part.owners.push(i);
                        part.key(key);
                        if let Some(v) = layout::written_version(cmd).filter(|_| fenced) {
                            part.top = part.top.max(Some(v));
                        }
                        part.cmds.push(cmd.clone());
                    }
                    _ => {
                        plan.streams
                            .push(Routed::new(key.unwrap_or(&[]), cmd.clone()));
                        plan.stream_owners.push(i);
                    }
                }
            }
        }
        for ((partition, holder), mut part) in parts {
            // The partition's version floor rises with the records, in the same script, so
            // a version the partition's next owner could repeat is never acknowledged
            // (`layout::versions_key`). Answered after the entries' replies, and not theirs.
            if let Some(top) = part.top {
                let key = layout::versions_key(partition);
                part.cmds.push(
                    redis::cmd("ZADD")
                        .arg(&key)
                        .arg("GT")
                        .arg(top)
                        .arg(layout::VERSIONS_TOP)
                        .clone(),
                );
                part.key(key.as_bytes());
            }
            let Pending {
                owners,
                keys,
                cmds,
                relays,
                top,
            } = part;
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            // Fenced by the holder each entry was queued under, not by today's: a write queued
            // before this node lost and re-acquired the partition is refused, as it must be,
            // since the partition's new load did not see it (`docs/SCALING.md`).
            let script = if fenced {
                holder
                    .as_deref()
                    .and_then(|holder| fence::fenced(partition, holder, &keys, &cmds).ok())
            } else {
                fence::ordered(partition, &keys, &cmds).ok()
            };
            let group = Group {
                partition,
                owners,
                holder,
                relays,
                floor: top.is_some(),
            };
            match script {
                Some(s) => {
                    plan.scripts.push(s);
                    plan.groups.push(group);
                }
                None => plan.unsent.push(group),
            }
        }
        plan
    }
}

/// A command's first key (its second argument), if it has one.
fn key_of(cmd: &redis::Cmd) -> Option<&[u8]> {
    match cmd.args_iter().nth(1)? {
        redis::Arg::Simple(k) => Some(k),
        redis::Arg::Cursor => None,
    }
}

fn is_xadd(cmd: &redis::Cmd) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(n)) if n.eq_ignore_ascii_case(b"XADD"))
}

#[cfg(test)]
#[path = "clustered_tests.rs"]
mod tests;
