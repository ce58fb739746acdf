//! The crash matrix's model: the steps a phase makes, as the shard makes them, the state they
//! leave (pending timers and dead letters, key → version, deadline, delivery metadata and
//! payload, each set as the journal's records classify it), and the run of the steps against
//! one or more shards' stores. Every timer's deadline and payload are its own (from its key
//! and version), so a record recovered with another's bytes, or an attempt's deadline lost,
//! differs from every prefix.

use super::super::harness::{Answer, Node, TENANT};
use std::collections::BTreeMap;
use std::time::Duration;

/// A dead letter's metadata, as the harness files it: not a callback's, so that only the
/// record's own kind can say it is a dead letter when it comes back (`Found::dead`).
pub const DEAD: &[u8] = b"dead-letter";
const FAR: u64 = u64::MAX / 4;

/// A version above every version a base's records and leases carry (a base's first write
/// leases versions up to its own + 10,000,000, `ceiling::AHEAD`).
pub const ABOVE_BASE: u64 = 20_000_000;

/// One step of a phase, as the shard makes it.
#[derive(Clone, Debug)]
pub enum Step {
    Schedule(String, u64),
    Cancel(String),
    Fired(String, u64),
    /// A webhook's attempt: the timer fired and stays pending under its version, with a new
    /// deadline and delivery metadata ([`ATTEMPT`]).
    Attempt(String, u64),
    /// A timer due at once, fired as the shard fires it: only once the store says its
    /// record is durable (`Store::may_fire`), else held and fired after the next pass's
    /// commit. Its webhook is then out: a recovery must not bring back an older version.
    FireDue(String, u64),
    Dead(String, u64),
    DeadRemoved(String),
    /// A dead letter pending again under its version.
    Redrive(String, u64),
    /// The end of a pass: the commit task takes what was queued; the acks are awaited.
    Pass,
    /// Wait for a compaction in flight to end.
    Compaction,
}

impl Step {
    /// Whether the step's caller waits for an acknowledgement.
    pub fn is_acknowledged(&self) -> bool {
        matches!(
            self,
            Step::Schedule(..) | Step::Cancel(_) | Step::DeadRemoved(_) | Step::Redrive(..)
        )
    }

    /// The key the step is about.
    pub fn key(&self) -> Option<&str> {
        match self {
            Step::Schedule(k, _)
            | Step::Cancel(k)
            | Step::Fired(k, _)
            | Step::Attempt(k, _)
            | Step::FireDue(k, _)
            | Step::Dead(k, _)
            | Step::DeadRemoved(k)
            | Step::Redrive(k, _) => Some(k),
            Step::Pass | Step::Compaction => None,
        }
    }

    /// The version the step writes, if any.
    pub fn version(&self) -> Option<u64> {
        match self {
            Step::Schedule(_, v)
            | Step::Fired(_, v)
            | Step::Attempt(_, v)
            | Step::FireDue(_, v)
            | Step::Dead(_, v)
            | Step::Redrive(_, v) => Some(*v),
            _ => None,
        }
    }

    /// The shard of `shards` that owns the step's key (`None`: every shard).
    pub fn owner(&self, shards: usize) -> Option<usize> {
        self.key()
            .map(|k| crate::partition::shard_of(TENANT, k, shards))
    }
}

/// A delivery attempt's metadata, as the harness writes it.
pub const ATTEMPT: &[u8] = b"attempt";

/// A timer or dead letter as the model holds it, and as a recovery must give it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub version: u64,
    pub deadline: u64,
    pub meta: Vec<u8>,
    pub payload: Vec<u8>,
}

/// The deadline of a timer scheduled (or re-driven) under `v`: its own.
pub fn deadline_of(v: u64) -> u64 {
    FAR + v
}

/// The deadline of a timer kept for an attempt under `v`.
fn attempt_deadline(v: u64) -> u64 {
    FAR + v + 7
}

/// The payload of `key`'s timer under `v`, `size` bytes (at least its name).
pub fn payload_of(key: &str, v: u64, size: usize) -> Vec<u8> {
    let mut p = format!("{key}:{v}|").into_bytes();
    p.resize(size.max(p.len()), b'p');
    p
}

/// Pending timers and dead letters, by key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub pending: BTreeMap<String, Entry>,
    pub dead: BTreeMap<String, Entry>,
    /// The payloads' size.
    pub size: usize,
}

impl State {
    /// The state of payloads of `size` bytes.
    pub fn sized(size: usize) -> State {
        State {
            size,
            ..State::default()
        }
    }

    fn entry(&self, k: &str, v: u64, deadline: u64, meta: &[u8]) -> Entry {
        Entry {
            version: v,
            deadline,
            meta: meta.to_vec(),
            payload: payload_of(k, v, self.size),
        }
    }

    pub fn apply(&mut self, s: &Step) {
        match s {
            Step::Schedule(k, v) => {
                let e = self.entry(k, *v, deadline_of(*v), b"");
                self.pending.insert(k.clone(), e);
            }
            Step::Attempt(k, v) => {
                let e = self.entry(k, *v, attempt_deadline(*v), ATTEMPT);
                self.pending.insert(k.clone(), e);
            }
            Step::Cancel(k) | Step::Fired(k, _) | Step::FireDue(k, _) => {
                self.pending.remove(k);
            }
            Step::Dead(k, v) => {
                self.pending.remove(k);
                let e = self.entry(k, *v, 1, DEAD);
                self.dead.insert(k.clone(), e);
            }
            Step::DeadRemoved(k) => {
                self.dead.remove(k);
            }
            Step::Redrive(k, v) => {
                self.dead.remove(k);
                let e = self.entry(k, *v, deadline_of(*v), b"");
                self.pending.insert(k.clone(), e);
            }
            Step::Pass | Step::Compaction => {}
        }
    }

    /// What `node` recovered; `size`: the payloads' size.
    pub fn of(node: &Node, size: usize) -> State {
        let mut s = State::sized(size);
        for f in &node.recovered {
            let set = if f.dead { &mut s.dead } else { &mut s.pending };
            let e = Entry {
                version: f.version,
                deadline: f.deadline,
                meta: f.meta.clone(),
                payload: f.payload.clone(),
            };
            set.insert(f.key.clone(), e);
        }
        s
    }

    /// The highest version the state holds.
    pub fn highest(&self) -> u64 {
        (self.pending.values().chain(self.dead.values()))
            .map(|e| e.version)
            .max()
            .unwrap_or(0)
    }

    /// The part of the state shard `shard` of `shards` owns.
    pub fn owned(&self, shard: usize, shards: usize) -> State {
        let mine = |m: &BTreeMap<String, Entry>| {
            m.iter()
                .filter(|(k, _)| crate::partition::shard_of(TENANT, k, shards) == shard)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        State {
            pending: mine(&self.pending),
            dead: mine(&self.dead),
            size: self.size,
        }
    }
}

/// A phase: how its base is built (on one shard), and its steps, run on `shards` shards (a
/// count other than 1 re-partitions the base first).
pub struct Phase {
    pub name: &'static str,
    pub payload: usize,
    pub base: Vec<Step>,
    pub steps: Vec<Step>,
    pub shards: usize,
}

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}{i:04}")
}

pub fn phases() -> Vec<Phase> {
    let small = |n: usize| -> Vec<Step> {
        let mut b: Vec<Step> = (0..n)
            .map(|i| Step::Schedule(key("b", i), 1 + i as u64))
            .collect();
        b.push(Step::Dead(key("d", 0), 900));
        b.push(Step::Dead(key("d", 1), 901));
        b.push(Step::Pass);
        b
    };
    let commit = vec![
        Step::Schedule(key("n", 0), 100),
        Step::Cancel(key("b", 0)),
        Step::Schedule(key("b", 1), 101),
        Step::Pass,
        Step::Schedule(key("n", 1), 102),
        Step::Fired(key("b", 2), 3),
        Step::Pass,
        Step::Cancel(key("n", 0)),
        Step::Dead(key("b", 3), 4),
        Step::Pass,
    ];
    // 8 KiB timers: about 130 fill a 1 MiB segment; passes of 40 (4 commits of ≤ 256 KiB).
    let fill = |prefix: &str, n: usize, v0: u64, cancel: bool| -> Vec<Step> {
        let mut s = Vec::new();
        for i in 0..n {
            s.push(Step::Schedule(key(prefix, i), v0 + i as u64));
            if cancel {
                s.push(Step::Cancel(key(prefix, i)));
            }
            if i % 40 == 39 {
                s.push(Step::Pass);
            }
        }
        s.push(Step::Pass);
        s
    };
    let mut compaction_base = fill("c", 140, 1000, false);
    compaction_base.extend((0..136).map(|i| Step::Cancel(key("c", i))));
    compaction_base.push(Step::Pass);
    let mut compaction = fill("x", 140, 5000, true);
    compaction.push(Step::Compaction);
    compaction.push(Step::Schedule(key("y", 0), 9000));
    compaction.push(Step::Pass);
    let one = |name, payload, base, steps| Phase {
        name,
        payload,
        base,
        steps,
        shards: 1,
    };
    vec![
        one("commit", 16, small(8), commit.clone()),
        one(
            "segment roll",
            8 << 10,
            small(4),
            fill("r", 140, 2000, false),
        ),
        one("compaction", 8 << 10, compaction_base, compaction),
        one(
            "re-drive",
            16,
            small(4),
            vec![
                Step::Redrive(key("d", 0), 900),
                Step::Pass,
                Step::Schedule(key("n", 0), 100),
                Step::Pass,
            ],
        ),
        one(
            "dead-letter discard",
            16,
            small(4),
            vec![
                Step::Schedule(key("d", 1), 950),
                Step::Pass,
                Step::DeadRemoved(key("d", 1)),
                Step::Pass,
                Step::DeadRemoved(key("d", 0)),
                Step::Schedule(key("n", 0), 100),
                Step::Pass,
            ],
        ),
        // A replacement due at once: v2 of a durable key fires only once its record is
        // durable, so no crash brings v1 back after v2's webhook went out.
        one(
            "replacement",
            16,
            small(4),
            // Versions above the base's floor (its lease reaches past 10,000,000), as the
            // shard hands them out.
            vec![
                Step::Schedule(key("b", 0), ABOVE_BASE),
                Step::FireDue(key("b", 0), ABOVE_BASE),
                Step::Pass,
                Step::Schedule(key("b", 1), ABOVE_BASE + 1),
                Step::Pass,
            ],
        ),
        // A webhook's delivery: attempts rewrite a timer under its version (new deadline,
        // new metadata), and a timer that ran out of attempts becomes a dead letter.
        one(
            "delivery",
            16,
            small(4),
            vec![
                Step::Attempt(key("b", 0), 1),
                Step::Pass,
                Step::Attempt(key("b", 1), 2),
                Step::Attempt(key("b", 0), 1),
                Step::Pass,
                Step::Dead(key("b", 0), 1),
                Step::Pass,
            ],
        ),
        // The base's one shard becomes three before the steps run: the re-partition's
        // every write, then the commit phase's steps on the new shards.
        Phase {
            name: "re-partition",
            payload: 16,
            base: small(8),
            steps: commit,
            shards: 3,
        },
    ]
}

/// What a run of steps did: the indices of the steps acknowledged, and the fires that went
/// out (key, version), as a webhook would have.
#[derive(Debug, Default)]
pub struct Driven {
    pub acked: Vec<usize>,
    pub delivered: Vec<(String, u64)>,
    /// Snapshots the shards' compactions made.
    pub compactions: u64,
    /// Fires held for their record, by shard: fired after the next pass's commit.
    held: Vec<(usize, String, u64)>,
}

/// Runs `steps` on `nodes` (shard `i` is `nodes[i]`; each step goes to its key's owner).
/// Steps the store refused (`admit`) are replaced by `Pass`: they never reached the outbox.
pub async fn drive(nodes: &mut [Node], steps: &mut [Step], limit: Duration) -> Driven {
    let mut run = Driven::default();
    let mut waiting: Vec<(usize, usize, Answer)> = Vec::new();
    let shards = nodes.len();
    for (i, step) in steps.iter_mut().enumerate() {
        let Some(node) = step.owner(shards).and_then(|s| nodes.get_mut(s)) else {
            end_of(step, nodes, &mut waiting, &mut run, limit).await;
            continue;
        };
        let size = node.payload.len();
        if let Some((k, v)) = step.key().zip(step.version()) {
            node.payload = payload_of(k, v, size);
        }
        if let Step::FireDue(k, v) = &*step {
            if crate::store::Store::may_fire(&node.store, *v) {
                node.fired(k, *v);
                run.delivered.push((k.clone(), *v));
            } else {
                let shard = step.owner(shards).unwrap_or(0);
                run.held.push((shard, k.clone(), *v));
            }
            continue;
        }
        if step.is_acknowledged() && !node.admits() {
            *step = Step::Pass;
            end_of(step, nodes, &mut waiting, &mut run, limit).await;
            continue;
        }
        let answer = match &*step {
            Step::Schedule(k, v) => Some(node.schedule(k, *v, deadline_of(*v), b"")),
            Step::Attempt(k, v) => {
                node.kept(k, *v, attempt_deadline(*v), ATTEMPT);
                None
            }
            Step::Cancel(k) => Some(node.cancel(k, 0)),
            Step::Fired(k, v) => {
                node.fired(k, *v);
                None
            }
            Step::Dead(k, v) => {
                node.dead(k, *v, DEAD);
                None
            }
            Step::DeadRemoved(k) => Some(node.dead_removed(k, 0)),
            Step::Redrive(k, v) => Some(node.redrive(k, *v, deadline_of(*v))),
            Step::FireDue(..) | Step::Pass | Step::Compaction => None,
        };
        if let Some(a) = answer {
            waiting.push((i, step.owner(shards).unwrap_or(0), a));
        }
    }
    run.compactions = nodes
        .iter()
        .map(|n| {
            let m = &n.store.shared.m().journal_snapshots_total;
            m.load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    run
}

/// Waits until `node`'s outbox is written, or its journal cannot write (full or failed), or
/// `limit`.
async fn drained(node: &Node, limit: Duration) {
    let until = std::time::Instant::now() + limit;
    while std::time::Instant::now() < until {
        let shared = &node.store.shared;
        let ready = shared.health.get() == crate::metrics::StoreState::Ready;
        if !ready || shared.outbox.borrow().is_empty() {
            return;
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

/// A step of every shard: the end of a pass, or the wait for compactions.
async fn end_of(
    step: &Step,
    nodes: &mut [Node],
    waiting: &mut Vec<(usize, usize, Answer)>,
    run: &mut Driven,
    limit: Duration,
) {
    match step {
        Step::Pass => {
            // One shard at a time, each until its outbox is written (or cannot be): the
            // shards' file operations then come in one order, run after run.
            for (shard, node) in nodes.iter_mut().enumerate() {
                node.pass();
                let (mine, rest): (Vec<_>, Vec<_>) =
                    waiting.drain(..).partition(|(_, s, _)| *s == shard);
                *waiting = rest;
                for (at, _, a) in mine {
                    if a.acknowledged(limit).await {
                        run.acked.push(at);
                    }
                }
                drained(node, limit).await;
            }
            // The shard looks again at what it held: fired once its record is durable.
            let mut still = Vec::new();
            for (shard, k, v) in run.held.drain(..) {
                match nodes.get_mut(shard) {
                    Some(n) if crate::store::Store::may_fire(&n.store, v) => {
                        n.fired(&k, v);
                        run.delivered.push((k, v));
                    }
                    _ => still.push((shard, k, v)),
                }
            }
            run.held = still;
        }
        Step::Compaction => {
            for _ in 0..2_000 {
                if nodes
                    .iter()
                    .all(|n| !n.store.shared.files.borrow().compacting)
                {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(5)).await;
            }
        }
        _ => {}
    }
}
