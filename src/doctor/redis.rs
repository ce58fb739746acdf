//! Redis checks, with `--redis`: what a node checks of its Redis Cluster at start
//! (`nodes::preflight`), as doctor findings.
//!
//! Owns `redis.maxmemory_policy` (FAIL under `allkeys-*`, which a node refuses to start under
//! unless overridden; WARN under `volatile-*` or when unreadable) and `redis.wait_replicas`
//! (WARN when `--redis-wait-replicas` is below a master's replicas). A URL that is not a
//! cluster's gets one WARN: only nodes among others on a Redis Cluster are checked.

use super::report::{Check, Group};
use crate::nodes::preflight::{self, Eviction};
use crate::store::redis::endpoint::scrub;
use crate::store::redis::RedisConfig;

const WHY_POLICY: &str = "Redis evicts keys under memory pressure unless maxmemory-policy is \
    noeviction: under allkeys-* a partition's epoch counter (an epoch handed out twice) or its \
    timer records (acknowledged timers lost) may go; under volatile-* leases and heartbeats may \
    go early (partitions move for no reason).";

const WHY_WAIT: &str = "an acknowledged write is on as many replicas as --redis-wait-replicas \
    says; a master lost before a replica without it has it promotes that replica, and the write \
    is gone.";

pub fn checks(url: &str, wait_replicas: u32) -> Vec<Check> {
    const POLICY: &str = "redis.maxmemory_policy";
    if !url.starts_with("redis+cluster://") {
        return vec![Check::warn(
            POLICY,
            Group::Redis,
            "not checked: --redis is not a redis+cluster:// URL".into(),
            WHY_POLICY,
            "give the cluster's URL, as serve --redis".into(),
        )];
    }
    let masters = match preflight::read(&RedisConfig::new(url)) {
        Ok(m) => m,
        Err(e) => {
            return vec![Check::fail(
                POLICY,
                Group::Redis,
                format!(
                    "the cluster's masters could not be listed: {}",
                    scrub(&e, url)
                ),
                WHY_POLICY,
                "check the URL, the credentials and that the cluster answers".into(),
            )]
        }
    };
    vec![policy(&masters), replicas(&masters, wait_replicas)]
}

fn policy(masters: &[preflight::Master]) -> Check {
    const ID: &str = "redis.maxmemory_policy";
    let found: Vec<String> = masters
        .iter()
        .map(|m| match &m.policy {
            Ok(p) => format!("{} {p}", m.addr),
            Err(e) => format!("{} unknown ({e})", m.addr),
        })
        .collect();
    let found = found.join(", ");
    let fix = "CONFIG SET maxmemory-policy noeviction on every master and replica (and in \
               redis.conf), with maxmemory sized for the timers"
        .to_owned();
    let eviction = |m: &preflight::Master| m.policy.as_deref().ok().map(Eviction::of);
    if masters.iter().any(|m| eviction(m) == Some(Eviction::Any)) {
        Check::fail(ID, Group::Redis, found, WHY_POLICY, fix)
    } else if masters.iter().all(|m| eviction(m) == Some(Eviction::None)) {
        Check::pass(ID, Group::Redis, found, WHY_POLICY)
    } else {
        Check::warn(ID, Group::Redis, found, WHY_POLICY, fix)
    }
}

fn replicas(masters: &[preflight::Master], wait_replicas: u32) -> Check {
    const ID: &str = "redis.wait_replicas";
    let most = masters.iter().map(|m| m.replicas).max().unwrap_or(0);
    let found =
        format!("--redis-wait-replicas {wait_replicas}; the most replicas of a master: {most}");
    if wait_replicas >= most {
        Check::pass(ID, Group::Redis, found, WHY_WAIT)
    } else {
        Check::warn(
            ID,
            Group::Redis,
            found,
            WHY_WAIT,
            format!("serve with --redis-wait-replicas {most}"),
        )
    }
}
