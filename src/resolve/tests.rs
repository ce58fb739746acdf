use super::*;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

type Answered = Result<Vec<IpAddr>, String>;

/// A resolver whose lookup counts its calls and answers only when the test sends an answer
/// (a black hole until then).
fn gated(limits: Limits) -> (Resolver, Arc<AtomicUsize>, mpsc::Sender<Answered>) {
    let (tx, rx) = mpsc::channel::<Answered>();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let release = Mutex::new(rx);
    let r = Resolver::new(
        limits,
        Box::new(move |_host| {
            counted.fetch_add(1, Ordering::SeqCst);
            let rx = release.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| Err("test gate closed".into()))
        }),
    );
    (r, calls, tx)
}

fn wait(l: Lookup) -> Answer {
    match l {
        Lookup::Ready(a) => a,
        Lookup::Waiting(rx) => futures_lite::future::block_on(rx).unwrap_or_else(|_| {
            Err(ResolveError::Failed {
                host: "?".into(),
                reason: "dropped".into(),
            })
        }),
    }
}

const T: Caller<'static> = Caller::Tenant("t");

impl Resolver {
    /// A lookup for tenant `t`.
    fn start_as(&self, host: &str) -> Lookup {
        self.start(host, T)
    }
}

fn local() -> IpAddr {
    IpAddr::from([127, 0, 0, 1])
}

#[test]
fn callers_of_one_host_share_one_lookup() {
    let (r, calls, answer) = gated(Limits::default());
    let waiting: Vec<Lookup> = (0..10).map(|_| r.start_as("one.example")).collect();
    answer.send(Ok(vec![local()])).expect("gate");
    for l in waiting {
        assert_eq!(wait(l).expect("an answer")[..], [local()]);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Cached now: no second lookup.
    assert!(matches!(r.start_as("one.example"), Lookup::Ready(Ok(_))));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_failure_is_remembered_for_the_negative_ttl() {
    let (r, calls, answer) = gated(Limits::default());
    let first = r.start_as("nowhere.example");
    answer.send(Err("no such host".into())).expect("gate");
    assert!(matches!(wait(first), Err(ResolveError::Failed { .. })));
    for _ in 0..5 {
        assert!(matches!(
            r.start_as("nowhere.example"),
            Lookup::Ready(Err(ResolveError::Failed { .. }))
        ));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_full_queue_fails_at_once_instead_of_blocking() {
    let limits = Limits {
        webhook: LaneLimits {
            threads: 1,
            queue: 2,
            per_owner: usize::MAX,
            per_owner_running: usize::MAX,
            reserved: 0,
        },
        ..Limits::default()
    };
    let (r, calls, answer) = gated(limits);
    let a = r.start_as("a.example");
    // Wait until the only thread holds `a` in the black hole.
    let give_up = Instant::now() + Duration::from_secs(10);
    while calls.load(Ordering::SeqCst) == 0 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(1));
    }
    let b = r.start_as("b.example");
    let c = r.start_as("c.example");
    assert_eq!(r.queued_and_running(), (2, 1));
    let t = Instant::now();
    assert!(matches!(
        r.start_as("d.example"),
        Lookup::Ready(Err(ResolveError::Busy { .. }))
    ));
    assert!(t.elapsed() < Duration::from_secs(1), "a full queue blocked");
    for _ in 0..3 {
        answer.send(Ok(vec![local()])).expect("gate");
    }
    for l in [a, b, c] {
        assert!(wait(l).is_ok());
    }
}

#[test]
fn a_lookup_past_its_deadline_answers_new_callers_at_once() {
    let limits = Limits {
        deadline: Duration::from_millis(50),
        ..Limits::default()
    };
    let (r, calls, answer) = gated(limits);
    let first = r.start_as("hole.example");
    std::thread::sleep(Duration::from_millis(80));
    let t = Instant::now();
    assert!(matches!(
        r.start_as("hole.example"),
        Lookup::Ready(Err(ResolveError::Timeout { .. }))
    ));
    assert!(t.elapsed() < Duration::from_secs(1));
    answer.send(Err("timed out".into())).expect("gate");
    assert!(wait(first).is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn resolve_on_an_executor_gives_up_at_the_deadline_while_the_lookup_hangs() {
    let limits = Limits {
        deadline: Duration::from_millis(100),
        ..Limits::default()
    };
    let (r, _calls, answer) = gated(limits);
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor");
    let t = Instant::now();
    let got = ex.run(async { r.resolve("hole.example", 80, T).await });
    assert!(matches!(got, Err(ResolveError::Timeout { .. })), "{got:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(answer);
}

/// A lookup's answer comes from a resolver thread; on an executor with a doorbell (a shard's)
/// it wakes the waiting task through the doorbell, not through glommio's foreign wake, which
/// can leave the executor asleep with the task runnable (the shard module's doc).
#[test]
fn an_answer_from_the_resolver_thread_wakes_the_caller_through_the_doorbell() {
    let (r, _calls, answer) = gated(Limits::default());
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("an executor");
    let (got, relayed) = ex.run(async {
        let metrics = Arc::new(crate::metrics::ShardMetrics::default());
        let doorbell = crate::runtime::doorbell::Doorbell::install(metrics).expect("a doorbell");
        // The answer is sent only once the caller waits for it (its first poll came back
        // pending), so its wake comes from the other thread however the threads are timed.
        let waiting = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let release = {
            let waiting = waiting.clone();
            std::thread::spawn(move || {
                let asked = std::time::Instant::now();
                while !waiting.load(Ordering::SeqCst) && asked.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = answer.send(Ok(vec![local()]));
            })
        };
        let mut lookup = std::pin::pin!(r.resolve("slow.example", 8080, T));
        let got = std::future::poll_fn(|cx| {
            let polled = lookup.as_mut().poll(cx);
            if polled.is_pending() {
                waiting.store(true, Ordering::SeqCst);
            }
            polled
        })
        .await;
        release.join().expect("the answering thread");
        (got, doorbell.relayed())
    });
    assert_eq!(got.expect("answered"), vec![SocketAddr::new(local(), 8080)]);
    assert!(relayed >= 1, "the answer's wake came through the doorbell");
}

#[test]
fn ip_literals_are_not_looked_up() {
    let (r, calls, _answer) = gated(Limits::default());
    for host in ["127.0.0.1", "::1", "[::1]"] {
        assert!(matches!(r.start_as(host), Lookup::Ready(Ok(_))), "{host}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// A black hole that holds every name starting with `hole` until [`Hole::open`] (at most a
/// minute), and answers every other name at once.
struct Hole {
    open: Mutex<bool>,
    opened: Condvar,
    calls: AtomicUsize,
}

impl Hole {
    fn resolver(limits: Limits) -> (Resolver, Arc<Hole>) {
        let hole = Arc::new(Hole {
            open: Mutex::new(false),
            opened: Condvar::new(),
            calls: AtomicUsize::new(0),
        });
        let h = hole.clone();
        let r = Resolver::new(
            limits,
            Box::new(move |host| {
                h.calls.fetch_add(1, Ordering::SeqCst);
                if !host.starts_with("hole") {
                    return Ok(vec![local()]);
                }
                let open = h.open.lock().unwrap_or_else(|p| p.into_inner());
                let (open, _) = h
                    .opened
                    .wait_timeout_while(open, Duration::from_secs(60), |o| !*o)
                    .unwrap_or_else(|p| p.into_inner());
                if *open {
                    Err("no answer".into())
                } else {
                    Err("the test never opened the hole".into())
                }
            }),
        );
        (r, hole)
    }

    fn open(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.opened.notify_all();
    }
}

/// `l`'s answer, or `None` if none came within 10 s.
fn within(l: Lookup) -> Option<Answer> {
    match l {
        Lookup::Ready(a) => Some(a),
        Lookup::Waiting(mut rx) => {
            let give_up = Instant::now() + Duration::from_secs(10);
            while Instant::now() < give_up {
                match rx.try_recv() {
                    Ok(Some(a)) => return Some(a),
                    Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                    Err(_) => return None,
                }
            }
            None
        }
    }
}

/// Limits where one tenant may take the whole webhook lane.
fn no_shares(threads: usize, queue: usize) -> Limits {
    Limits {
        webhook: LaneLimits {
            threads,
            queue,
            per_owner: usize::MAX,
            per_owner_running: usize::MAX,
            reserved: 0,
        },
        ..Limits::default()
    }
}

/// Starts black-holed names for `tenant` until the lane answers `Busy`, once `running` of
/// them hold threads in the hole; how many it took.
fn flood(r: &Resolver, hole: &Hole, tenant: &str, names: usize, running: usize) -> usize {
    let base = hole.calls.load(Ordering::SeqCst);
    let mut taken = 0;
    for i in 0..names {
        if i == running {
            let give_up = Instant::now() + Duration::from_secs(10);
            while hole.calls.load(Ordering::SeqCst) < base + running && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        match r.start(
            &format!("hole-{tenant}-{i}.example"),
            Caller::Tenant(tenant),
        ) {
            Lookup::Waiting(_) => taken += 1,
            Lookup::Ready(Err(ResolveError::Busy { .. })) => {}
            Lookup::Ready(other) => panic!("a black-holed name answered {other:?}"),
        }
    }
    taken
}

#[test]
fn an_expired_answer_is_still_served_while_black_holed_names_fill_the_lane() {
    let limits = Limits {
        ttl: Duration::from_millis(20),
        ..no_shares(2, 8)
    };
    let (r, hole) = Hole::resolver(limits);
    let healthy = Caller::Tenant("healthy");
    let first = within(r.start("good.example", healthy));
    assert_eq!(
        first.expect("an answer").expect("an address")[..],
        [local()]
    );
    // Every thread and every queue slot is taken by black-holed names.
    assert_eq!(flood(&r, &hole, "evil", 300, 2), 10);
    assert!(matches!(
        r.start("other.example", healthy),
        Lookup::Ready(Err(ResolveError::Busy { .. }))
    ));
    std::thread::sleep(Duration::from_millis(50));
    // Past its TTL, the last good answer is served at once rather than failing `Busy`.
    for _ in 0..3 {
        match r.start("good.example", healthy) {
            Lookup::Ready(Ok(ips)) => assert_eq!(ips[..], [local()]),
            Lookup::Ready(Err(e)) => panic!("an expired healthy name failed: {e}"),
            Lookup::Waiting(_) => panic!("an expired healthy name waited on the saturated lane"),
        }
    }
    hole.open();
}

#[test]
fn an_answer_past_the_stale_ceiling_is_not_served() {
    let limits = Limits {
        ttl: Duration::from_millis(10),
        stale: Duration::from_millis(10),
        ..no_shares(1, 1)
    };
    let (r, hole) = Hole::resolver(limits);
    let healthy = Caller::Tenant("healthy");
    assert!(within(r.start("good.example", healthy)).is_some_and(|a| a.is_ok()));
    assert_eq!(flood(&r, &hole, "evil", 10, 1), 2);
    std::thread::sleep(Duration::from_millis(50));
    assert!(matches!(
        r.start("good.example", healthy),
        Lookup::Ready(Err(ResolveError::Busy { .. }))
    ));
    hole.open();
}

#[test]
fn an_expired_answer_is_refreshed_in_the_background() {
    let limits = Limits {
        ttl: Duration::from_millis(10),
        ..Limits::default()
    };
    let (r, hole) = Hole::resolver(limits);
    assert!(within(r.start_as("good.example")).is_some_and(|a| a.is_ok()));
    std::thread::sleep(Duration::from_millis(30));
    assert!(matches!(r.start_as("good.example"), Lookup::Ready(Ok(_))));
    let give_up = Instant::now() + Duration::from_secs(10);
    while hole.calls.load(Ordering::SeqCst) < 2 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(hole.calls.load(Ordering::SeqCst), 2, "no refresh ran");
}

#[test]
fn the_store_resolves_while_webhook_lookups_saturate_their_lane() {
    let (r, hole) = Hole::resolver(no_shares(4, 256));
    assert_eq!(flood(&r, &hole, "evil", 1000, 4), 260);
    let got = within(r.start("redis.example", Caller::Store));
    assert_eq!(
        got.expect("an answer within the bound")
            .expect("an address")[..],
        [local()]
    );
    hole.open();
}

/// A healthy tenant's new name, asked while `floods` (tenant, black-holed lookups it gets
/// running) fill the default webhook lane: answered within the bound, not after the black
/// holes' timeout.
fn healthy_name_resolves_during(floods: &[(&str, usize)]) {
    let (r, hole) = Hole::resolver(Limits::default());
    let share = Limits::default().webhook.per_owner;
    for &(tenant, running) in floods {
        assert_eq!(flood(&r, &hole, tenant, 300, running), share, "{tenant}");
    }
    let got = within(r.start("new.example", Caller::Tenant("healthy")));
    assert_eq!(
        got.expect("an answer within the bound")
            .expect("an address")[..],
        [local()]
    );
    hole.open();
}

/// Another tenant's new name is queued, and gets a thread the flood could not take.
#[test]
fn one_tenant_cannot_take_the_whole_webhook_lane() {
    healthy_name_resolves_during(&[("evil", 2)]);
}

/// Two tenants whose names black-hole flood the lane together: between them they hold 3 of
/// the 4 threads (2 + 1), never all, and a third tenant's new name is looked up at once.
#[test]
fn two_colluding_tenants_cannot_take_every_thread_from_a_third() {
    healthy_name_resolves_during(&[("evil1", 2), ("evil2", 1)]);
}
