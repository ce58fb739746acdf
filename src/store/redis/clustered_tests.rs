//! The store over a cluster: a batch's plan, stream progress across sends, fenced scripts
//! and their replies.

use super::*;
use crate::store::redis::cluster::slot::{partition_slot, slot_of};
use crate::store::redis::layout::timers_key;
use crate::store::redis::outbox::Outbox;
use crate::store::Ack;

/// The holder a fenced script is fenced by: the argument after its keys
/// (`EVAL <script> <n> <n keys> <holder> …`).
fn holder_of(a: &[String]) -> String {
    let n: usize = a[2].parse().expect("a key count");
    a[3 + n].clone()
}

fn args(r: &Routed) -> Vec<String> {
    r.cmd
        .args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
            redis::Arg::Cursor => None,
        })
        .collect()
}

fn outbox() -> Outbox {
    outbox_under(|_| None)
}

/// The test batch, each entry queued under `holder(partition)`.
fn outbox_under(holder: impl Fn(u32) -> Option<Arc<str>>) -> Outbox {
    let mut o = Outbox::new(16, 16, Duration::from_secs(2));
    let hset = |p: u32, f: &str| {
        redis::cmd("HSET")
            .arg(timers_key(p))
            .arg(f)
            .arg("1 2 {}")
            .clone()
    };
    let hdel = |p: u32, f: &str| redis::cmd("HDEL").arg(timers_key(p)).arg(f).clone();
    let xadd = redis::cmd("XADD")
        .arg("punctual:fired:{shop}")
        .arg("*")
        .arg("key")
        .arg("a")
        .clone();
    o.push(hset(7, "shop/a"), None, Ack::None, "shop", holder(7));
    o.push(xadd, Some(hdel(7, "shop/a")), Ack::None, "shop", holder(7));
    o.push(hset(9, "shop/b"), None, Ack::None, "shop", holder(9));
    o.push(hdel(7, "shop/c"), None, Ack::None, "shop", holder(7));
    o
}

/// A script of partition `p` holding entries 0 and 1, fenced by `holder`; `floor`: it ends
/// with the partition's version floor.
fn two_entries(p: u32, holder: &str, floor: bool) -> Group {
    Group {
        partition: p,
        owners: vec![0, 1],
        holder: Some(holder.into()),
        relays: Vec::new(),
        floor,
    }
}

/// Queues an `HDEL` of `field` in partition `p`'s hash under `holder`.
fn push_hdel(o: &mut Outbox, p: u32, field: &str, holder: &str) {
    let hdel = redis::cmd("HDEL").arg(timers_key(p)).arg(field).clone();
    o.push(hdel, None, Ack::None, "shop", Some(Arc::from(holder)));
}

#[test]
fn stream_entries_go_first_and_each_partition_gets_one_ordered_script() {
    let o = outbox();
    let plan = Plan::of(o.batch(0, 100, usize::MAX), false);
    assert_eq!((plan.entries, plan.commands), (4, 5));
    assert_eq!(plan.streams.len(), 1);
    assert_eq!(plan.stream_owners, [1]);
    assert_eq!(plan.streams[0].slot, slot_of(b"punctual:fired:{shop}"));
    let parts: Vec<(u32, Vec<usize>)> = plan
        .groups
        .iter()
        .map(|g| (g.partition, g.owners.clone()))
        .collect();
    assert_eq!(parts, [(7, vec![0, 1, 3]), (9, vec![2])]);
    assert_eq!(plan.scripts[0].slot, partition_slot(7));
    let a = args(&plan.scripts[0]);
    // EVAL <script> <2 keys: lease, timers> <no holder> <3 commands> …, in outbox order.
    assert_eq!(a[2], "2");
    assert_eq!(a[5], "");
    assert_eq!(a[6], "3");
    let names: Vec<&str> = a
        .iter()
        .map(String::as_str)
        .filter(|w| matches!(*w, "HSET" | "HDEL"))
        .collect();
    assert_eq!(names, ["HSET", "HDEL", "HDEL"]);
    assert!(!a[1].contains("FENCED"), "no lease check without holders");
    assert!(plan.unsent.is_empty());
}

/// A batch sent again keeps where its stream entries stood: what was answered or landed
/// stays so (not sent again), entries queued since are added unsent; a plan that no
/// longer starts with what was sent starts over (a repeat, never a gap).
#[test]
fn stream_progress_follows_a_batch_that_grows_and_starts_over_when_it_differs() {
    let at = crate::store::redis::cluster::Addr {
        host: "127.0.0.1".into(),
        port: 7000,
    };
    let mut s = Streamed::default();
    s.follow(&[1, 3]);
    assert!(matches!(s.state[..], [Sent::Unsent, Sent::Unsent]));
    s.state[0] = Sent::Answered(Value::Okay);
    s.state[1] = Sent::Landed {
        at,
        reply: Value::Okay,
    };
    s.follow(&[1, 3, 4]);
    assert!(matches!(
        s.state[..],
        [Sent::Answered(_), Sent::Landed { .. }, Sent::Unsent]
    ));
    s.follow(&[0, 3, 4]);
    assert!(s.state.iter().all(|x| matches!(x, Sent::Unsent)));
    assert_eq!(s.owners, [0, 3, 4]);
}

#[test]
fn with_holders_a_stream_entry_is_written_by_its_partition_s_fenced_script_into_its_relay() {
    let o = outbox_under(|p| Some(Arc::from(format!("node-a:{p}"))));
    let plan = Plan::of(o.batch(0, 100, usize::MAX), true);
    assert!(plan.streams.is_empty(), "nothing goes out unfenced");
    let seven = &plan.groups[0];
    assert_eq!((seven.partition, &seven.owners[..]), (7, &[0, 1, 1, 3][..]));
    assert_eq!(seven.relays.len(), 1);
    assert_eq!(seven.relays[0].0, 1, "the XADD, second in the script");
    assert_eq!(seven.relays[0].1.stream, b"punctual:fired:{shop}");
    let a = args(&plan.scripts[0]);
    assert!(a[1].contains("FENCED"));
    assert!(a.contains(&"punctual:{p7}:relay".to_owned()), "{a:?}");
    assert!(
        a.windows(2)
            .any(|w| w[0] == "to" && w[1] == "punctual:fired:{shop}"),
        "the tenant's stream only as where to relay to: {a:?}"
    );
}

#[test]
fn with_holders_a_partition_is_fenced_by_its_holder_and_an_unheld_one_is_not_sent() {
    let o = outbox_under(|p| (p == 7).then(|| Arc::from(format!("node-a:{p}"))));
    let plan = Plan::of(o.batch(0, 100, usize::MAX), true);
    assert_eq!(plan.groups.len(), 1);
    let a = args(&plan.scripts[0]);
    assert!(a[1].contains("FENCED"), "the fenced script");
    assert_eq!(holder_of(&a), "node-a:7");
    assert_eq!(plan.unsent.len(), 1);
    assert_eq!(
        (plan.unsent[0].partition, &plan.unsent[0].owners[..]),
        (9, &[2][..])
    );
}

/// A write queued under epoch 3 and still unsent when this node lost and re-acquired the
/// partition (epoch 4, and a fresh load that did not see the write) must be fenced by epoch
/// 3, not sent under 4, where it would land behind the load's back.
#[test]
fn each_write_is_fenced_by_the_lease_it_was_queued_under_not_by_a_later_one() {
    let mut o = outbox_under(|_| Some(Arc::from("node-a:3")));
    push_hdel(&mut o, 7, "shop/d", "node-a:4");
    let plan = Plan::of(o.batch(0, 100, usize::MAX), true);
    let mut scripts: Vec<(u32, String, Vec<usize>)> = plan
        .groups
        .iter()
        .zip(&plan.scripts)
        .map(|(g, s)| (g.partition, holder_of(&args(s)), g.owners.clone()))
        .collect();
    scripts.sort();
    assert_eq!(
        scripts,
        [
            (7, "node-a:3".to_string(), vec![0, 1, 1, 3]),
            (7, "node-a:4".to_string(), vec![4]),
            (9, "node-a:3".to_string(), vec![2]),
        ]
    );
    assert!(plan.unsent.is_empty());
}

/// Records each `fenced` call: (partition, holder).
#[derive(Default)]
struct Told(std::sync::Mutex<Vec<(u32, String)>>);

impl Holders for Told {
    fn holder(&self, _: u32) -> Option<Arc<str>> {
        Some("n:1".into())
    }
    fn fenced(&self, partition: u32, holder: &str) {
        if let Ok(mut t) = self.0.lock() {
            t.push((partition, holder.to_string()));
        }
    }
}

#[test]
fn a_script_reply_settles_each_entry_and_fenced_refuses_them_all_and_tells_the_holders() {
    let told = Arc::new(Told::default());
    let mut shared = crate::store::redis::detached_link();
    shared.holders = Some(told.clone());
    let group = two_entries(7, "n:1", false);
    let mut out: Vec<Result<(), Error>> = vec![Ok(()), Ok(())];
    let wrongtype = redis::parse_redis_value(b"-WRONGTYPE no\r\n").expect("RESP");
    settle_script(
        &shared,
        &group,
        Value::Array(vec![Value::Int(1), wrongtype]),
        &mut out,
    )
    .expect("settled");
    assert!(out[0].is_ok() && out[1].is_err());
    let mut out: Vec<Result<(), Error>> = vec![Ok(()), Ok(())];
    let fenced =
        redis::parse_redis_value(b"-FENCED partition lease is free, not n:1\r\n").expect("RESP");
    settle_script(&shared, &group, fenced, &mut out).expect("settled");
    assert!(out.iter().all(Result::is_err));
    assert_eq!(
        *told.0.lock().expect("not poisoned"),
        [(7, "n:1".to_string())],
        "the lease the writes were fenced by is told lost, once"
    );
    let oom = redis::parse_redis_value(b"-OOM full\r\n").expect("RESP");
    assert!(
        settle_script(&shared, &group, oom, &mut out).is_err(),
        "sent again"
    );
    let short = Value::Array(vec![Value::Int(1)]);
    assert!(settle_script(&shared, &group, short, &mut out).is_err());
    assert_eq!(
        told.0.lock().expect("not poisoned").len(),
        1,
        "only FENCED tells"
    );
}

/// A fenced script that writes records ends by raising its partition's version floor to the
/// highest version among them, in the same script; an unfenced one (one node owns every
/// partition) and one that writes no record leave it alone. The floor's reply is not an
/// entry's.
#[test]
fn a_fenced_script_raises_its_partition_s_version_floor_with_its_records() {
    let mut o = outbox_under(|_| Some(Arc::from("node-a:3")));
    let hset = |v: u64| {
        redis::cmd("HSET")
            .arg(timers_key(9))
            .arg("shop/e")
            .arg(format!("{v} 2 {{}}"))
            .clone()
    };
    o.push(
        hset(40),
        None,
        Ack::None,
        "shop",
        Some(Arc::from("node-a:3")),
    );
    o.push(
        hset(30),
        None,
        Ack::None,
        "shop",
        Some(Arc::from("node-a:3")),
    );
    let plan = Plan::of(o.batch(0, 100, usize::MAX), true);
    let nine = plan
        .groups
        .iter()
        .position(|g| g.partition == 9)
        .expect("9");
    assert!(plan.groups[nine].floor);
    let a = args(&plan.scripts[nine]);
    assert!(
        a.contains(&"punctual:{p9}:versions".to_owned()),
        "a key of the script: {a:?}"
    );
    assert_eq!(
        a[a.len() - 6..],
        ["5", "ZADD", "punctual:{p9}:versions", "GT", "40", "top"],
        "last, the highest version written: {a:?}"
    );
    let plain = Plan::of(o.batch(0, 100, usize::MAX), false);
    assert!(plain.groups.iter().all(|g| !g.floor));
    assert!(plain
        .scripts
        .iter()
        .all(|s| !args(s).contains(&"ZADD".to_owned())));
    let mut only = Outbox::new(16, 16, Duration::from_secs(2));
    push_hdel(&mut only, 5, "shop/f", "node-a:3");
    let none = Plan::of(only.batch(0, 100, usize::MAX), true);
    assert!(!none.groups[0].floor);

    let shared = crate::store::redis::detached_link();
    let mut out: Vec<Result<(), Error>> = vec![Ok(()), Ok(())];
    let group = two_entries(9, "node-a:3", true);
    let reply = Value::Array(vec![Value::Int(1), Value::Int(0), Value::Int(1)]);
    settle_script(&shared, &group, reply, &mut out).expect("settled");
    assert!(out.iter().all(Result::is_ok));
    let short = Value::Array(vec![Value::Int(1), Value::Int(0)]);
    assert!(settle_script(&shared, &group, short, &mut out).is_err());
}
