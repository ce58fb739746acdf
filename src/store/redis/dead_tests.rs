use super::*;
use crate::timer::PackedTimer;
use crate::units::UtcMicros;

#[test]
fn burying_moves_the_record_and_names_the_outcome() {
    let t = PackedTimer::with_meta("shop", "o1", b"M", b"{\"a\":1}").expect("short");
    let l = DeadLetter {
        timer: &t,
        version: 7,
        fire_at: UtcMicros(9),
        attempts: 3,
        last_status: Some(503),
        last_error: None,
        callback: "http://h/x",
    };
    let [hset, hdel, xadd] = bury(&l, 100);
    let text = |c: &redis::Cmd| String::from_utf8_lossy(&c.get_packed_command()).into_owned();
    let p = partition_of("shop", "o1");
    assert!(text(&hset).contains(&dead_key(p)) && text(&hset).contains("7 9 m1:M {\"a\":1}"));
    assert!(text(&hdel).contains(&layout::timers_key(p)));
    let x = text(&xadd);
    for part in [
        "punctual:dead:{shop}",
        "attempts",
        "last_status",
        "503",
        "http://h/x",
    ] {
        assert!(x.contains(part), "{part} missing in {x:?}");
    }
    assert!(!x.contains("last_error"));
}
