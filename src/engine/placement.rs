//! Where the shards run: which core each shard is pinned to.

pub use crate::cpus::available_cores;
use crate::error::{Error, Result};

/// How a shard gets its core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pinning {
    /// Shard `i` is pinned to the `i`-th of these CPU ids.
    Cores(Vec<usize>),
    /// Shard `i` is pinned to the `i`-th CPU the process may run on.
    Auto,
    /// No pinning: the kernel places the threads (for comparisons and shared hosts).
    None,
}

/// The CPU of each shard under `pinning` (empty: no pinning), or why that cannot be.
pub(super) fn resolve(pinning: &Pinning, shards: usize) -> Result<Vec<usize>> {
    match pinning {
        Pinning::None => Ok(Vec::new()),
        Pinning::Cores(cores) => {
            if cores.len() != shards {
                return Err(Error::Config(format!(
                    "{} shards need {} cores, {} given",
                    shards,
                    shards,
                    cores.len()
                )));
            }
            let available = available_cores();
            if let Some(c) = cores.iter().find(|c| !available.contains(c)) {
                return Err(Error::Config(format!(
                    "core {c} is not available to this process (available: {available:?})"
                )));
            }
            Ok(cores.clone())
        }
        Pinning::Auto => {
            let available = available_cores();
            if shards > available.len() {
                return Err(Error::Config(format!(
                    "{} pinned shards need as many cores; this process may use {}",
                    shards,
                    available.len()
                )));
            }
            Ok(available[..shards].to_vec())
        }
    }
}
