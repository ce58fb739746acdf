//! What a node checks of the Redis Cluster before it joins the others (`start::spawn_for`), and
//! what `punctual doctor --redis` reports: each master's `maxmemory-policy`, and how many
//! replicas each master has against `--redis-wait-replicas`.
//!
//! # Why
//!
//! | finding | what it risks | at start |
//! |---|---|---|
//! | `allkeys-*` on a master | Redis may evict any key under memory pressure: a partition's epoch counter (an epoch handed out twice) or its timer records (acknowledged timers lost) | refused, unless `--redis-allow-eviction` |
//! | `volatile-*` on a master | it may evict keys with a TTL before they expire: leases and heartbeats (partitions move for no reason; writes are still fenced) | a warning |
//! | `--redis-wait-replicas` below a master's replicas | a replica that did not have an acknowledged write can be promoted, and the write is lost | a warning |
//! | the policy cannot be read (`CONFIG` renamed or refused, as managed services do) | unknown | a warning: check it by hand |
//!
//! # Cost
//!
//! At start only: one connection to a seed for `CLUSTER NODES`, and one per master for
//! `CONFIG GET`, each with the store's I/O timeout. Blocking, on the thread that starts the
//! node, before its loop runs.

use crate::store::redis::cluster::parse_url;
use crate::store::redis::RedisConfig;
use redis::{ConnectionAddr, ConnectionInfo};
use std::time::Duration;

/// One master as the cluster lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Master {
    /// `host:port`.
    pub addr: String,
    /// Its replicas in `CLUSTER NODES`.
    pub replicas: u32,
    /// Its `maxmemory-policy`, or why it could not be read.
    pub policy: Result<String, String>,
}

/// How a `maxmemory-policy` may evict punctual's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// `noeviction`: writes fail under memory pressure, nothing is evicted.
    None,
    /// `volatile-*`: keys with a TTL (leases, heartbeats).
    WithTtl,
    /// `allkeys-*`: any key (epoch counters, timer records).
    Any,
}

impl Eviction {
    pub fn of(policy: &str) -> Eviction {
        if policy.starts_with("allkeys-") {
            Eviction::Any
        } else if policy.starts_with("volatile-") {
            Eviction::WithTtl
        } else {
            Eviction::None
        }
    }
}

/// What the start should do about `masters`: refuse (why), and the warnings to log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub refuse: Option<String>,
    pub warnings: Vec<String>,
}

/// The verdict on `masters` for a node that waits for `wait_replicas` and may or may not run
/// under an evicting policy (`allow_eviction`).
pub fn judge(masters: &[Master], wait_replicas: u32, allow_eviction: bool) -> Verdict {
    let mut v = Verdict::default();
    for m in masters {
        match m.policy.as_deref().map(|p| (p, Eviction::of(p))) {
            Ok((p, Eviction::Any)) => {
                let why = format!(
                    "Redis master {} has maxmemory-policy {p}: under memory pressure it may evict \
                     a partition's epoch counter or its timer records, and acknowledged timers are \
                     lost; set it to noeviction (or pass --redis-allow-eviction to run anyway)",
                    m.addr
                );
                if allow_eviction {
                    v.warnings.push(why);
                } else {
                    v.refuse.get_or_insert(why);
                }
            }
            Ok((p, Eviction::WithTtl)) => v.warnings.push(format!(
                "Redis master {} has maxmemory-policy {p}: it may evict leases and heartbeats \
                 early (partitions move for no reason); noeviction is advised",
                m.addr
            )),
            Ok((_, Eviction::None)) => {}
            Err(e) => v.warnings.push(format!(
                "the maxmemory-policy of Redis master {} could not be read ({e}); it must be \
                 noeviction",
                m.addr
            )),
        }
    }
    if let Some(most) = masters.iter().map(|m| m.replicas).max() {
        if wait_replicas < most {
            v.warnings.push(format!(
                "--redis-wait-replicas is {wait_replicas} but a master has {most} replicas: a \
                 replica promoted without an acknowledged write loses it; set it to {most}"
            ));
        }
    }
    v
}

/// The masters of the cluster `redis` names, each with its replicas and policy; the error
/// says why none could be listed.
pub fn read(redis: &RedisConfig) -> Result<Vec<Master>, String> {
    let cfg = parse_url(&redis.url)?;
    let timeout = redis.io_timeout.max(Duration::from_millis(500));
    let connect = |host: &str, port: u16| -> Result<redis::Connection, String> {
        let info = ConnectionInfo {
            addr: ConnectionAddr::Tcp(host.to_owned(), port),
            redis: cfg.redis.clone(),
        };
        let client = redis::Client::open(info).map_err(|e| e.to_string())?;
        let con = client
            .get_connection_with_timeout(timeout)
            .map_err(|e| e.to_string())?;
        con.set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        Ok(con)
    };
    let mut last = "no seed".to_owned();
    let mut listed = None;
    for seed in &cfg.seeds {
        let nodes = connect(&seed.host, seed.port).and_then(|mut c| {
            redis::cmd("CLUSTER")
                .arg("NODES")
                .query::<String>(&mut c)
                .map_err(|e| e.to_string())
        });
        match nodes {
            Ok(text) => {
                listed = Some(text);
                break;
            }
            Err(e) => last = format!("{}: {e}", seed),
        }
    }
    let text = listed.ok_or(last)?;
    let mut masters = masters_of(&text);
    for m in &mut masters {
        m.policy = m
            .addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("address {:?}", m.addr))
            .and_then(|(h, p)| connect(h, p))
            .and_then(|mut c| {
                let pair: Vec<String> = redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("maxmemory-policy")
                    .query(&mut c)
                    .map_err(|e| e.to_string())?;
                pair.get(1).cloned().ok_or_else(|| format!("{pair:?}"))
            });
    }
    Ok(masters)
}

/// The masters listed in a `CLUSTER NODES` answer, with their replica counts (policies not
/// read yet). A line is `<id> <ip:port@cport[,host]> <flags> <master id|-> …`.
pub fn masters_of(text: &str) -> Vec<Master> {
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| f.len() >= 4)
        .collect();
    let is = |f: &[&str], flag: &str| f[2].split(',').any(|x| x == flag);
    lines
        .iter()
        .filter(|f| is(f, "master") && !is(f, "fail"))
        .map(|f| {
            let addr = f[1].split(['@', ',']).next().unwrap_or_default().to_owned();
            let replicas = lines
                .iter()
                .filter(|r| (is(r, "slave") || is(r, "replica")) && r[3] == f[0])
                .count() as u32;
            Master {
                addr,
                replicas,
                policy: Err("not read".into()),
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "preflight_tests.rs"]
mod tests;
