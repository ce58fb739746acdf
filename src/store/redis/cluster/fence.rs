//! Fenced writes: a partition's writes wrapped in one script that first checks, on the
//! partition's own slot, that the writer still holds the partition's lease.
//!
//! ```text
//! EVAL <FENCED> 1+k  punctual:{pN}:lease <key>…  <node>/<nonce>-<token>:<epoch> <n> <argc> <arg>… …
//! ```
//!
//! The script compares the lease key's value with the `<node>/<nonce>-<token>:<epoch>` the writer believes it
//! holds. Equal: it runs the `n` commands in order (with `redis.pcall`, so that, as in
//! `MULTI`/`EXEC`, one command's error is its own reply and the others still run) and returns
//! their replies as an array. Not equal (another node acquired the lease, so the epoch moved
//! on, or the lease expired and nobody holds it): nothing runs, and the reply is the error
//! `FENCED`, which the writer takes as "drop this partition now".
//!
//! Why this fences: Redis runs a script atomically on the master that serves the slot, and
//! the lease key lives in that slot, so no acquisition can fall between the check and the
//! writes. A node paused for longer than its lease (GC, SIGSTOP, a partitioned network) and
//! woken with writes queued finds the lease's value changed and writes nothing. What it rests
//! on: the lease key surviving with the data (same slot, same master, same replication), and
//! the epoch never repeating (`INCR` on a key that is never deleted). A failover that loses
//! the last writes of the old master can lose a lease renewal or an acquisition too; the
//! epoch counter replicated before it is what keeps an epoch from being handed out twice
//! (see `docs/SCALING.md` for the replication caveat and `WAIT`).
//!
//! [`ordered`] is the same script without the check, for a store that holds no lease (a single
//! node owns every partition): it keeps what the client alone cannot, a partition's writes in
//! their order across redirects, in one atomic step.
//!
//! Every key a wrapped command touches must be in the partition's slot (declared in `KEYS`,
//! as Redis Cluster requires of a script); [`fenced`] refuses any other.

use super::client::Routed;
use super::slot::{partition_slot, slot_of};
use crate::store::redis::layout;

/// The error code of a write refused because the lease is not the writer's.
pub const FENCED: &str = "FENCED";

/// The lease check that opens a fenced write.
macro_rules! check {
    () => {
        r"
local held = redis.call('GET', KEYS[1])
if held ~= ARGV[1] then
  return redis.error_reply('FENCED partition lease is ' .. (held or 'free') .. ', not ' .. ARGV[1])
end
"
    };
}

/// Runs the `n` wrapped commands in order and returns their replies.
macro_rules! body {
    () => {
        r"
local n = tonumber(ARGV[2])
local at = 3
local out = {}
for c = 1, n do
  local argc = tonumber(ARGV[at])
  local args = {}
  for j = 1, argc do
    args[j] = ARGV[at + j]
  end
  out[c] = redis.pcall(unpack(args))
  at = at + argc + 1
end
return out
"
    };
}

const FENCED_SCRIPT: &str = concat!(check!(), body!());

/// The same commands, in order, without the lease check: for a store that holds no lease (a
/// single node, which owns every partition). The arguments are laid out as for a fenced
/// write, so the two differ in the check alone.
const ORDERED_SCRIPT: &str = body!();

/// Why a fenced write could not be built.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    #[error("key {key:?} is in slot {slot}, not partition {partition}'s slot {expected}")]
    ForeignKey {
        key: String,
        slot: u16,
        partition: u32,
        expected: u16,
    },
    #[error("a fenced write needs at least one command")]
    Empty,
}

/// `commands`, which touch `keys` (all of partition `partition`'s slot), run only while the
/// partition's lease holds `holder` (`<node>/<nonce>-<token>:<epoch>`). Its reply is an array of the commands'
/// replies, or the error [`FENCED`].
pub fn fenced(
    partition: u32,
    holder: &str,
    keys: &[&str],
    commands: &[redis::Cmd],
) -> Result<Routed, FenceError> {
    script(partition, Some(holder), keys, commands)
}

/// `commands`, which touch `keys` (all of partition `partition`'s slot), run in order as one
/// script, whoever holds the lease: the writes of a node that owns every partition. Its reply
/// is an array of the commands' replies.
pub fn ordered(
    partition: u32,
    keys: &[&str],
    commands: &[redis::Cmd],
) -> Result<Routed, FenceError> {
    script(partition, None, keys, commands)
}

fn script(
    partition: u32,
    holder: Option<&str>,
    keys: &[&str],
    commands: &[redis::Cmd],
) -> Result<Routed, FenceError> {
    if commands.is_empty() {
        return Err(FenceError::Empty);
    }
    let expected = partition_slot(partition);
    if let Some(key) = keys.iter().find(|k| slot_of(k.as_bytes()) != expected) {
        return Err(FenceError::ForeignKey {
            key: (*key).to_owned(),
            slot: slot_of(key.as_bytes()),
            partition,
            expected,
        });
    }
    let mut eval = redis::cmd("EVAL");
    eval.arg(holder.map_or(ORDERED_SCRIPT, |_| FENCED_SCRIPT))
        .arg(1 + keys.len())
        .arg(layout::lease_key(partition));
    for k in keys {
        eval.arg(*k);
    }
    eval.arg(holder.unwrap_or("")).arg(commands.len());
    for c in commands {
        let args: Vec<&[u8]> = c
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(bytes) => Some(bytes),
                redis::Arg::Cursor => None,
            })
            .collect();
        eval.arg(args.len());
        for a in args {
            eval.arg(a);
        }
    }
    Ok(Routed {
        slot: expected,
        cmd: eval,
    })
}

/// Whether `reply` is the fencing refusal.
pub fn is_fenced(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::ServerError(e) if e.code() == FENCED)
}

#[cfg(test)]
#[path = "fence_tests.rs"]
mod tests;
