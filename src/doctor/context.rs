//! What every check reads ([`Context`]): the host, the shard cores and the shard count the
//! service will run with, read once before the checks. Apart from `mod.rs`, which runs the
//! checks, so that the checks can read it without importing the file that calls them.
//!
//! Cost: two reads under the host root (`/sys/devices/system/cpu/online`,
//! `/proc/self/status`), once per `punctual doctor`.

use super::cpulist::CpuSet;
use super::host::Host;

/// What every check may read: the host, and what the service will run on it.
#[derive(Debug, Clone)]
pub struct Context {
    pub host: Host,
    /// The shard cores: `--cores`, else every online core in `allowed`.
    pub cores: CpuSet,
    /// Whether `cores` came from `--cores`.
    pub cores_given: bool,
    /// `/sys/devices/system/cpu/online`, when readable.
    pub online: Option<CpuSet>,
    /// Why `online` is `None` (for the report).
    pub online_error: String,
    /// This process's CPU affinity (`Cpus_allowed_list` in `/proc/self/status`), which
    /// serve inherits: it refuses `--cores` outside it and, without `--cores`, runs one
    /// shard per core in it.
    pub allowed: Option<CpuSet>,
    pub shards: usize,
}

impl Context {
    pub fn new(host: Host, cores: Option<CpuSet>, shards: Option<usize>) -> Context {
        let (online, online_error) = match host.read("/sys/devices/system/cpu/online") {
            Ok(text) => match CpuSet::parse(&text) {
                Ok(set) => (Some(set), String::new()),
                Err(e) => (None, format!("/sys/devices/system/cpu/online: {e}")),
            },
            Err(e) => (None, e.to_string()),
        };
        let allowed = host.read("/proc/self/status").ok().and_then(|status| {
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
            CpuSet::parse(list).ok()
        });
        let cores_given = cores.is_some();
        let default_cores = match (&allowed, &online) {
            (Some(allowed), Some(online)) => Some(allowed.intersection(online)),
            (Some(allowed), None) => Some(allowed.clone()),
            (None, online) => online.clone(),
        };
        let cores = cores.or(default_cores).unwrap_or_default();
        let shards = shards.unwrap_or(cores.len()).max(1);
        Context {
            host,
            cores,
            cores_given,
            online,
            online_error,
            allowed,
            shards,
        }
    }
}
