//! The node's loop: its plan, what it tells the shards, and rounds replayed against scripted
//! calls (`calls`).

use super::*;
use crate::nodes::lease::LeaseError;
use crate::nodes::membership::{Beat, MembershipError};
use crate::store::redis::clustered::Holders;

#[test]
fn a_round_renews_what_it_keeps_releases_what_moved_and_acquires_what_is_new() {
    let p = plan(&[9, 1, 5], &[5, 7, 1, 2000]);
    assert_eq!(
        p,
        Plan {
            acquire: vec![7],
            renew: vec![1, 5],
            release: vec![9],
        },
        "out-of-range partitions are ignored; every list increases"
    );
    assert_eq!(plan(&[], &[]), Plan::default());
}

/// Records what it is told, in order.
#[derive(Default)]
struct Heard(std::cell::RefCell<Vec<String>>);

impl Partitions for Heard {
    fn gained(&self, p: u32) {
        self.0.borrow_mut().push(format!("gained {p}"));
    }
    fn lost(&self, p: u32) {
        self.0.borrow_mut().push(format!("lost {p}"));
    }
}

#[test]
fn a_renewal_that_lands_after_the_lease_lapsed_is_told_lost_and_not_put_back() {
    let h = Holdings::default();
    let heard = Heard::default();
    let mut told = Told::new();
    let now = Instant::now();
    let later = now + Duration::from_secs(60);
    h.put(Lease::until(3, later));
    h.put(Lease::until(4, now + Duration::from_millis(1)));
    told.tell(&h, &heard, now);
    // Renewed in time: nothing to tell.
    assert!(h.renewed(Lease::until(3, later)));
    // Lapsed just before its renewal was put back: a shard may have seen it not held, and a
    // write queued under it may still be unsent, so it is not held under that epoch again.
    std::thread::sleep(Duration::from_millis(2));
    assert!(!h.renewed(Lease::until(4, later)));
    assert!(h.holder(4).is_none() && h.held().iter().all(|l| l.partition != 4));
    told.lapsed(4, &heard);
    told.tell(&h, &heard, Instant::now());
    assert_eq!(*heard.0.borrow(), ["gained 3", "gained 4", "lost 4"]);
    assert!(!h.renewed(Lease::until(PARTITIONS, later)), "out of range");
}

#[test]
fn a_fenced_write_drops_its_own_lease_at_once_and_never_a_later_one() {
    let h = Holdings::default();
    let heard = Heard::default();
    let mut told = Told::new();
    let later = Instant::now() + Duration::from_secs(60);
    h.put(Lease::under(3, 7, later));
    h.put(Lease::under(4, 9, later));
    told.tell(&h, &heard, Instant::now());
    // A write queued under epoch 8 of partition 4 was refused: epoch 9 is another lease.
    h.fenced(4, "n:8");
    assert!(h.holds(4) && h.valid(4, Instant::now()).is_some());
    h.fenced(3, "n:7");
    assert!(!h.holds(3) && h.holder(3).is_none());
    assert!(h.valid(3, Instant::now()).is_none(), "dropped now");
    assert!(h.holds(4), "the other partition is untouched");
    h.fenced(3, "n:7");
    h.fenced(PARTITIONS, "n:7");
    assert_eq!(
        h.stats.fenced_drops_total.load(Ordering::Relaxed),
        1,
        "counted once"
    );
    // Its renewal, answered held before the fence, does not bring it back.
    assert!(!h.renewed(Lease::under(3, 7, later)));
    told.tell(&h, &heard, Instant::now());
    assert_eq!(*heard.0.borrow(), ["gained 3", "gained 4", "lost 3"]);
}

#[test]
fn a_tick_asks_only_for_what_is_still_pending_and_starts_a_round_only_on_a_change() {
    let mut p = Pending {
        acquire: vec![2, 5, 9, 700],
        version: Some(4),
    };
    p.acquired(&[5, 700, 1_000]);
    assert_eq!(p.acquire, [2, 9], "what was held is asked for no more");
    p.acquired(&[]);
    assert_eq!(p.acquire, [2, 9]);
    assert!(!p.changed(4), "the counter the round saw: no early round");
    assert!(
        p.changed(5) && p.changed(0),
        "any other value: the live set changed"
    );
    let failed_beat = Pending::default();
    assert!(
        !failed_beat.changed(7),
        "no beat, no baseline: the round comes at its time"
    );
}

#[test]
fn an_empty_table_names_no_holder() {
    let h = Holdings::default();
    assert_eq!(h.holder(3), None);
    assert_eq!(h.holder(PARTITIONS), None, "out of range: none, no panic");
    assert!(!h.holds(3) && !h.holds(PARTITIONS));
    assert!(h.owned(Instant::now()).is_empty());
}

/// The loop's calls, answered on cue: each heartbeat and renewal after the delay and with the
/// outcome its script gives (a heartbeat past the script sets `stop`); every acquisition is
/// granted under the partition's next epoch, as the `INCR` in Redis would.
struct Scripted<'s> {
    beats: std::collections::VecDeque<(Duration, bool)>,
    renewals: std::collections::VecDeque<(Duration, bool)>,
    epochs: Vec<u64>,
    stop: &'s AtomicBool,
}

fn refused() -> LeaseError {
    LeaseError::Reply("scripted failure".into())
}

impl Calls for Scripted<'_> {
    async fn beat(&mut self, me: &NodeRecord, _: Duration) -> Result<Beat, MembershipError> {
        let (delay, ok) = self.beats.pop_front().unwrap_or_default();
        glommio::timer::sleep(delay).await;
        if self.beats.is_empty() {
            self.stop.store(true, Ordering::Release);
        }
        match ok {
            true => Ok(Beat {
                version: 1,
                live: vec![me.clone()],
            }),
            false => Err(MembershipError::Reply("scripted failure".into())),
        }
    }

    async fn version(&mut self) -> Result<u64, MembershipError> {
        Ok(1)
    }

    async fn leave(&mut self, _: &NodeRecord) -> Result<(), MembershipError> {
        Ok(())
    }

    async fn acquire(
        &mut self,
        holder: &str,
        partitions: &[u32],
        cfg: LeaseConfig,
    ) -> Result<Vec<Acquired>, LeaseError> {
        let sent = Instant::now();
        let mut out = Vec::new();
        for &p in partitions {
            let epoch = self.epochs.get_mut(p as usize).ok_or_else(refused)?;
            *epoch += 1;
            let value = format!("{holder}:{epoch}");
            out.push(Acquired::Held(Lease::granted(p, *epoch, &value, cfg, sent)));
        }
        Ok(out)
    }

    async fn renew(
        &mut self,
        leases: &mut [Lease],
        cfg: LeaseConfig,
    ) -> Result<Vec<bool>, LeaseError> {
        let sent = Instant::now();
        let (delay, ok) = self.renewals.pop_front().unwrap_or((Duration::ZERO, true));
        glommio::timer::sleep(delay).await;
        if !ok {
            return Err(refused());
        }
        leases.iter_mut().for_each(|l| l.renewed_at(cfg, sent));
        Ok(vec![true; leases.len()])
    }

    async fn release(&mut self, _: &[Lease]) -> Result<(), LeaseError> {
        Ok(())
    }
}

/// Runs the loop over `script`'s calls (rounds of 100 ms, leases of 500 ms) until its last
/// heartbeat, then its stop; answers what the shards were told, per partition, in order.
fn replay(beats: &[(Duration, bool)], renewals: &[(Duration, bool)]) -> Vec<Vec<&'static str>> {
    let mut cfg = NodeConfig::new(NodeRecord {
        id: "a:1".into(),
        advertise: "a:1".into(),
        started_at_us: 1,
        proof: None,
    });
    cfg.round = Duration::from_millis(100);
    cfg.lease = LeaseConfig::with_ttl(Duration::from_millis(500));
    let heard = Heard::default();
    let holdings = Holdings::default();
    let stop = AtomicBool::new(false);
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor");
    ex.run(async {
        let calls = Scripted {
            beats: beats.iter().copied().collect(),
            renewals: renewals.iter().copied().collect(),
            epochs: vec![0; PARTITIONS as usize],
            stop: &stop,
        };
        drive(calls, &cfg, &holdings, &heard, &stop).await;
    });
    let mut per: Vec<Vec<&'static str>> = vec![Vec::new(); PARTITIONS as usize];
    for event in heard.0.borrow().iter() {
        let (what, p) = event.split_once(' ').expect("`<what> <p>`");
        let p: usize = p.parse().expect("a partition");
        per[p].push(if what == "gained" { "gained" } else { "lost" });
    }
    per
}

#[test]
fn a_slow_heartbeat_after_a_failed_renewal_tells_every_lapse_lost_before_its_regain() {
    let fast = (Duration::ZERO, true);
    // Round 1 acquires everything; round 2's renewal fails, so the deadlines stay those of
    // round 1's acquisition (450 ms after it); round 3's heartbeat succeeds 400 ms later, past
    // them, and the round acquires everything again under new epochs.
    let slow = (Duration::from_millis(400), true);
    let per = replay(&[fast, fast, slow], &[(Duration::ZERO, false)]);
    for (p, events) in per.iter().enumerate() {
        assert_eq!(
            events,
            &["gained", "lost", "gained", "lost"],
            "partition {p}: acquired, lapsed, acquired again under a new epoch, released at stop"
        );
    }
}
