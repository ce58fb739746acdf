use super::*;

fn record(id: &str) -> NodeRecord {
    NodeRecord {
        id: id.into(),
        advertise: id.into(),
        started_at_us: 0,
        proof: None,
    }
}

#[test]
fn each_partition_goes_to_its_rendezvous_owner_and_this_node_is_me() {
    let live = [record("10.0.0.2:7480"), record("10.0.0.1:7480")];
    let ids = ["10.0.0.1:7480", "10.0.0.2:7480"];
    let r = Routing::of(ids[0], &live);
    for p in 0..PARTITIONS {
        let want = rendezvous::owner(p, &ids);
        match r.owner(p) {
            Owner::Me => assert_eq!(want, Some(ids[0])),
            Owner::Other(a) => assert_eq!(want, Some(&**a)),
            Owner::Unknown => panic!("partition {p} has no owner"),
        }
    }
    assert_eq!(r.owner(PARTITIONS), Owner::Unknown, "out of range");
}

#[test]
fn an_empty_view_routes_nothing_and_a_new_live_set_replaces_the_view() {
    let t = RoutingTable::default();
    assert_eq!(t.current().owner(0), Owner::Unknown);
    let one = [record("a:1")];
    t.publish("a:1", &one);
    let first = t.current();
    assert!((0..PARTITIONS).all(|p| first.owner(p) == Owner::Me));
    t.publish("a:1", &one);
    assert!(
        Arc::ptr_eq(&first, &t.current()),
        "same live set, same view"
    );
    t.publish("a:1", &[record("a:1"), record("b:1")]);
    let two = t.current();
    assert!((0..PARTITIONS).any(|p| matches!(two.owner(p), Owner::Other(a) if &**a == "b:1")));
    // A node not in the live set owns nothing.
    let outside = Routing::of("c:1", &[record("a:1")]);
    assert!((0..PARTITIONS).all(|p| outside.owner(p) != Owner::Me));
}
