//! One holder per partition, fenced epochs, membership, and fenced writes while slots move.

use super::*;

#[test]
fn two_nodes_contend_and_each_partition_gets_exactly_one_holder() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let (mut a, mut b) = (client(&cluster).await, client(&cluster).await);
        let partitions: Vec<u32> = (0..96).collect();
        let cfg = LeaseConfig::default();
        let (ra, rb) = futures_lite::future::zip(
            lease::acquire(&mut a, "node-a:7480", &partitions, cfg),
            lease::acquire(&mut b, "node-b:7480", &partitions, cfg),
        )
        .await;
        let (ra, rb) = (ra.expect("a's acquisitions"), rb.expect("b's acquisitions"));
        for (i, &p) in partitions.iter().enumerate() {
            let (lease, by, winner) = match (&ra[i], &rb[i]) {
                (Acquired::Held(l), Acquired::Taken(by)) => (l, by, "node-a:7480"),
                (Acquired::Taken(by), Acquired::Held(l)) => (l, by, "node-b:7480"),
                other => panic!("partition {p}: not exactly one holder: {other:?}"),
            };
            assert_eq!(lease.partition, p);
            assert!(
                lease.holder().starts_with(&format!("{winner}-"))
                    && lease.holder().ends_with(&format!(":{}", lease.epoch)),
                "{lease:?}: the holder, its acquisition's token and the epoch"
            );
            assert_eq!(
                by,
                lease.holder(),
                "partition {p}: the loser names the winner"
            );
        }
        // a hands its leases over (a planned handoff); b takes them under a later epoch.
        let a_held = held(&ra);
        lease::release(&mut a, &a_held).await.expect("release");
        let mut a_left = a_held.clone();
        let still = lease::renew(&mut a, &mut a_left, cfg).await.expect("renew");
        assert!(
            still.iter().all(|h| !h),
            "a released lease cannot be renewed"
        );
        assert!(
            a_left.iter().all(|l| !l.valid_at(Instant::now())),
            "nor acted on"
        );
        let taken: Vec<u32> = a_held.iter().map(|l| l.partition).collect();
        let again = held(
            &lease::acquire(&mut b, "node-b:7480", &taken, cfg)
                .await
                .expect("b's second acquisitions"),
        );
        assert_eq!(again.len(), taken.len(), "every released partition is free");
        for (old, new) in a_held.iter().zip(&again) {
            assert_eq!(old.partition, new.partition);
            assert!(
                new.epoch > old.epoch,
                "epochs only grow: {old:?} then {new:?}"
            );
        }
        // b's leases renew; a's are refused for good.
        let mut b_all = held(&rb);
        b_all.extend(again);
        let renewed = lease::renew(&mut b, &mut b_all, cfg).await.expect("renew");
        assert!(renewed.iter().all(|h| *h));
        assert_eq!(b_all.len(), partitions.len());
    });
}

#[test]
fn a_stale_epoch_is_fenced_and_a_lease_past_its_deadline_is_not_acted_upon() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let (mut a, mut b) = (client(&cluster).await, client(&cluster).await);
        let p = 17;
        let key = layout::timers_key(p);
        let short = LeaseConfig::with_ttl(Duration::from_millis(400));
        let hset = |field: &str| {
            redis::cmd("HSET")
                .arg(&key)
                .arg(field)
                .arg("1 2 {}")
                .clone()
        };

        let a_lease = match &lease::acquire(&mut a, "node-a:7480", &[p], short)
            .await
            .expect("acquire")[..]
        {
            [Acquired::Held(l)] => l.clone(),
            other => panic!("{other:?}"),
        };
        // Under its lease, a's fenced write lands.
        let ok = a_lease
            .fence(Instant::now(), &[&key], &[hset("t/first")])
            .expect("a valid lease fences");
        let reply = a.query(ok).await.expect("answered");
        assert_eq!(reply, Value::Array(vec![Value::Int(1)]));
        // a builds a write, then stalls (a pause, a partition) past its lease.
        let late = a_lease
            .fence(Instant::now(), &[&key], &[hset("t/stale")])
            .expect("still valid when built");
        until_lease_gone(&mut b, p).await;
        // Redis dropped the lease: a's local deadline had passed by then.
        assert!(
            !a_lease.valid_at(Instant::now()),
            "{a_lease:?} outlived its key"
        );
        assert!(matches!(
            a_lease.fence(Instant::now(), &[&key], &[hset("t/never")]),
            Err(LeaseError::Expired { partition: 17, .. })
        ));
        let b_lease = match &lease::acquire(&mut b, "node-b:7480", &[p], LeaseConfig::default())
            .await
            .expect("acquire")[..]
        {
            [Acquired::Held(l)] => l.clone(),
            other => panic!("{other:?}"),
        };
        assert!(b_lease.epoch > a_lease.epoch);
        // a's write, sent late under its old epoch, is refused and changes nothing.
        let refused = a.query(late).await.expect("answered");
        assert!(fence::is_fenced(&refused), "{refused:?}");
        let stale = b
            .query(Routed::new(
                &key,
                redis::cmd("HGET").arg(&key).arg("t/stale").clone(),
            ))
            .await
            .expect("HGET");
        assert_eq!(stale, Value::Nil, "a fenced write left nothing behind");
        // The same write under b's lease lands.
        let ok = b_lease
            .fence(Instant::now(), &[&key], &[hset("t/stale")])
            .expect("b's lease fences");
        assert_eq!(
            b.query(ok).await.expect("answered"),
            Value::Array(vec![Value::Int(1)])
        );
        // a renews in vain: the lease is b's now.
        let mut mine = vec![a_lease];
        assert_eq!(
            lease::renew(&mut a, &mut mine, short).await.expect("renew"),
            [false]
        );
    });
}

#[test]
fn membership_sees_every_beating_node_and_forgets_a_silent_one() {
    let cluster = RedisCluster::start();
    on_executor(async {
        let (mut a, mut b) = (client(&cluster).await, client(&cluster).await);
        let record = |id: &str| NodeRecord {
            id: id.into(),
            advertise: id.into(),
            started_at_us: 1,
            proof: None,
        };
        let (ra, rb) = (record("10.0.0.1:7480"), record("10.0.0.2:7480"));
        let ttl = Duration::from_millis(500);
        membership::beat(&mut a, &ra, ttl).await.expect("a beats");
        let seen = membership::beat(&mut b, &rb, ttl).await.expect("b beats");
        assert_eq!(seen, vec![ra.clone(), rb.clone()]);
        let ids: Vec<&str> = seen.iter().map(|r| r.id.as_str()).collect();
        let mine_a = rendezvous::owned_by(&ra.id, &ids);
        let mine_b = rendezvous::owned_by(&rb.id, &ids);
        assert_eq!(
            mine_a.len() + mine_b.len(),
            punctual::partition::PARTITIONS as usize
        );
        assert!(mine_a.iter().all(|p| !mine_b.contains(p)));

        // b falls silent; a keeps beating and, one TTL later, sees itself alone.
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = membership::beat(&mut a, &ra, ttl).await.expect("a beats");
            if seen == [ra.clone()] {
                break;
            }
            assert!(Instant::now() < give_up, "b never expired: {seen:?}");
            glommio::timer::sleep(Duration::from_millis(100)).await;
        }
        // b comes back and leaves on purpose: a sees it go at once.
        membership::beat(&mut b, &rb, Duration::from_secs(60))
            .await
            .expect("b beats");
        membership::leave(&mut b, &rb).await.expect("b leaves");
        let seen = membership::beat(&mut a, &ra, ttl).await.expect("a beats");
        assert_eq!(seen, vec![ra]);
    });
}

#[test]
fn fenced_writes_and_renewals_go_on_while_their_slots_are_resharded() {
    let cluster = RedisCluster::start();
    let masters = cluster.masters();
    // The reshard moves the source's first slots; these partitions live there.
    let source_slots = cluster
        .slots()
        .into_iter()
        .filter(|(_, port)| *port == masters[0])
        .map(|(range, _)| range)
        .min_by_key(|r| *r.start())
        .expect("the source serves slots");
    let moved = 1_000u16;
    let first = *source_slots.start();
    let partitions: Vec<u32> = (0..punctual::partition::PARTITIONS)
        .filter(|&p| {
            let s = punctual::store::redis::cluster::slot::partition_slot(p);
            s >= first && s < first + moved
        })
        .collect();
    assert!(partitions.len() > 10, "{partitions:?}");
    let cfg = parse_url(&cluster.url()).expect("the harness's URL parses");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (partitions, stop, rounds) = (partitions.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            let result = on_executor(async move {
                let mut c = ClusterClient::connect(cfg)
                    .await
                    .map_err(|e| e.to_string())?;
                let lease_cfg = LeaseConfig::default();
                let got = lease::acquire(&mut c, "node-a:7480", &partitions, lease_cfg)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut leases = held(&got);
                if leases.len() != partitions.len() {
                    return Err(format!("not every lease acquired: {got:?}"));
                }
                let epochs: Vec<u64> = leases.iter().map(|l| l.epoch).collect();
                let mut round = 0u64;
                let mut after_stop = 0;
                while after_stop < 5 {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        after_stop += 1;
                    }
                    let renewed = lease::renew(&mut c, &mut leases, lease_cfg)
                        .await
                        .map_err(|e| e.to_string())?;
                    if renewed.iter().any(|h| !h) {
                        return Err(format!("round {round}: a lease lost: {renewed:?}"));
                    }
                    let now = Instant::now();
                    let field = format!("w{round}");
                    let mut writes = Vec::with_capacity(leases.len());
                    for l in &leases {
                        let key = layout::timers_key(l.partition);
                        let incr = redis::cmd("HINCRBY").arg(&key).arg(&field).arg(1).clone();
                        writes.push(l.fence(now, &[&key], &[incr]).map_err(|e| e.to_string())?);
                    }
                    let replies = c.pipeline(&writes).await.map_err(|e| e.to_string())?;
                    let one = Value::Array(vec![Value::Int(1)]);
                    if let Some(bad) = replies.iter().find(|r| **r != one) {
                        return Err(format!("round {round}: {bad:?}"));
                    }
                    round += 1;
                    rounds.store(round, std::sync::atomic::Ordering::SeqCst);
                    glommio::timer::sleep(Duration::from_millis(20)).await;
                }
                let still: Vec<u64> = leases.iter().map(|l| l.epoch).collect();
                Ok::<_, String>((round, epochs == still, c.stats()))
            });
            let _ = tx.send(result);
        });
    }
    let give_up = Instant::now() + Duration::from_secs(60);
    while rounds.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        assert!(Instant::now() < give_up, "the writer never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    cluster
        .reshard(masters[0], masters[1], u32::from(moved))
        .finish();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (written, same_epochs, stats) = rx
        .recv_timeout(Duration::from_secs(90))
        .expect("the writer ends")
        .unwrap_or_else(|e| panic!("the writer failed: {e}\n{}", cluster.logs()));
    assert!(
        same_epochs,
        "a lease was handed out again during the reshard"
    );
    assert!(stats.moved > 0, "no write met a moved slot: {stats:?}");
    for &p in &partitions {
        assert_eq!(
            cluster.master_of(punctual::store::redis::cluster::slot::partition_slot(p)),
            masters[1]
        );
    }
    // Every round's write landed exactly once in every partition.
    on_executor(async {
        let mut c = client(&cluster).await;
        for &p in &partitions {
            let key = layout::timers_key(p);
            let all = c
                .query(Routed::new(&key, redis::cmd("HGETALL").arg(&key).clone()))
                .await
                .expect("HGETALL");
            let Value::Array(kv) = all else {
                panic!("{all:?}")
            };
            assert_eq!(kv.len() as u64, 2 * written, "partition {p}: {kv:?}");
            for pair in kv.chunks_exact(2) {
                assert_eq!(pair[1], Value::BulkString(b"1".to_vec()), "partition {p}");
            }
        }
    });
    eprintln!(
        "{} partitions, {written} rounds, {stats:?}",
        partitions.len()
    );
}
