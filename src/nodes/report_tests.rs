use super::*;
use crate::nodes::membership::NodeRecord;

#[test]
fn ranges_join_runs_and_keep_singles() {
    assert_eq!(ranges(&[]), "");
    assert_eq!(ranges(&[7]), "7");
    assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    let all: Vec<u32> = (0..PARTITIONS).collect();
    assert_eq!(ranges(&all), "0-1023");
    assert_eq!(ranges(&[u32::MAX - 1, u32::MAX]), "4294967294-4294967295");
    assert_eq!(ranges(&[3, 1, 2]), "3,1-2", "out of order: true, if longer");
    assert_eq!(ranges(&[4, 4]), "4,4");
}

#[test]
fn a_lease_value_reads_as_node_and_epoch_and_nothing_else_does() {
    assert_eq!(
        parse_holder("10.0.0.5:7480/00ab12cd34ef5678:42"),
        Some(("10.0.0.5:7480", 42))
    );
    assert_eq!(
        parse_holder("10.0.0.5:7480/00ab12cd34ef5678-0123456789abcdef:42"),
        Some(("10.0.0.5:7480", 42)),
        "with an acquisition's token"
    );
    assert_eq!(parse_holder("n/x:0"), Some(("n", 0)));
    for bad in [
        "",
        ":",
        "/:",
        "n:7",
        "n/x:",
        "n/x:-1",
        "n/x:+1",
        "n/x: 1",
        "/x:1",
        "n/:1",
        "n/x:18446744073709551616",
        "n/x:1a",
        "\u{0}/\u{0}:\u{0}",
        "é/é:é",
    ] {
        assert_eq!(parse_holder(bad), None, "{bad:?}");
    }
}

#[test]
fn no_byte_string_makes_the_parser_panic() {
    // Every short string over a small alphabet that covers the separators.
    let alphabet = ['a', '1', ':', '/', '9', 'é'];
    let mut words = vec![String::new()];
    for _ in 0..5 {
        let next: Vec<String> = words
            .iter()
            .flat_map(|w| alphabet.iter().map(move |c| format!("{w}{c}")))
            .collect();
        for w in &next {
            let _ = parse_holder(w);
        }
        words = next;
    }
}

fn record(id: &str) -> NodeRecord {
    NodeRecord {
        id: id.into(),
        advertise: id.into(),
        started_at_us: 5,
        proof: None,
    }
}

#[test]
fn a_report_groups_leases_by_holder_and_names_the_rest() {
    let mut leases: Vec<Option<String>> = (0..PARTITIONS)
        .map(|p| match p {
            0..10 => Some("a:1/n1:2".into()),
            10..600 => Some("a:1/n1:1".into()),
            600..1000 => Some("b:1/n2:3".into()),
            _ => None,
        })
        .collect();
    leases[1000] = Some("gone:1/n3:9".into());
    leases[1001] = Some("garbage".into());
    let snapshot = Snapshot {
        live: vec![record("a:1"), record("b:1"), record("c:1")],
        leases,
        read_at_us: 11,
    };
    let holdings = Holdings::default();
    holdings
        .routing
        .publish("a:1", &[record("a:1"), record("b:1")]);
    let r = Report::of(&snapshot, "a:1", &holdings, Instant::now());
    assert_eq!(r.live.len(), 3);
    assert_eq!(
        r.live[0].partitions,
        Partitions::of(&(0..600).collect::<Vec<_>>())
    );
    let e = r.live[0].epochs.as_ref().expect("epochs");
    assert_eq!((e.min, e.max), (1, 2));
    assert_eq!(e.partitions[&2], "0-9");
    assert_eq!(e.partitions[&1], "10-599");
    assert_eq!(r.live[1].partitions.ranges, "600-999");
    assert_eq!(r.live[2].partitions.count, 0);
    assert!(r.live[2].epochs.is_none());
    assert_eq!(r.live[2].advertise.as_deref(), Some("c:1"));
    assert_eq!(r.not_live.len(), 1);
    assert_eq!(r.not_live[0].id, "gone:1");
    assert_eq!(r.not_live[0].partitions.ranges, "1000");
    assert_eq!(r.unreadable.ranges, "1001");
    assert_eq!(r.unowned.ranges, "1002-1023");
    assert_eq!(r.this_node.holds.count, 0, "holds nothing");
    assert!(r.this_node.should_own.count > 0);
    let json = serde_json::to_string(&r).expect("serialises");
    let back: Report = serde_json::from_str(&json).expect("reads back");
    assert_eq!(back, r);
}

#[test]
fn a_short_or_empty_snapshot_reads_as_all_unowned() {
    let r = Report::of(
        &Snapshot::default(),
        "a:1",
        &Holdings::default(),
        Instant::now(),
    );
    assert_eq!(r.unowned.count, PARTITIONS);
    assert!(r.live.is_empty() && r.not_live.is_empty());
}
