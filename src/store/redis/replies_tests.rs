use super::*;

fn shared() -> RedisLink {
    crate::store::redis::detached_link()
}

fn reply(resp: &[u8]) -> Value {
    redis::parse_redis_value(resp).expect("valid RESP")
}

#[test]
fn a_transient_error_keeps_the_whole_pipeline_for_a_replay() {
    let s = shared();
    let shape = Shape {
        sizes: vec![1, 2],
        atomic: true,
        wait: false,
    };
    let replies = vec![
        Value::Okay,
        reply(b"+QUEUED\r\n"),
        reply(b"-OOM command not allowed when used memory > 'maxmemory'\r\n"),
        reply(b"+QUEUED\r\n"),
        reply(b"-EXECABORT Transaction discarded because of previous errors.\r\n"),
    ];
    let err = judge(&s, &shape, replies).expect_err("transient");
    assert!(err.contains("OOM"), "{err}");
    assert!(
        s.m()
            .errors_total
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
}

#[test]
fn a_permanent_error_fails_only_its_own_write() {
    let s = shared();
    let shape = Shape {
        sizes: vec![1, 1],
        atomic: false,
        wait: false,
    };
    let replies = vec![
        Value::Int(1),
        reply(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
    ];
    let outcomes = judge(&s, &shape, replies).expect("settled");
    assert_eq!(outcomes[0], Ok(()));
    assert!(matches!(outcomes[1], Err(Error::StoreUnavailable { .. })));
}

#[test]
fn the_wire_judge_reads_resp_in_pieces_and_settles_each_entry() {
    // MULTI, two queued commands, EXEC with two results: one entry of two commands.
    let wire = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$3\r\n1-0\r\n:1\r\n";
    assert_eq!(judge_wire(&[2], true, wire), Ok(1));
    assert_eq!(judge_wire(&[1, 1], false, b":1\r\n:0\r\n"), Ok(2));
    assert!(
        judge_wire(&[1], false, b":1").is_err(),
        "a cut reply is a replay"
    );
    assert!(judge_wire(&[1], false, b"?x\r\n").is_err());
}

#[test]
fn a_reply_of_the_wrong_size_is_a_broken_connection() {
    let s = shared();
    let shape = Shape {
        sizes: vec![2],
        atomic: true,
        wait: false,
    };
    let replies = vec![
        Value::Okay,
        reply(b"+QUEUED\r\n"),
        reply(b"+QUEUED\r\n"),
        Value::Array(vec![Value::Int(1)]),
    ];
    assert!(judge(&s, &shape, replies).is_err());
}
