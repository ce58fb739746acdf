use super::*;

#[test]
fn the_version_a_record_write_carries_is_read_back_and_other_commands_carry_none() {
    let rec = Arg::Record {
        version: 1_765_000_000_000_123,
        fire_at_us: 9,
        meta: b"x",
        payload: b"{} y",
    };
    let hset = redis::cmd("HSET")
        .arg(timers_key(3))
        .arg(Arg::Field {
            tenant: "t",
            key: "k",
        })
        .arg(rec)
        .clone();
    assert_eq!(written_version(&hset), Some(1_765_000_000_000_123));
    let hdel = redis::cmd("HDEL").arg(timers_key(3)).arg("t/k").clone();
    assert_eq!(written_version(&hdel), None);
    let odd = redis::cmd("HSET").arg("h").arg("f").arg("v").clone();
    assert_eq!(written_version(&odd), None);
}

#[test]
fn record_round_trips_payload_with_spaces() {
    let r = encode_record(17, 1_700_000_000_000_000, b"", b"{\"a\": 1 }");
    let d = decode_record(&r).expect("valid");
    assert_eq!(
        (d.version, d.fire_at_us, d.meta, d.payload),
        (17, 1_700_000_000_000_000, &b""[..], &b"{\"a\": 1 }"[..])
    );
    let e = decode_record(b"1 2 ").expect("valid");
    assert_eq!((e.version, e.fire_at_us, e.payload), (1, 2, &b""[..]));
    assert_eq!(decode_record(b"x 2 p"), None);
    assert_eq!(decode_record(b"1 2"), None);
}

#[test]
fn record_carries_binary_metadata_and_old_records_still_read() {
    let meta = b"\x00 m:\xff";
    let r = encode_record(3, 9, meta, b"{\"x\": 1}");
    let d = decode_record(&r).expect("valid");
    assert_eq!((d.meta, d.payload), (&meta[..], &b"{\"x\": 1}"[..]));
    let empty_payload = encode_record(3, 9, meta, b"");
    assert_eq!(
        decode_record(&empty_payload).map(|d| d.payload),
        Some(&b""[..])
    );
    // Truncated or lying about its length: malformed, not a panic.
    assert_eq!(decode_record(b"3 9 m10:ab {}"), None);
    assert_eq!(decode_record(b"3 9 mx:ab {}"), None);
    assert_eq!(decode_record(b"3 9 m2:ab{}"), None);
}

#[test]
fn args_write_the_same_bytes_as_the_strings() {
    let packed = |a: &dyn Fn(&mut redis::Cmd)| {
        let mut c = redis::cmd("X");
        a(&mut c);
        c.get_packed_command()
    };
    assert_eq!(
        packed(&|c| {
            c.arg(Arg::Field {
                tenant: "t",
                key: "k",
            })
            .arg(Arg::Record {
                version: 3,
                fire_at_us: 9,
                meta: b"m",
                payload: b"p q",
            });
        }),
        packed(&|c| {
            c.arg(field("t", "k"))
                .arg(encode_record(3, 9, b"m", b"p q"));
        })
    );
    assert_eq!(timers_key_static(42), timers_key(42));
    assert_eq!(timers_key_static(PARTITIONS), "");
}

#[test]
fn field_splits_at_the_first_slash() {
    assert_eq!(
        parse_field(field("t", "k:1").as_bytes()),
        Some(("t", "k:1"))
    );
    assert_eq!(parse_field(b"noslash"), None);
    assert_eq!(timers_key(42), "punctual:{p42}:timers");
}
