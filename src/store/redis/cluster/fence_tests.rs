use super::*;

#[test]
fn a_key_outside_the_partition_slot_is_refused() {
    let hset = redis::cmd("HSET").arg("x").arg("f").arg("v").clone();
    let own = layout::timers_key(7);
    assert!(fenced(7, "n:1", &[&own], std::slice::from_ref(&hset)).is_ok());
    let err = fenced(7, "n:1", &["punctual:fired:{shop}"], &[hset]).expect_err("foreign");
    assert!(
        matches!(err, FenceError::ForeignKey { partition: 7, .. }),
        "{err}"
    );
    assert_eq!(
        fenced(7, "n:1", &[&own], &[]).err(),
        Some(FenceError::Empty)
    );
}

#[test]
fn the_write_is_routed_to_the_partition_slot_with_its_commands_flattened() {
    let own = layout::timers_key(9);
    let cmds = [
        redis::cmd("HSET")
            .arg(&own)
            .arg("t/k")
            .arg("1 2 {}")
            .clone(),
        redis::cmd("HDEL").arg(&own).arg("t/j").clone(),
    ];
    let r = fenced(9, "node-a:4", &[&own], &cmds).expect("built");
    assert_eq!(r.slot, partition_slot(9));
    let args: Vec<Vec<u8>> = r
        .cmd
        .args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(b.to_vec()),
            redis::Arg::Cursor => None,
        })
        .collect();
    let text: Vec<String> = args[2..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(
        text,
        [
            "2",
            &layout::lease_key(9),
            &own,
            "node-a:4",
            "2",
            "4",
            "HSET",
            &own,
            "t/k",
            "1 2 {}",
            "3",
            "HDEL",
            &own,
            "t/j"
        ]
    );
}
