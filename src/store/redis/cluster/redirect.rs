//! `MOVED` and `ASK`: a cluster node saying that a slot is served elsewhere.
//!
//! `-MOVED <slot> <host>:<port>`: the slot now belongs to that master for good; the client
//! updates its slot map and sends the command there. `-ASK <slot> <host>:<port>`: the slot is
//! being migrated and this key is already (or is to be created) on the target; the client sends
//! `ASKING` and then the command, to that node only, once, and leaves its map as it is. An
//! empty host (`:6380`) means the host of the node that answered.

use super::map::Addr;

/// Where a node sent a command instead of answering it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redirect {
    Moved { slot: u16, to: Addr },
    Ask { slot: u16, to: Addr },
}

/// The redirect that `reply` (from the node at `from`) is, if it is one.
pub fn redirect_of(reply: &redis::Value, from: &Addr) -> Option<Redirect> {
    let redis::Value::ServerError(error) = reply else {
        return None;
    };
    let moved = match error.code() {
        "MOVED" => true,
        "ASK" => false,
        _ => return None,
    };
    let mut words = error.details()?.split_whitespace();
    let slot: u16 = words.next()?.parse().ok()?;
    if slot >= super::slot::SLOTS {
        return None;
    }
    let (host, port) = words.next()?.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let to = Addr {
        host: if host.is_empty() {
            from.host.clone()
        } else {
            host.to_owned()
        },
        port,
    };
    Some(if moved {
        Redirect::Moved { slot, to }
    } else {
        Redirect::Ask { slot, to }
    })
}

#[cfg(test)]
#[path = "redirect_tests.rs"]
mod tests;
