//! The Redis Cluster slot of a key: CRC16/XMODEM of the key (or of its hash tag) mod 16,384,
//! as the Redis Cluster specification defines it.
//!
//! A hash tag is the part between the first `{` and the first `}` after it, when that part is
//! not empty: `punctual:{p7}:timers` and `punctual:{p7}:lease` hash `p7` alone, so all of a
//! partition's keys share one slot and a script may touch them together. `foo{}{bar}` hashes
//! the whole key (the first tag is empty); `foo{{bar}}` hashes `{bar`.

/// Slots in a Redis Cluster; fixed by the specification.
pub const SLOTS: u16 = 16_384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection): the function the
/// specification names, from a crate that forbids `unsafe` code.
const XMODEM: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The slot that `key` lives in.
pub fn slot_of(key: &[u8]) -> u16 {
    XMODEM.checksum(hashed_part(key)) % SLOTS
}

/// The slot of partition `partition`'s keys (hash tag `{p<N>}`, see `layout`).
pub fn partition_slot(partition: u32) -> u16 {
    slot_of(format!("{{p{partition}}}").as_bytes())
}

/// The bytes the slot is computed over: the hash tag when the key has a non-empty one.
fn hashed_part(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let rest = &key[open + 1..];
    match rest.iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &rest[..len],
        _ => key,
    }
}

#[cfg(test)]
#[path = "slot_tests.rs"]
mod tests;
