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
