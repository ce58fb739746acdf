//! Partition leases: which node may write for a partition, until when, under which epoch.
//!
//! # In Redis
//!
//! Partition p's lease is the key `punctual:{pN}:lease` holding
//! `<node>/<nonce>-<token>:<epoch>` with a TTL (3 s by default), in p's own slot beside its
//! data. `<node>/<nonce>` names the process incarnation ([`incarnation`]): a restarted node
//! writes under another nonce. `<token>` is drawn afresh for each acquisition ([`token`]). An
//! acquisition is a script that, only if the key is absent or holds this incarnation's own
//! value, `INCR`s `punctual:{pN}:epoch` (never deleted, so an epoch is never handed out twice
//! while the key survives) and sets the lease to `<node>/<nonce>-<token>:<new epoch>` with
//! the TTL. A
//! renewal (about every second) resets the TTL only if the value is still the renewer's; a
//! release deletes it only if it is. Every write for p is wrapped in the fence
//! (`store::redis::cluster::fence`), which checks the same value on the same master.
//!
//! # Through a failover
//!
//! Redis replicates asynchronously: an acquisition acknowledged by a master that dies before
//! its replica read it is lost with the `INCR`, and the promoted replica could hand the same
//! epoch out again. Two guards: with `--redis-wait-replicas` ≥ 1 the client ends each
//! pipeline with `WAIT` and asks an unconfirmed acquisition again (it then finds its own
//! value and takes a new epoch; it is never answered "taken" by itself), so an acquisition
//! counts only once a replica has it; and the token makes the values of two acquisitions
//! differ even under one epoch (the nonce alone would tell two incarnations apart, not two
//! acquisitions of one process), so a write fenced by one is never accepted under the
//! other's lease.
//!
//! # On the node
//!
//! A node never acts on a lease it may have lost. Each [`Lease`] carries a local deadline on
//! the monotonic clock: the time the acquisition or the last successful renewal was *sent*,
//! plus the TTL, less a drift margin ([`LeaseConfig::drift`], a tenth of the TTL by default).
//! Redis started counting the TTL no earlier than the send, so as long as the master's clock
//! runs no more than the margin faster than ours over one TTL, the key outlives the local
//! deadline: past it, the node stops ([`Lease::fence`] refuses locally, before sending
//! anything), whether or not Redis still has the key. A renewal that finds the value changed
//! or gone means the lease is lost now, and a fenced write refused with `FENCED` means the
//! same: in both cases the node drops the partition at once.
//!
//! | event | what the node does |
//! |---|---|
//! | acquire answered `taken by X` | leaves the partition to X (or waits for X's lease to lapse) |
//! | renew answered `lost` | drops the partition at once |
//! | local deadline passed (renewals did not get through) | acts on nothing of the partition; tries to renew, which answers held or lost |
//! | a fenced write answered `FENCED` | drops the partition at once |
//! | planned stop | stops accepting, flushes, releases: the next owner need not wait a TTL |

use crate::store::redis::cluster::fence::{self, FenceError};
use crate::store::redis::cluster::{ClusterClient, ClusterError, Routed};
use crate::store::redis::layout::{epoch_key, lease_key};
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The lease's TTL and the margin for clock drift.
#[derive(Clone, Copy, Debug)]
pub struct LeaseConfig {
    /// How long a lease lasts in Redis without a renewal.
    pub ttl: Duration,
    /// Taken off the TTL for the local deadline (see the module doc).
    pub drift: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig::with_ttl(Duration::from_secs(3))
    }
}

impl LeaseConfig {
    /// A TTL, with a tenth of it as the drift margin.
    pub fn with_ttl(ttl: Duration) -> LeaseConfig {
        LeaseConfig {
            ttl,
            drift: ttl / 10,
        }
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().max(1) as u64
    }

    /// The local deadline of a lease whose acquisition or renewal was sent at `sent`.
    fn deadline(&self, sent: Instant) -> Instant {
        sent + self.ttl.saturating_sub(self.drift)
    }
}

/// A lease this node holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub partition: u32,
    pub epoch: u64,
    /// `<node>/<nonce>-<token>:<epoch>`: the lease key's value while this node holds it.
    holder: Arc<str>,
    deadline: Instant,
    /// The same deadline on `CLOCK_BOOTTIME` (`None` where that clock cannot be read): the
    /// monotonic clock stops while a virtual machine is suspended, the boot clock does not, so
    /// a node that resumes past its leases finds them lapsed at once (see [`Lease::valid_at`]).
    boot_deadline: Option<Duration>,
}

impl Lease {
    /// The lease key's value while this lease holds.
    /// Shared, so that every write fenced by it takes a reference, not a copy.
    pub fn holder_shared(&self) -> Arc<str> {
        self.holder.clone()
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Past this instant the node must not act on the partition.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// A lease of `partition` under epoch 1 valid until `deadline`, for tests of what holds
    /// leases.
    #[cfg(test)]
    pub(crate) fn until(partition: u32, deadline: Instant) -> Lease {
        Lease::under(partition, 1, deadline)
    }

    /// [`Lease::until`] under `epoch` (holder `n:<epoch>`).
    #[cfg(test)]
    pub(crate) fn under(partition: u32, epoch: u64, deadline: Instant) -> Lease {
        Lease {
            partition,
            epoch,
            holder: format!("n:{epoch}").into(),
            deadline,
            boot_deadline: None,
        }
    }

    /// A lease acquired under `epoch` with the value `holder`, its acquisition sent at `sent`.
    pub(crate) fn granted(
        partition: u32,
        epoch: u64,
        holder: &str,
        cfg: LeaseConfig,
        sent: Instant,
    ) -> Lease {
        Lease {
            partition,
            epoch,
            holder: holder.into(),
            deadline: cfg.deadline(sent),
            boot_deadline: boot_deadline(cfg, sent),
        }
    }

    /// Renewed by a call sent at `sent`: held for another TTL (less the margin) from then.
    pub(crate) fn renewed_at(&mut self, cfg: LeaseConfig, sent: Instant) {
        self.deadline = cfg.deadline(sent);
        self.boot_deadline = boot_deadline(cfg, sent);
    }

    /// Whether the node may still act on the partition at `now`: before its deadline on the
    /// monotonic clock and, read now, on the boot clock. A suspended virtual machine's
    /// monotonic clock stood still while Redis's TTL ran on: on resuming, the monotonic
    /// deadline still lies ahead, the boot clock's has passed, and the lease is not acted on
    /// (the loop then tells it lost and acquires it afresh).
    pub fn valid_at(&self, now: Instant) -> bool {
        self.valid_at_boot(now, boottime())
    }

    /// [`Lease::valid_at`] with the boot clock's reading given (`None`: not checked).
    pub fn valid_at_boot(&self, now: Instant, boot: Option<Duration>) -> bool {
        let boot_ok = match (self.boot_deadline, boot) {
            (Some(deadline), Some(now)) => now < deadline,
            _ => true,
        };
        now < self.deadline && boot_ok
    }

    /// The lease is known lost at `at` (a renewal or a fenced write found another value in
    /// Redis): whatever the local deadline said, it is not acted on from then on.
    pub(crate) fn lost_at(&mut self, at: Instant) {
        self.deadline = at.min(self.deadline);
    }

    /// `commands` (touching `keys`, all in the partition's slot) as one fenced write, or
    /// [`LeaseError::Expired`] without sending anything once the local deadline has passed.
    pub fn fence(
        &self,
        now: Instant,
        keys: &[&str],
        commands: &[redis::Cmd],
    ) -> Result<Routed, LeaseError> {
        if !self.valid_at(now) {
            return Err(LeaseError::Expired {
                partition: self.partition,
                epoch: self.epoch,
            });
        }
        Ok(fence::fenced(self.partition, &self.holder, keys, commands)?)
    }
}

/// `CLOCK_BOOTTIME` now (it counts a suspend, which `CLOCK_MONOTONIC` does not); `None` if it
/// cannot be read. Through the vDSO: tens of nanoseconds.
pub fn boottime() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, which only
    // writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    (rc == 0).then(|| {
        Duration::new(
            ts.tv_sec.max(0) as u64,
            ts.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    })
}

/// The boot clock's deadline of a lease sent at `sent`: the boot clock at the send (read now,
/// less the monotonic time since) plus the TTL less the margin.
fn boot_deadline(cfg: LeaseConfig, sent: Instant) -> Option<Duration> {
    let at_send = boottime()?.checked_sub(sent.elapsed())?;
    Some(at_send + cfg.ttl.saturating_sub(cfg.drift))
}

/// What an acquisition found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    Held(Lease),
    /// Another holder's value (`<node>/<nonce>-<token>:<epoch>`).
    Taken(String),
}

/// Why a lease operation failed (the partition's lease is then unknown: act as if lost).
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("a lease script answered {0}")]
    Reply(String),
    #[error("partition {partition}'s lease (epoch {epoch}) is past its local deadline")]
    Expired { partition: u32, epoch: u64 },
    #[error(transparent)]
    Fence(#[from] FenceError),
}

/// Takes the lease if the key is absent, or if it holds this incarnation's own value under
/// some token and epoch (an acquisition asked again after its `WAIT` went unconfirmed or its
/// reply was lost, or a lease of ours whose release did not get through): then under a new
/// epoch and this acquisition's token (`ARGV[3]`), never the value found, since writes may
/// still be queued under that one.
const ACQUIRE: &str = r"
local mine = ARGV[1] .. '-'
local held = redis.call('GET', KEYS[1])
if held and not (string.sub(held, 1, #mine) == mine and string.match(string.sub(held, #mine + 1), '^%x+:%d+$')) then
  return {0, held}
end
local epoch = redis.call('INCR', KEYS[2])
local value = mine .. ARGV[3] .. ':' .. epoch
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {epoch, value}
";

/// The prefix of every lease value this process incarnation writes for `node`:
/// `<node>/<nonce>`, the nonce (16 hex digits) drawn from the process's random hash keys
/// (seeded by the operating system), the wall clock and the process id. A restarted process
/// with the same node id draws another, so the lease values of two incarnations never
/// coincide, even under an epoch handed out twice (an `INCR` lost in a failover): a write
/// queued by one is never accepted under the other's lease, and an acquisition recognises
/// only its own incarnation's lease.
pub fn incarnation(node: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(since_epoch);
    h.write_u32(std::process::id());
    format!("{node}/{:016x}", h.finish())
}

/// A token for one acquisition: 16 hex digits, from the process's random hash keys (seeded
/// by the operating system, and stepped for each `RandomState`), a counter and the clock. Two
/// acquisitions of one process never share one (the counter), so an epoch handed out twice
/// to the same process (a failover lost its `INCR`) still gives two lease values.
pub fn token() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWN: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(DRAWN.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:016x}", h.finish())
}

const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// Tries to acquire each of `partitions` for the incarnation `holder` (its lease values are
/// `<holder>-<token>:<epoch>`, a token of its own per partition and call; a node passes
/// [`incarnation`]), in one pipeline per master. With a
/// client that waits for replicas (`wait_replicas` ≥ 1) an acquisition counts only once the
/// replicas confirmed it: unconfirmed, it is asked again (and recognises its own lease, taken
/// under a new epoch) until the client gives up, and then the call fails and nothing is held.
pub async fn acquire(
    client: &mut ClusterClient,
    holder: &str,
    partitions: &[u32],
    cfg: LeaseConfig,
) -> Result<Vec<Acquired>, LeaseError> {
    let commands: Vec<Routed> = partitions
        .iter()
        .map(|&p| {
            let cmd = redis::cmd("EVAL")
                .arg(ACQUIRE)
                .arg(2)
                .arg(lease_key(p))
                .arg(epoch_key(p))
                .arg(holder)
                .arg(cfg.ttl_ms())
                .arg(token())
                .clone();
            Routed::new(lease_key(p), cmd)
        })
        .collect();
    let sent = Instant::now();
    let replies = client.pipeline(&commands).await?;
    partitions
        .iter()
        .zip(replies)
        .map(|(&partition, reply)| match reply {
            Value::Array(parts) => match &parts[..] {
                [Value::Int(0), Value::BulkString(held)] => {
                    Ok(Acquired::Taken(String::from_utf8_lossy(held).into_owned()))
                }
                [Value::Int(epoch), Value::BulkString(holder)] if *epoch > 0 => {
                    Ok(Acquired::Held(Lease::granted(
                        partition,
                        *epoch as u64,
                        &String::from_utf8_lossy(holder),
                        cfg,
                        sent,
                    )))
                }
                _ => Err(LeaseError::Reply(format!("{parts:?}"))),
            },
            other => Err(LeaseError::Reply(format!("{other:?}"))),
        })
        .collect()
}

/// Renews `leases`; each one still held gets a new deadline, and its entry in the answer is
/// `true`; `false` means lost (the value changed or expired): drop the partition at once.
pub async fn renew(
    client: &mut ClusterClient,
    leases: &mut [Lease],
    cfg: LeaseConfig,
) -> Result<Vec<bool>, LeaseError> {
    let commands: Vec<Routed> = leases
        .iter()
        .map(|l| holder_script(RENEW, l).arg(cfg.ttl_ms()).clone())
        .zip(leases.iter())
        .map(|(cmd, l)| Routed::new(lease_key(l.partition), cmd))
        .collect();
    let sent = Instant::now();
    let replies = client.pipeline(&commands).await?;
    let mut out = Vec::with_capacity(leases.len());
    for (lease, reply) in leases.iter_mut().zip(replies) {
        let held = matches!(reply, Value::Int(1));
        if held {
            lease.renewed_at(cfg, sent);
        } else {
            // Whatever the local deadline said, the lease is gone: act on nothing more.
            lease.lost_at(sent);
        }
        out.push(held);
    }
    Ok(out)
}

/// Releases `leases` (a planned handoff); a lease no longer held is left alone.
pub async fn release(client: &mut ClusterClient, leases: &[Lease]) -> Result<(), LeaseError> {
    let commands: Vec<Routed> = leases
        .iter()
        .map(|l| Routed::new(lease_key(l.partition), holder_script(RELEASE, l)))
        .collect();
    client.pipeline(&commands).await?;
    Ok(())
}

fn holder_script(body: &str, lease: &Lease) -> redis::Cmd {
    redis::cmd("EVAL")
        .arg(body)
        .arg(1)
        .arg(lease_key(lease.partition))
        .arg(lease.holder.as_ref())
        .clone()
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
