//! The node's loop: two loops split the partitions, a survivor takes over, a gained partition
//! is read back page by page and handed to the shards, then dropped.

use super::*;

/// Every partition held (valid now) by both nodes at once: must stay empty.
fn both_hold(a: &Holdings, b: &Holdings) -> Vec<u32> {
    let now = Instant::now();
    (0..PARTITIONS)
        .filter(|&p| a.valid(p, now).is_some() && b.valid(p, now).is_some())
        .collect()
}

#[test]
fn two_node_loops_split_the_partitions_and_the_survivor_takes_over_a_killed_node() {
    let cluster = RedisCluster::start();
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    let (na, nb) = (
        node_config("127.0.0.1:17001"),
        node_config("127.0.0.1:17002"),
    );
    let (ha, hb) = (Holdings::default(), Holdings::default());
    let (ta, tb) = (Told::new(), Told::new());
    let stop = AtomicBool::new(false);
    let kill_a = Cell::new(false);
    on_executor(async {
        // a's loop dies mid-round when `kill_a` is set: its future is dropped, nothing released.
        let a = futures_lite::future::or(
            async {
                node::run(cfg.clone(), &na, &ha, &ta, &stop).await;
                panic!("a's loop ended without being killed");
            },
            async {
                while !kill_a.get() {
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                }
            },
        );
        let b = node::run(cfg.clone(), &nb, &hb, &tb, &stop);
        let check = async {
            // Both beat, see each other, and settle on the rendezvous assignment.
            let ids = [na.me.id.as_str(), nb.me.id.as_str()];
            let (want_a, want_b) = (
                rendezvous::owned_by(ids[0], &ids),
                rendezvous::owned_by(ids[1], &ids),
            );
            let give_up = Instant::now() + Duration::from_secs(20);
            loop {
                assert_eq!(
                    both_hold(&ha, &hb),
                    Vec::<u32>::new(),
                    "two holders at once"
                );
                let now = Instant::now();
                if ha.owned(now) == want_a && hb.owned(now) == want_b {
                    break;
                }
                assert!(
                    Instant::now() < give_up,
                    "no split after 20 s: a holds {}, b holds {}",
                    ha.owned(now).len(),
                    hb.owned(now).len()
                );
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
            eprintln!(
                "split: a holds {}, b holds {} of {PARTITIONS}",
                want_a.len(),
                want_b.len()
            );
            assert!(want_a.len() > 400 && want_b.len() > 400, "about half each");
            assert_eq!(
                (ta.held(), tb.held()),
                (want_a.clone(), want_b.clone()),
                "shards told"
            );
            // Redis holds exactly the value each node fences its writes with.
            let mut c = client(&cluster).await;
            let gets: Vec<Routed> = (0..PARTITIONS)
                .map(|p| {
                    let key = layout::lease_key(p);
                    Routed::new(&key, redis::cmd("GET").arg(&key).clone())
                })
                .collect();
            let values = c.pipeline(&gets).await.expect("GETs");
            for (p, v) in (0..PARTITIONS).zip(values) {
                let holder = ha.holder(p).or_else(|| hb.holder(p)).expect("held");
                assert_eq!(
                    v,
                    Value::BulkString(holder.as_bytes().to_vec()),
                    "partition {p}"
                );
            }
            let before: Vec<(u32, u64)> = want_a
                .iter()
                .map(|&p| (p, ha.valid(p, Instant::now()).expect("a's").epoch))
                .collect();

            // kill -9 a: b takes every partition once a's heartbeat and leases lapse.
            kill_a.set(true);
            let killed = Instant::now();
            let limit = nb.member_ttl + nb.lease.ttl + Duration::from_secs(5);
            loop {
                assert_eq!(
                    both_hold(&ha, &hb),
                    Vec::<u32>::new(),
                    "two holders at once"
                );
                if hb.owned(Instant::now()).len() == PARTITIONS as usize {
                    break;
                }
                assert!(
                    killed.elapsed() < limit,
                    "b holds {} of {PARTITIONS} {limit:?} after a's death",
                    hb.owned(Instant::now()).len()
                );
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            eprintln!(
                "b held every partition {} ms after a was killed",
                killed.elapsed().as_millis()
            );
            assert!(
                ha.owned(Instant::now()).is_empty(),
                "a's local deadlines passed first"
            );
            assert_eq!(
                tb.held().len(),
                PARTITIONS as usize,
                "b's shards told of every gain"
            );
            for (p, old) in before {
                let new = hb.valid(p, Instant::now()).expect("b's").epoch;
                assert!(new > old, "partition {p}: epoch {old} then {new}");
            }
            let st = &hb.stats;
            let (losses, errors) = (
                st.losses_total.load(Ordering::Relaxed),
                st.round_errors_total.load(Ordering::Relaxed),
            );
            // On a loaded host a round can stall past a TTL; a lease lost then is taken again.
            eprintln!("b: {losses} leases lost at renewal, {errors} rounds failed");
            stop.store(true, Ordering::Release);
        };
        futures_lite::future::zip(a, futures_lite::future::zip(b, check)).await;
    });
    // b left on stop: its shards told to drop everything, its leases released.
    assert_eq!(tb.held(), Vec::<u32>::new());
    on_executor(async {
        let mut c = client(&cluster).await;
        for p in [0, 511, 1023] {
            until_lease_gone(&mut c, p).await;
        }
    });
}

#[test]
fn a_gained_partition_reads_back_every_record_of_both_hashes_page_by_page() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let mut c = client(&cluster).await;
        let p = 300;
        let keys: Vec<String> = (0..)
            .map(|i| format!("order-{i}"))
            .filter(|k| partition_of("shop", k) == p)
            .take(303)
            .collect();
        let hset = |hash: String, field: String, record: Vec<u8>| {
            Routed::new(
                &hash,
                redis::cmd("HSET").arg(&hash).arg(field).arg(record).clone(),
            )
        };
        // 300 pending timers, 3 dead letters, and two records recovery would skip as well.
        let mut writes: Vec<Routed> = keys[..300]
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let record = layout::encode_record(i as u64 + 1, 1_000 + i as u64, b"", b"{}");
                hset(layout::timers_key(p), layout::field("shop", k), record)
            })
            .collect();
        for k in &keys[300..] {
            let record = layout::encode_record(9, 9, b"dead", b"{}");
            writes.push(hset(
                punctual::store::redis::dead::dead_key(p),
                layout::field("shop", k),
                record,
            ));
        }
        writes.push(hset(
            layout::timers_key(p),
            "no-slash".into(),
            b"1 2 {}".to_vec(),
        ));
        let elsewhere = (0..)
            .map(|i| format!("other-{i}"))
            .find(|k| partition_of("shop", k) != p)
            .expect("a key of another partition");
        writes.push(hset(
            layout::timers_key(p),
            layout::field("shop", &elsewhere),
            b"1 2 {}".to_vec(),
        ));
        for reply in c.pipeline(&writes).await.expect("HSETs") {
            assert_eq!(reply, Value::Int(1));
        }

        let read = load::read(&mut c, p, 50).await.expect("read");
        assert_eq!(
            read.skipped, 2,
            "the malformed and the misfiled record are left"
        );
        let mut got: Vec<(String, u64)> = read
            .records
            .iter()
            .map(|r| (r.key.clone(), r.version))
            .collect();
        got.sort();
        got.dedup();
        assert_eq!(
            got.len(),
            303,
            "every record once (HSCAN may repeat one; loads upsert)"
        );
        for (i, k) in keys.iter().enumerate() {
            let r = read.records.iter().find(|r| &r.key == k).expect("read");
            let dead = i >= 300;
            assert_eq!(r.meta.is_empty(), !dead, "{k}");
            if !dead {
                assert_eq!(r.version, i as u64 + 1);
            }
        }
        let empty = load::read(&mut c, p + 1, 50).await.expect("read");
        assert!(empty.records.is_empty() && empty.skipped == 0);
    });
}

/// What a node's shards were handed: per partition, the loads (record keys) and drops in order.
#[derive(Default)]
struct Handed(Mutex<Vec<(u32, Option<Vec<String>>)>>);

impl Shards for Handed {
    fn load(&self, partition: u32, read: load::Read) {
        let keys = read.records.into_iter().map(|r| r.key).collect();
        self.0
            .lock()
            .expect("not poisoned")
            .push((partition, Some(keys)));
    }

    fn drop_partition(&self, partition: u32) {
        self.0.lock().expect("not poisoned").push((partition, None));
    }
}

#[test]
fn a_node_hands_its_shards_each_gained_partition_s_records_and_then_its_drop() {
    let cluster = RedisCluster::start();
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    let me = node_config("127.0.0.1:17003");
    let holdings = Holdings::default();
    let handed = Handed::default();
    let stop = AtomicBool::new(false);
    // Two pending timers stored before the node starts.
    let stored = ["order-1", "order-2"];
    on_executor(async {
        let mut c = client(&cluster).await;
        for k in stored {
            let hash = layout::timers_key(partition_of("shop", k));
            let cmd = redis::cmd("HSET")
                .arg(&hash)
                .arg(layout::field("shop", k))
                .arg(layout::encode_record(1, 2, b"", b"{}"))
                .clone();
            c.query(Routed::new(&hash, cmd)).await.expect("HSET");
        }
        let (reader, queue) = Reader::new(&handed);
        let node = futures_lite::future::or(
            node::run(cfg.clone(), &me, &holdings, &reader, &stop),
            reader.serve(cfg.clone(), queue),
        );
        let check = async {
            let give_up = Instant::now() + Duration::from_secs(20);
            while handed.0.lock().expect("not poisoned").len() < PARTITIONS as usize {
                assert!(
                    Instant::now() < give_up,
                    "not every partition loaded in 20 s"
                );
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            stop.store(true, Ordering::Release);
        };
        futures_lite::future::zip(node, check).await;
    });
    let handed = handed.0.into_inner().expect("not poisoned");
    let (loads, drops) = handed.split_at(PARTITIONS as usize);
    let mut loaded: Vec<u32> = loads.iter().map(|(p, _)| *p).collect();
    loaded.sort_unstable();
    assert_eq!(
        loaded,
        (0..PARTITIONS).collect::<Vec<_>>(),
        "each gained partition loaded once"
    );
    for (p, keys) in loads {
        let mut want: Vec<String> = stored
            .iter()
            .filter(|k| partition_of("shop", k) == *p)
            .map(|k| k.to_string())
            .collect();
        let mut got = keys.clone().expect("a load");
        want.sort();
        got.sort();
        assert_eq!(got, want, "partition {p}'s records");
    }
    assert_eq!(
        drops.len(),
        PARTITIONS as usize,
        "every partition dropped at stop"
    );
    assert!(drops.iter().all(|(_, keys)| keys.is_none()));
}
