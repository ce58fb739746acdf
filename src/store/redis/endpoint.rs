//! Where the store's Redis is: one address, a master that Redis Sentinel names, or a Redis
//! Cluster.
//!
//! ```text
//! redis://[user:password@]host:port[/db]
//! redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>[/db]
//! redis+cluster://[user:password@]host:port[,host:port…]/
//! ```
//!
//! A cluster's hosts are seeds for the slot map; the store talks to it through the cluster
//! client (`cluster::client`, driven by `clustered`), never through [`connect`], which is for
//! the first two forms.
//!
//! With sentinels, every connection starts by asking each of them for the master's address
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`), takes the address most of them name, then checks
//! with `ROLE` that the server found there is a master before it writes anything. The credentials and database
//! in the URL are the master's; the sentinels are asked without them.
//!
//! Failover needs nothing more than that. The store task drops its connection on an I/O
//! error or a transient error reply (`READONLY` from a demoted master, `LOADING`, …) and
//! reconnects through [`connect`], which asks the sentinels again; until their quorum has
//! promoted a replica they still name the dead master, the connection is refused, and the
//! store retries with its backoff (at most `backoff_max`, 1 s by default). So writes reach
//! the new master within about one backoff of the promotion.
//!
//! One case needs more: an old master that the sentinels lost but punctual still reaches (a
//! partition) keeps taking writes that vanish when it is demoted. So shard 0 also listens to
//! the sentinels' `+switch-master` announcements ([`watch_switches`]); each one for this
//! master bumps a counter that every shard's store task compares before it writes, and a
//! store task whose connection predates the switch drops it and asks the sentinels again.
//! Writes acknowledged by the old master in the moment before the announcement can still be
//! lost; `wait_replicas` closes that gap (a partitioned master's replicas stop confirming).

use super::cluster::{ClusterConfig, CLUSTER_SCHEME};
use super::conn::{Conn, ConnError};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The URL scheme for a master found through Redis Sentinel.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// A parsed Redis URL.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// One server at a fixed address.
    Direct(ConnectionInfo),
    /// The master that these sentinels name.
    Sentinel {
        sentinels: Vec<(String, u16)>,
        master: String,
        /// Credentials and database of the master.
        redis: RedisConnectionInfo,
        /// `+switch-master` announcements seen for this master, all shards together.
        switches: Arc<AtomicU64>,
    },
    /// A Redis Cluster, found from these seeds (the I/O settings are the store's, set when the
    /// store connects).
    Cluster(ClusterConfig),
}

impl Endpoint {
    /// Parses `url`; the error says what is wrong with it.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        if let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) {
            return parse_sentinel(rest);
        }
        if url.starts_with(CLUSTER_SCHEME) {
            return super::cluster::parse_url(url).map(Endpoint::Cluster);
        }
        let info = url.into_connection_info().map_err(|e| e.to_string())?;
        match info.addr {
            ConnectionAddr::Tcp(..) => Ok(Endpoint::Direct(info)),
            _ => Err(format!(
                "only redis://host:port[/db] (TCP), {SENTINEL_SCHEME}host:port[,host:port…]/<master>[/db] or {CLUSTER_SCHEME}host:port[,host:port…]/ is supported"
            )),
        }
    }

    /// Master switches announced so far (always 0 for a direct endpoint). A connection made
    /// before the count moved is to a master that may no longer be one.
    pub fn switches(&self) -> u64 {
        match self {
            Endpoint::Direct(_) | Endpoint::Cluster(_) => 0,
            Endpoint::Sentinel { switches, .. } => switches.load(Ordering::Acquire),
        }
    }

    /// Where a log line says the store is connecting to.
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Direct(info) => info.addr.to_string(),
            Endpoint::Sentinel {
                sentinels, master, ..
            } => {
                let list: Vec<String> = sentinels.iter().map(|(h, p)| format!("{h}:{p}")).collect();
                format!("master {master:?} of sentinels {}", list.join(","))
            }
            Endpoint::Cluster(cfg) => {
                let list: Vec<String> = cfg.seeds.iter().map(ToString::to_string).collect();
                format!("Redis Cluster seeded by {}", list.join(","))
            }
        }
    }
}

fn parse_sentinel(rest: &str) -> Result<Endpoint, String> {
    let (authority, path) = rest
        .split_once('/')
        .ok_or("a sentinel URL needs /<master-name> after the sentinels")?;
    let (sentinels, credentials) = super::authority::parse(authority, "sentinel")?;
    let mut parts = path.splitn(2, '/');
    let master = parts.next().unwrap_or_default();
    if master.is_empty() {
        return Err("a sentinel URL needs /<master-name> after the sentinels".into());
    }
    let db = match parts.next() {
        None | Some("") => 0,
        Some(d) => d
            .parse::<i64>()
            .map_err(|_| format!("database {d:?} is not a number"))?,
    };
    Ok(Endpoint::Sentinel {
        sentinels,
        master: master.to_owned(),
        redis: RedisConnectionInfo { db, ..credentials },
        switches: Arc::default(),
    })
}

/// Connects to where `endpoint` says the store's Redis is now.
pub async fn connect(endpoint: &Endpoint, timeout: Duration) -> Result<Conn, ConnError> {
    match endpoint {
        Endpoint::Direct(info) => Conn::connect(info, timeout).await,
        Endpoint::Cluster(_) => Err(ConnError::Handshake(
            "a Redis Cluster is reached through the cluster client, not one connection".into(),
        )),
        Endpoint::Sentinel {
            sentinels,
            master,
            redis,
            ..
        } => {
            // Every sentinel is asked; the address most of them name wins. A sentinel that
            // is cut off or lagging may still name an old master that came back (it stays a
            // master for seconds before Sentinel demotes it), and writes there are lost.
            let mut votes: Vec<((String, u16), usize)> = Vec::new();
            let mut last = ConnError::Handshake("no sentinel configured".into());
            for (host, port) in sentinels {
                match ask_sentinel(host, *port, master, timeout).await {
                    Ok(addr) => match votes.iter_mut().find(|(a, _)| *a == addr) {
                        Some((_, n)) => *n += 1,
                        None => votes.push((addr, 1)),
                    },
                    Err(e) => {
                        tracing::debug!(sentinel = %format!("{host}:{port}"), error = %e, "store: no master from this sentinel");
                        last = e;
                    }
                }
            }
            // The most votes; among equals, the address the earliest sentinel named.
            let Some(((mhost, mport), n)) = votes.into_iter().rev().max_by_key(|(_, n)| *n) else {
                return Err(last);
            };
            if n * 2 <= sentinels.len() {
                tracing::debug!(master, votes = n, sentinels = sentinels.len(), "store: no majority of sentinels agrees on the master; using the address most of those that answered name");
            }
            let info = ConnectionInfo {
                addr: ConnectionAddr::Tcp(mhost.clone(), mport),
                redis: redis.clone(),
            };
            let mut conn = Conn::connect(&info, timeout).await?;
            redis::cmd("ROLE").write_packed_command(conn.out());
            let role = conn.round_trip(1).await?.pop();
            if !is_master(&role) {
                return Err(ConnError::Handshake(format!(
                    "{mhost}:{mport}, named master {master:?} by {n} sentinel(s), is not a master (yet)"
                )));
            }
            Ok(conn)
        }
    }
}

/// A sentinel's address: sentinels are asked without the master's credentials.
fn sentinel_at(host: &str, port: u16) -> ConnectionInfo {
    ConnectionInfo {
        addr: ConnectionAddr::Tcp(host.to_owned(), port),
        redis: RedisConnectionInfo::default(),
    }
}

/// The master's address as the sentinel at `host:port` names it.
async fn ask_sentinel(
    host: &str,
    port: u16,
    master: &str,
    timeout: Duration,
) -> Result<(String, u16), ConnError> {
    let mut s = Conn::connect(&sentinel_at(host, port), timeout).await?;
    redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .write_packed_command(s.out());
    let reply = s.round_trip(1).await?.pop();
    master_addr(reply)
        .map_err(|e| ConnError::Handshake(format!("sentinel {host}:{port} for {master:?}: {e}")))
}

/// Listens to the sentinels' `+switch-master` announcements until `closing()`, counting
/// those for this endpoint's master (see the module doc). Moves to the next sentinel when
/// one fails; nothing to do for a direct endpoint.
pub async fn watch_switches(endpoint: &Endpoint, timeout: Duration, closing: impl Fn() -> bool) {
    let Endpoint::Sentinel {
        sentinels,
        master,
        switches,
        ..
    } = endpoint
    else {
        return;
    };
    let mut next = 0;
    while !closing() {
        let (host, port) = &sentinels[next % sentinels.len()];
        next += 1;
        let error = match Conn::connect(&sentinel_at(host, *port), timeout).await {
            Ok(mut conn) => {
                redis::cmd("SUBSCRIBE")
                    .arg("+switch-master")
                    .write_packed_command(conn.out());
                listen(&mut conn, master, switches, &closing).await
            }
            Err(e) => e,
        };
        if !closing() {
            tracing::debug!(sentinel = %format!("{host}:{port}"), error = %error, "store: not listening to this sentinel's announcements; trying the next");
            glommio::timer::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Reads announcements from a subscribed sentinel connection until it fails or `closing()`.
async fn listen(
    conn: &mut Conn,
    master: &str,
    switches: &AtomicU64,
    closing: &impl Fn() -> bool,
) -> ConnError {
    if let Err(e) = conn.send().await {
        return e;
    }
    while !closing() {
        match conn.receive(1).await {
            Ok(mut v) => {
                if let Some(to) = v.pop().and_then(|v| switched(&v, master)) {
                    switches.fetch_add(1, Ordering::AcqRel);
                    tracing::info!(master, to = %to, "store: Sentinel announced a new master; every shard reconnects to it");
                }
            }
            // The connection's read timeout: no announcement yet.
            Err(ConnError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(e) => return e,
        }
    }
    ConnError::Closed
}

/// The new master's `host:port` when `v` announces a switch of `master`.
fn switched(v: &Value, master: &str) -> Option<String> {
    let Value::Array(items) = v else { return None };
    let [Value::BulkString(kind), _, Value::BulkString(text)] = items.as_slice() else {
        return None;
    };
    if kind.as_slice() != b"message" {
        return None;
    }
    // "<master-name> <old-ip> <old-port> <new-ip> <new-port>"
    let text = std::str::from_utf8(text).ok()?;
    let f: Vec<&str> = text.split_whitespace().collect();
    (f.len() == 5 && f[0] == master).then(|| format!("{}:{}", f[3], f[4]))
}

/// The `[host, port]` a sentinel answered, or why it is not usable.
fn master_addr(reply: Option<Value>) -> Result<(String, u16), String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match reply {
        Some(Value::Array(items)) if items.len() == 2 => {
            let host = text(&items[0]).ok_or("host is not text")?;
            let port = text(&items[1])
                .and_then(|p| p.parse::<u16>().ok())
                .ok_or("port is not a number")?;
            Ok((host, port))
        }
        Some(Value::Nil) => Err("unknown master name".into()),
        Some(Value::ServerError(e)) => Err(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

fn is_master(role: &Option<Value>) -> bool {
    match role {
        Some(Value::Array(items)) => matches!(
            items.first(),
            Some(Value::BulkString(b)) if b.as_slice() == b"master"
        ),
        _ => false,
    }
}

/// A Redis URL with its password replaced by `***`, for logs and `--print-config`.
pub fn mask_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Some((userinfo, hosts)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
    let slash = if rest.contains('/') { "/" } else { "" };
    format!("{scheme}://{user}:***@{hosts}{slash}{path}")
}

/// `url` as logs and errors may show it: the password masked ([`mask_url`]), and gone even
/// where the URL is malformed ([`scrub`]).
pub fn shown(url: &str) -> String {
    scrub(&mask_url(url), url)
}

/// `text` with `url`'s password, as written and percent-decoded, replaced by `***`: for an
/// error that may quote the URL or a part of it (a parser's message, a host list). The
/// password never reaches a log or an error this way, whatever quoted it.
pub fn scrub(text: &str, url: &str) -> String {
    let Some((_, rest)) = url.split_once("://") else {
        return text.to_owned();
    };
    // Up to the last `@`, not the first `/`: a password may hold an unencoded `/`.
    let Some((userinfo, _)) = rest.rsplit_once('@') else {
        return text.to_owned();
    };
    let Some((_, password)) = userinfo.split_once(':') else {
        return text.to_owned();
    };
    let mut out = text.to_owned();
    let decoded = super::authority::percent_decode(password);
    for secret in std::iter::once(password).chain(decoded.as_deref()) {
        if !secret.is_empty() {
            out = out.replace(secret, "***");
        }
    }
    out
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
