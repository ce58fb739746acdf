use super::*;

fn words(c: &redis::Cmd) -> Vec<String> {
    c.args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
            redis::Arg::Cursor => None,
        })
        .collect()
}

#[test]
fn a_stream_entry_diverted_into_the_relay_reads_back_whole() {
    let xadd = redis::cmd("XADD")
        .arg("punctual:fired:{shop}")
        .arg("MAXLEN")
        .arg("~")
        .arg(1000)
        .arg("*")
        .arg("key")
        .arg("a")
        .arg("version")
        .arg(7)
        .clone();
    let (to_relay, r) = divert(&xadd, 12).expect("an XADD");
    assert_eq!(
        words(&to_relay),
        [
            "XADD",
            "punctual:{p12}:relay",
            "*",
            "to",
            "punctual:fired:{shop}",
            "opts",
            "MAXLEN ~ 1000",
            "key",
            "a",
            "version",
            "7"
        ]
    );
    let fields: Vec<Vec<u8>> = words(&to_relay)[3..]
        .iter()
        .map(|w| w.as_bytes().to_vec())
        .collect();
    assert_eq!(undivert(12, &fields), Some(r.clone()));
    assert_eq!(tag(&r.stream), b"{shop}");
    assert_eq!(marker(&r, b"5-0"), b"punctual:relayed:{shop}:p12:5-0");
    assert!(divert(&redis::cmd("HSET").arg("k").arg("f").clone(), 1).is_none());
    assert!(
        divert(&redis::cmd("XADD").arg("k").arg("f").clone(), 1).is_none(),
        "no *"
    );
    for bad in [&[][..], &[b"to".to_vec()][..]] {
        assert!(undivert(1, bad).is_none());
    }
    let short = [b"to".to_vec(), b"s".to_vec(), b"opts".to_vec()];
    assert!(undivert(1, &short).is_none(), "no options' value");
}
