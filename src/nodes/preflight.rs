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
mod tests {
    use super::*;

    fn master(addr: &str, replicas: u32, policy: &str) -> Master {
        Master {
            addr: addr.into(),
            replicas,
            policy: Ok(policy.into()),
        }
    }

    #[test]
    fn cluster_nodes_reads_as_masters_with_their_replicas() {
        let text = "\
a1 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
a2 10.0.0.2:7000@17000,h2 master - 0 0 2 connected 5461-10922
b1 10.0.0.4:7000@17000 slave a1 0 0 1 connected
b2 10.0.0.5:7000@17000 slave a1 0 0 1 connected
b3 10.0.0.6:7000@17000 replica a2 0 0 2 connected
x 10.0.0.9:7000@17000 master,fail - 0 0 3 disconnected
short line
";
        let m = masters_of(text);
        let got: Vec<(&str, u32)> = m.iter().map(|m| (m.addr.as_str(), m.replicas)).collect();
        assert_eq!(got, [("10.0.0.1:7000", 2), ("10.0.0.2:7000", 1)]);
        assert!(masters_of("").is_empty() && masters_of("\u{0} é").is_empty());
    }

    #[test]
    fn an_evicting_policy_refuses_the_start_unless_allowed_and_too_few_waits_warn() {
        let ok = [
            master("a:1", 1, "noeviction"),
            master("b:1", 1, "noeviction"),
        ];
        assert_eq!(judge(&ok, 1, false), Verdict::default());
        let low = judge(&ok, 0, false);
        assert!(low.refuse.is_none());
        assert!(low.warnings[0].contains("set it to 1"), "{low:?}");

        let lru = [
            master("a:1", 1, "noeviction"),
            master("b:1", 1, "allkeys-lru"),
        ];
        let refused = judge(&lru, 1, false);
        assert!(
            refused.refuse.as_deref().is_some_and(|r| r.contains("b:1")
                && r.contains("allkeys-lru")
                && r.contains("--redis-allow-eviction")),
            "{refused:?}"
        );
        let allowed = judge(&lru, 1, true);
        assert!(allowed.refuse.is_none() && allowed.warnings.len() == 1);

        let ttl = [master("a:1", 0, "volatile-ttl")];
        let v = judge(&ttl, 0, false);
        assert!(v.refuse.is_none() && v.warnings[0].contains("leases"));
        let unread = [Master {
            addr: "a:1".into(),
            replicas: 0,
            policy: Err("ERR unknown command 'CONFIG'".into()),
        }];
        let v = judge(&unread, 0, false);
        assert!(v.refuse.is_none() && v.warnings[0].contains("could not be read"));
    }
}
