//! A shard that shares its thread (HTTP connections, a store) must keep its promises and let
//! the others run: it keeps firing even when glommio's scheduler misbehaves, its other tasks
//! stay prompt while it spins or fires dense timers, and a shutdown answers every caller.
//! The bounds asserted here are correctness bounds ("absurdly late"), not timing targets.

#[path = "support/held.rs"]
mod held;

use punctual::clock::clock_ns;
use punctual::engine::Pinning;
use punctual::{EngineBuilder, Error, UtcMicros};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

fn realtime_us() -> u64 {
    clock_ns(libc::CLOCK_REALTIME) / 1_000
}

/// A companion task on every shard, as an HTTP connection would be: it sleeps on glommio
/// timers in a loop and records how much later than asked it woke up (µs, the worst).
fn companion(worst_overshoot_us: Arc<AtomicU64>, stop: Arc<AtomicBool>, nap: Duration) {
    glommio::spawn_local(async move {
        while !stop.load(Ordering::Relaxed) {
            let asked = Instant::now();
            glommio::timer::sleep(nap).await;
            let over = asked.elapsed().saturating_sub(nap).as_micros() as u64;
            worst_overshoot_us.fetch_max(over, Ordering::Relaxed);
        }
    })
    .detach();
}

/// Schedules `n` timers spread over `span` across every shard and returns (fired, early,
/// worst lateness in µs) once all fired or `give_up` passed.
fn fire_spread(
    engine: &punctual::Engine,
    rx: &mpsc::Receiver<(u64, u64)>,
    n: u64,
    span: Duration,
) -> (u64, u64, u64) {
    let h = engine.handle();
    let start = h.now().0 + 50_000;
    for i in 0..n {
        let deadline = start + i * span.as_micros() as u64 / n;
        h.schedule("t", &format!("k{i}"), UtcMicros(deadline), b"")
            .expect("scheduled");
    }
    let give_up = Instant::now() + span + Duration::from_secs(20);
    let (mut fired, mut early, mut worst) = (0, 0, 0);
    while fired < n && Instant::now() < give_up {
        if let Ok((deadline, at)) = rx.recv_timeout(Duration::from_millis(100)) {
            fired += 1;
            if at < deadline {
                early += 1;
            }
            worst = worst.max(at.saturating_sub(deadline));
        }
    }
    (fired, early, worst)
}

fn recording_builder(shards: usize) -> (EngineBuilder, mpsc::Receiver<(u64, u64)>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let builder = EngineBuilder::new()
        .shards(shards)
        .pinning(Pinning::None)
        .spin(Duration::ZERO)
        .on_fire(move |f| {
            let _ = tx.lock().map(|tx| tx.send((f.deadline.0, realtime_us())));
        });
    (builder, rx)
}

/// glommio 0.9 parks its executor with runnable tasks when its preemption timer expired
/// before a scheduling round began. Here the timer is far shorter than one reactor pass, so
/// that happens all the time; the shards' own yielding and the watchdog must keep every timer
/// firing, never early, and none absurdly late. A start-up that hangs fails after 10 s (the
/// engine's own start timeout), never hangs the suite.
#[test]
fn shards_keep_firing_when_glommio_preempts_before_every_round() {
    let (builder, rx) = recording_builder(2);
    let worst_companion = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (w, s) = (worst_companion.clone(), stop.clone());
    let engine = builder
        .glommio_preempt_timer(Duration::from_micros(20))
        .on_shard_start(move |_, _| companion(w.clone(), s.clone(), Duration::from_millis(1)))
        .build()
        .expect("engine starts under a 20 µs preemption timer");
    let (fired, early, worst) = fire_spread(&engine, &rx, 400, Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let stats = engine.handle().stats();
    engine.shutdown().expect("clean shutdown");
    let wakes: u64 = stats.iter().map(|s| s.watchdog_wakes_total).sum();
    let stalls: u64 = stats.iter().map(|s| s.executor_stalls_total).sum();
    let runnable: u64 = stats.iter().map(|s| s.executor_runnable_sleeps_total).sum();
    eprintln!("watchdog wakes {wakes}, executor stalls {stalls}, of which runnable {runnable}");
    assert!(stalls <= wakes, "every stall counted was ended by a wake");
    assert!(runnable <= stalls, "a runnable sleep is a kind of stall");
    assert_eq!(fired, 400, "timers lost (worst lateness so far {worst} µs)");
    assert_eq!(early, 0, "timers fired before their deadline");
    assert!(
        worst < 500_000,
        "a timer fired {worst} µs late: the shard slept through its deadline ({stats:?})"
    );
}

/// Under a preemption timer shorter than a reactor pass, a shard's body runs as a task of its
/// own, and its first poll and its end are hand-overs between tasks that glommio's park bug
/// can sleep through, outside the shard loop's own guards. Start and stop many engines so:
/// each must come up and go down (a shutdown that leaves a shard behind fails after the
/// engine's own 60 s limit, never hangs the suite).
#[test]
fn engines_under_a_20_us_preemption_timer_start_and_stop_every_time() {
    for round in 0..100 {
        let (builder, _rx) = recording_builder(2);
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s) = (Arc::new(AtomicU64::new(0)), stop.clone());
        let engine = builder
            .glommio_preempt_timer(Duration::from_micros(20))
            .on_shard_start(move |_, _| companion(w.clone(), s.clone(), Duration::from_millis(1)))
            .build()
            .unwrap_or_else(|e| panic!("round {round}: the engine did not start: {e}"));
        std::thread::sleep(Duration::from_millis(10));
        stop.store(true, Ordering::Relaxed);
        let stopped = Instant::now();
        engine
            .shutdown()
            .unwrap_or_else(|e| panic!("round {round}: the shutdown failed: {e}"));
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "round {round}: the shutdown took {:?}",
            stopped.elapsed()
        );
    }
}

/// Deadlines closer together than the spin window: the shard would spin from one to the next
/// without end. Its companion task must still get the thread within a bounded time.
#[test]
fn dense_timers_within_the_spin_window_leave_the_shards_other_tasks_prompt() {
    let (builder, rx) = recording_builder(1);
    let worst_companion = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (w, s) = (worst_companion.clone(), stop.clone());
    let engine = builder
        .spin(Duration::from_millis(2))
        .on_shard_start(move |_, _| companion(w.clone(), s.clone(), Duration::from_millis(1)))
        .build()
        .expect("engine starts");
    // One timer every 100 µs for 1.5 s: always within the 2 ms spin window of the next.
    let (fired, early, _) = fire_spread(&engine, &rx, 15_000, Duration::from_millis(1_500));
    stop.store(true, Ordering::Relaxed);
    engine.shutdown().expect("clean shutdown");
    assert_eq!(fired, 15_000);
    assert_eq!(early, 0);
    // A shard that does not yield after a pass that fired keeps its companion waiting for much
    // of the 1.5 s spread (723 ms with that yield taken out). The bound sits well between: a
    // host that deschedules the thread adds a pause of its own (101 ms was seen once under
    // AddressSanitizer on a busy 2-core host), which is not the shard's doing.
    let worst = worst_companion.load(Ordering::Relaxed);
    assert!(
        worst < 300_000,
        "the shard's other task waited {worst} µs past its 1 ms timer while the shard spun"
    );
}

/// Callers blocked on a shard when it stops are answered, not left waiting forever.
#[test]
fn shutdown_answers_the_calls_still_on_the_ring() {
    let (hold, holder) = held::hold();
    let engine = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .on_fire(move |_| holder.hold())
        .build()
        .expect("engine starts");
    let h = engine.handle();
    hold.enter(&h, "hold");
    // The shard is busy: these calls wait on its ring.
    let (done_rx, callers) = held::callers(&h, 8);
    std::thread::sleep(Duration::from_millis(100));
    let stopper = std::thread::spawn(move || engine.shutdown());
    std::thread::sleep(Duration::from_millis(50));
    hold.release();
    for _ in 0..8 {
        let r = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("every caller is answered after shutdown");
        assert!(
            matches!(r, Ok(_) | Err(Error::ShuttingDown)),
            "unexpected answer {r:?}"
        );
    }
    for c in callers {
        c.join().expect("caller thread");
    }
    stopper
        .join()
        .expect("stopper thread")
        .expect("clean shutdown");
}

/// 4,096 timers due at one instant whose fires each cost 10 µs of the shard's thread, as a
/// webhook's do (a JSON body, an HMAC, a task spawn): one pass would hold the thread for
/// 40 ms. The pass ends with its slice of time and the shard yields: another task on the
/// shard runs while the burst is still being fired, and every timer fires once.
#[test]
fn a_burst_of_costly_fires_lets_the_shards_other_tasks_run_before_it_ends() {
    const N: u64 = 4096;
    let fired = Arc::new(AtomicU64::new(0));
    // What the companion task saw of the burst each time it ran: fires done by then.
    let seen = Arc::new(Mutex::new(Vec::<u64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let counted = fired.clone();
    let (fired_c, seen_c, stop_c) = (fired.clone(), seen.clone(), stop.clone());
    let engine = EngineBuilder::new()
        .shards(1)
        .pinning(Pinning::None)
        .on_fire(move |_| {
            let start = Instant::now();
            while start.elapsed() < Duration::from_micros(10) {
                std::hint::spin_loop();
            }
            counted.fetch_add(1, Ordering::Relaxed);
        })
        .on_shard_start(move |_, _| {
            let (fired, seen, stop) = (fired_c.clone(), seen_c.clone(), stop_c.clone());
            glommio::spawn_local(async move {
                while !stop.load(Ordering::Relaxed) {
                    glommio::timer::sleep(Duration::from_micros(100)).await;
                    let n = fired.load(Ordering::Relaxed);
                    if let Ok(mut seen) = seen.lock() {
                        seen.push(n);
                    }
                }
            })
            .detach();
        })
        .build()
        .expect("engine starts");
    let h = engine.handle();
    // Far enough ahead that all are scheduled before it (a slow host could only make the
    // burst look split when it is not, never the reverse).
    let due = UtcMicros(h.now().0 + 1_000_000);
    for i in 0..N {
        h.schedule("t", &format!("k{i}"), due, b"")
            .expect("scheduled");
    }
    let give_up = Instant::now() + Duration::from_secs(30);
    while fired.load(Ordering::Relaxed) < N && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    engine.shutdown().expect("clean shutdown");
    assert_eq!(fired.load(Ordering::Relaxed), N, "every timer fired");
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let during: Vec<u64> = seen.iter().copied().filter(|&n| n > 0 && n < N).collect();
    let before = seen.iter().filter(|&&n| n == 0).count();
    assert!(
        !during.is_empty(),
        "the shard's other task never ran while the burst fired: of its {} looks, {before} \
         came before the first fire and {} after the last",
        seen.len(),
        seen.len() - before
    );
}
