use super::*;

#[test]
fn a_message_decodes_as_it_was_encoded() {
    let m = Message {
        state: MessageState::Leased,
        receive_count: 3,
        lease: 77,
        fire_at_us: 1,
        fired_at_us: 2,
        queued_at_us: 3,
    };
    let meta = m.encode();
    assert_eq!(meta.len(), MESSAGE_LEN);
    assert_eq!(Message::decode(&meta), Some(m));
}

#[test]
fn other_metadata_is_not_a_message() {
    assert_eq!(Message::decode(b""), None);
    assert_eq!(Message::decode(&[b'W'; MESSAGE_LEN]), None);
    let mut bad_state = Message::queued(1, 2).encode();
    bad_state[2] = 9;
    assert_eq!(Message::decode(&bad_state), None);
    let mut long = Message::queued(1, 2).encode();
    long.push(0);
    assert_eq!(Message::decode(&long), None);
}

#[test]
fn a_receipt_opens_for_its_tenant_only() {
    let q = PullQueues::new([("a".to_string(), 3)]);
    let r = q.receipt("a", "order-1", 5, 9);
    let of = q.open("a", &r).expect("its own receipt");
    assert_eq!(
        of,
        ReceiptOf {
            key: "order-1".into(),
            version: 5,
            lease: 9
        }
    );
    assert_eq!(q.open("b", &r), None, "another tenant's receipt is unknown");
}

#[test]
fn a_forged_or_mangled_receipt_is_unknown() {
    use base64::Engine;
    let q = PullQueues::new::<u32>([]);
    let r = q.receipt("a", "k", 5, 9);
    let mut raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&r)
        .expect("base64");
    // The lease changed, the tag left as it was.
    let at = 2 + 1 + 8;
    raw[at] ^= 1;
    let forged = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw);
    assert_eq!(q.open("a", &forged), None);
    assert_eq!(q.open("a", ""), None);
    assert_eq!(q.open("a", "!!"), None);
    assert_eq!(q.open("a", &r[..r.len() - 2]), None);
    // Another process's key: the same names, another tag.
    let other = PullQueues::new::<u32>([]);
    assert_eq!(other.open("a", &r), None);
}

#[test]
fn a_redriven_message_is_delayed_with_its_receives_counted_afresh() {
    let mut m = Message::queued(1, 2);
    m.receive_count = 10;
    let meta = redriven(&m.encode(), 50).expect("a message");
    let back = Message::decode(&meta).expect("decodes");
    assert_eq!(back.state, MessageState::Delayed);
    assert_eq!(back.receive_count, 0);
    assert_eq!(back.queued_at_us, 50);
    assert_eq!(redriven(b"", 50), None);
}

#[test]
fn a_ready_message_wakes_its_own_tenants_receives_only() {
    let q = PullQueues::new([("a".to_string(), 3), ("b".to_string(), 3)]);
    q.bump("a");
    q.bump("a");
    q.bump("none");
    assert_eq!((q.ready_count("a"), q.ready_count("b")), (2, 0));
    assert_eq!(q.ready_count("none"), 0);
    assert_eq!(
        (q.max_receives("b"), q.max_receives("none")),
        (Some(3), None)
    );
}
