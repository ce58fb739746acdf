use super::*;
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

fn local() -> IpAddr {
    IpAddr::from([127, 0, 0, 1])
}

#[test]
fn callers_of_one_host_share_one_lookup() {
    let (r, calls, answer) = gated(Limits::default());
    let waiting: Vec<Lookup> = (0..10).map(|_| r.start("one.example")).collect();
    answer.send(Ok(vec![local()])).expect("gate");
    for l in waiting {
        assert_eq!(wait(l).expect("an answer")[..], [local()]);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Cached now: no second lookup.
    assert!(matches!(r.start("one.example"), Lookup::Ready(Ok(_))));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_failure_is_remembered_for_the_negative_ttl() {
    let (r, calls, answer) = gated(Limits::default());
    let first = r.start("nowhere.example");
    answer.send(Err("no such host".into())).expect("gate");
    assert!(matches!(wait(first), Err(ResolveError::Failed { .. })));
    for _ in 0..5 {
        assert!(matches!(
            r.start("nowhere.example"),
            Lookup::Ready(Err(ResolveError::Failed { .. }))
        ));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_full_queue_fails_at_once_instead_of_blocking() {
    let limits = Limits {
        threads: 1,
        queue: 2,
        ..Limits::default()
    };
    let (r, calls, answer) = gated(limits);
    let a = r.start("a.example");
    // Wait until the only thread holds `a` in the black hole.
    let give_up = Instant::now() + Duration::from_secs(10);
    while calls.load(Ordering::SeqCst) == 0 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(1));
    }
    let b = r.start("b.example");
    let c = r.start("c.example");
    assert_eq!(r.queued_and_running(), (2, 1));
    let t = Instant::now();
    assert!(matches!(
        r.start("d.example"),
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
    let first = r.start("hole.example");
    std::thread::sleep(Duration::from_millis(80));
    let t = Instant::now();
    assert!(matches!(
        r.start("hole.example"),
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
    let got = ex.run(async { r.resolve("hole.example", 80).await });
    assert!(matches!(got, Err(ResolveError::Timeout { .. })), "{got:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(answer);
}

#[test]
fn ip_literals_are_not_looked_up() {
    let (r, calls, _answer) = gated(Limits::default());
    for host in ["127.0.0.1", "::1", "[::1]"] {
        assert!(matches!(r.start(host), Lookup::Ready(Ok(_))), "{host}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
