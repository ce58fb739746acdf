//! Which master serves each of the 16,384 slots, read from `CLUSTER SHARDS` (Redis 7) or,
//! on an older server, `CLUSTER SLOTS`.
//!
//! The map is a table of 16,384 small indexes into a list of master addresses: a lookup is
//! one array read, and a `MOVED` updates one entry. A slot no master serves (a shard whose
//! every node failed, or one being added) maps to nothing, and a command for it waits for the
//! next refresh.
//!
//! In `CLUSTER SHARDS` each shard lists its slot ranges and its nodes; the node whose `role` is
//! `master` and whose `health` is `online` serves the shard's slots (a master that failed but
//! was not yet replaced is taken when no online one is listed: connecting to it fails, which
//! is what tells the client to refresh again). A node's address is its `endpoint` (the
//! cluster's preferred endpoint type), or its `ip` when the endpoint is unknown (`?`).

use super::slot::SLOTS;
use redis::Value;
use std::fmt;

/// A node's address as the cluster announces it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// No master: the slot's entry before any shard claimed it.
const NONE: u16 = u16::MAX;

/// Each slot's master.
#[derive(Clone)]
pub struct SlotMap {
    masters: Vec<Addr>,
    slots: Box<[u16]>,
}

impl fmt::Debug for SlotMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let served = self.slots.iter().filter(|&&m| m != NONE).count();
        f.debug_struct("SlotMap")
            .field("masters", &self.masters)
            .field("slots_served", &served)
            .finish()
    }
}

impl Default for SlotMap {
    fn default() -> Self {
        SlotMap {
            masters: Vec::new(),
            slots: vec![NONE; usize::from(SLOTS)].into_boxed_slice(),
        }
    }
}

impl SlotMap {
    /// The master that serves `slot`, if any.
    pub fn master_of(&self, slot: u16) -> Option<&Addr> {
        let i = *self.slots.get(usize::from(slot))?;
        self.masters.get(usize::from(i))
    }

    /// Every master that serves at least one slot (and, after a `MOVED`, possibly one that no
    /// longer does until the next refresh).
    pub fn masters(&self) -> &[Addr] {
        &self.masters
    }

    /// Slots some master serves.
    pub fn served(&self) -> usize {
        self.slots.iter().filter(|&&m| m != NONE).count()
    }

    /// `slot` is served by `to` from now on (a `MOVED`).
    pub fn assign(&mut self, slot: u16, to: &Addr) {
        let i = match self.masters.iter().position(|m| m == to) {
            Some(i) => i,
            None => {
                self.masters.push(to.clone());
                self.masters.len() - 1
            }
        };
        if let (Some(entry), Ok(i)) = (self.slots.get_mut(usize::from(slot)), u16::try_from(i)) {
            *entry = i;
        }
    }

    /// Slots `first..=last` are served by `to`; a range that is not within the slots is a
    /// server's nonsense and ignored.
    fn assign_range(&mut self, first: i64, last: i64, to: &Addr) {
        let valid = |s: i64| u16::try_from(s).ok().filter(|&s| s < SLOTS);
        let (Some(first), Some(last)) = (valid(first), valid(last)) else {
            return;
        };
        for slot in first..=last {
            self.assign(slot, to);
        }
    }

    /// The map `CLUSTER SHARDS` describes; `Err` says what was wrong with the reply.
    pub fn from_shards(reply: &Value) -> Result<SlotMap, String> {
        let Value::Array(shards) = reply else {
            return Err(format!("CLUSTER SHARDS answered {}", kind(reply)));
        };
        let mut map = SlotMap::default();
        for shard in shards {
            let fields = pairs(shard).ok_or("a shard is not a map")?;
            let ranges = ints(lookup(&fields, "slots").ok_or("a shard without slots")?);
            let nodes = match lookup(&fields, "nodes") {
                Some(Value::Array(nodes)) => nodes,
                _ => return Err("a shard without nodes".into()),
            };
            let Some(master) = shard_master(nodes) else {
                continue;
            };
            for range in ranges.chunks_exact(2) {
                map.assign_range(range[0], range[1], &master);
            }
        }
        Ok(map)
    }

    /// The map `CLUSTER SLOTS` describes (each entry: first slot, last slot, the master as
    /// `[host, port, id, …]`, then its replicas); an empty host is `asked`'s.
    pub fn from_slots(reply: &Value, asked: &Addr) -> Result<SlotMap, String> {
        let Value::Array(ranges) = reply else {
            return Err(format!("CLUSTER SLOTS answered {}", kind(reply)));
        };
        let mut map = SlotMap::default();
        for range in ranges {
            let Value::Array(parts) = range else {
                return Err("a slot range is not an array".into());
            };
            let [first, last, Value::Array(master), ..] = &parts[..] else {
                return Err("a slot range without its master".into());
            };
            let (Some(first), Some(last)) = (int(first), int(last)) else {
                return Err("a slot range's bounds are not numbers".into());
            };
            let host = master.first().and_then(text).unwrap_or_default();
            let port = master
                .get(1)
                .and_then(int)
                .and_then(|p| u16::try_from(p).ok());
            let Some(port) = port else {
                return Err("a slot range's master has no port".into());
            };
            let host = match host.as_str() {
                "" | "?" => asked.host.clone(),
                _ => host,
            };
            map.assign_range(first, last, &Addr { host, port });
        }
        Ok(map)
    }
}

/// The master among a shard's `nodes`: an online one, else any that says it is a master.
fn shard_master(nodes: &[Value]) -> Option<Addr> {
    let described: Vec<(Addr, bool, bool)> = nodes
        .iter()
        .filter_map(|n| {
            let f = pairs(n)?;
            let get = |name| lookup(&f, name).and_then(text);
            let host = match get("endpoint").as_deref() {
                Some("") | Some("?") | None => get("ip")?,
                Some(e) => e.to_owned(),
            };
            let port = lookup(&f, "port")
                .or_else(|| lookup(&f, "tls-port"))
                .and_then(int)
                .and_then(|p| u16::try_from(p).ok())?;
            let master = get("role").as_deref() == Some("master");
            let online = get("health").as_deref() == Some("online");
            Some((Addr { host, port }, master, online))
        })
        .collect();
    let pick = |want_online: bool| {
        described
            .iter()
            .find(|(_, master, online)| *master && (*online || !want_online))
            .map(|(a, ..)| a.clone())
    };
    pick(true).or_else(|| pick(false))
}

/// A RESP2 flat array of names and values, or a RESP3 map, as pairs.
fn pairs(v: &Value) -> Option<Vec<(&Value, &Value)>> {
    match v {
        Value::Array(items) if items.len() % 2 == 0 => {
            Some(items.chunks_exact(2).map(|kv| (&kv[0], &kv[1])).collect())
        }
        Value::Map(items) => Some(items.iter().map(|(k, v)| (k, v)).collect()),
        _ => None,
    }
}

fn lookup<'a>(pairs: &[(&'a Value, &'a Value)], name: &str) -> Option<&'a Value> {
    pairs
        .iter()
        .find(|(k, _)| text(k).as_deref() == Some(name))
        .map(|(_, v)| *v)
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => text(other)?.parse().ok(),
    }
}

fn ints(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items.iter().filter_map(int).collect(),
        _ => Vec::new(),
    }
}

fn kind(v: &Value) -> String {
    match v {
        Value::ServerError(e) => format!("an error: {} {}", e.code(), e.details().unwrap_or("")),
        other => format!("{other:?}").chars().take(80).collect(),
    }
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;
