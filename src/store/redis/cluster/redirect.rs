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
mod tests {
    use super::*;

    fn error(resp: &[u8]) -> redis::Value {
        redis::parse_redis_value(resp).expect("valid RESP")
    }

    fn addr(host: &str, port: u16) -> Addr {
        Addr {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn moved_and_ask_name_the_slot_and_the_node() {
        let from = addr("10.0.0.1", 7000);
        assert_eq!(
            redirect_of(&error(b"-MOVED 3999 127.0.0.1:6381\r\n"), &from),
            Some(Redirect::Moved {
                slot: 3999,
                to: addr("127.0.0.1", 6381)
            })
        );
        assert_eq!(
            redirect_of(&error(b"-ASK 12 [::1]:7002\r\n"), &from),
            Some(Redirect::Ask {
                slot: 12,
                to: addr("::1", 7002)
            })
        );
        // An empty host is the host that answered.
        assert_eq!(
            redirect_of(&error(b"-MOVED 1 :7005\r\n"), &from),
            Some(Redirect::Moved {
                slot: 1,
                to: addr("10.0.0.1", 7005)
            })
        );
    }

    #[test]
    fn other_errors_and_malformed_redirects_are_not_redirects() {
        let from = addr("h", 1);
        for wire in [
            &b"-ERR MOVED 1 h:2\r\n"[..],
            b"-MOVED\r\n",
            b"-MOVED 16384 h:2\r\n",
            b"-MOVED x h:2\r\n",
            b"-ASK 1 h\r\n",
            b"-ASK 1 h:99999\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            b"+MOVED 1 h:2\r\n",
        ] {
            assert_eq!(redirect_of(&error(wire), &from), None, "{wire:?}");
        }
    }
}
