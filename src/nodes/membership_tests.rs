use super::*;

#[test]
fn a_record_proves_the_secret_only_as_written_and_only_that_secret() {
    let secret = b"0123456789abcdef0123456789abcdef";
    let mut r = NodeRecord {
        id: "10.0.0.5:7480".into(),
        advertise: "10.0.0.5:7480".into(),
        started_at_us: 42,
        proof: None,
    };
    assert!(!proven(secret, &r), "no proof");
    r.proof = prove(secret, &r);
    assert!(proven(secret, &r));
    assert!(!proven(b"another secret, just as long....", &r));
    let json = serde_json::to_string(&r).expect("serialises");
    let back: NodeRecord = serde_json::from_str(&json).expect("parses");
    assert!(proven(secret, &back), "the proof survives Redis");
    let mut moved = r.clone();
    moved.advertise = "203.0.113.9:7480".into();
    assert!(
        !proven(secret, &moved),
        "a copied proof under another address"
    );
    r.proof = Some("not hex".into());
    assert!(!proven(secret, &r));
    let old: NodeRecord = serde_json::from_str(r#"{"id":"a","advertise":"a","started_at_us":1}"#)
        .expect("a record without a proof still parses");
    assert_eq!(old.proof, None);
}
