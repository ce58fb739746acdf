use super::*;

fn feed(r: &mut ReplyReader, bytes: &[u8]) {
    let space = r.space();
    space[..bytes.len()].copy_from_slice(bytes);
    r.filled(bytes.len());
}

#[test]
fn replies_split_across_reads_resume_where_they_stopped() {
    let wire = b"+OK\r\n*2\r\n$5\r\nhello\r\n:42\r\n-ERR boom\r\n";
    for cut in 1..wire.len() {
        let mut r = ReplyReader::default();
        let mut got = Vec::new();
        for part in [&wire[..cut], &wire[cut..]] {
            feed(&mut r, part);
            while let Some(v) = r.next_value().expect("valid RESP") {
                got.push(v);
            }
        }
        assert_eq!(got.len(), 3, "cut at {cut}: {got:?}");
        assert_eq!(got[0], Value::Okay);
        assert_eq!(
            got[1],
            Value::Array(vec![Value::BulkString(b"hello".to_vec()), Value::Int(42)])
        );
        assert!(matches!(&got[2], Value::ServerError(e) if e.code() == "ERR"));
    }
}

#[test]
fn garbage_is_a_protocol_error_not_a_panic() {
    let mut r = ReplyReader::default();
    feed(&mut r, b"?what\r\n");
    assert!(matches!(r.next_value(), Err(ConnError::Protocol(_))));
}
