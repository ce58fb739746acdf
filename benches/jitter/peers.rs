//! The systems punctual is measured against: tokio's timers (one `sleep_until` per timer, or a
//! `DelayQueue`), on the current-thread and multi-thread runtimes, and the two floors (the
//! kernel's `clock_nanosleep`, a spinning thread).

use super::*;

fn tokio_runtime(multi: bool) -> tokio::runtime::Runtime {
    if multi {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
    }
    .expect("tokio runtime")
}

/// Maps a UTC µs deadline onto tokio's monotonic clock, via one (realtime, Instant) pair.
fn instant_mapper() -> impl Fn(u64) -> tokio::time::Instant + Clone {
    let rt0 = clock_ns(libc::CLOCK_REALTIME);
    let i0 = tokio::time::Instant::now();
    move |d_us: u64| {
        let d_ns = d_us * 1_000;
        if d_ns >= rt0 {
            i0 + Duration::from_nanos(d_ns - rt0)
        } else {
            i0
        }
    }
}

/// Runs `body` on a runtime: the current-thread one on its own thread pinned to the shard core.
fn on_runtime(multi: bool, body: impl FnOnce(&tokio::runtime::Runtime) + Send + 'static) {
    if multi {
        body(&tokio_runtime(true));
    } else {
        std::thread::spawn(move || {
            pin(SHARD_CORE);
            body(&tokio_runtime(false));
        })
        .join()
        .expect("tokio thread");
    }
}

pub(super) fn run_tokio_sleep(
    deadlines: &[u64],
    rec: &Arc<Recorder>,
    last: u64,
    w: &Workload,
    multi: bool,
) {
    let deadlines = deadlines.to_vec();
    let rec = rec.clone();
    let grace = grace(w);
    on_runtime(multi, move |rt| {
        rt.block_on(async move {
            let map = instant_mapper();
            for (i, &d) in deadlines.iter().enumerate() {
                let at = map(d);
                let rec = rec.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(at).await;
                    rec.fire(i);
                });
            }
            let until = map(last) + grace;
            while rec.fired() < deadlines.len() && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
    });
}

pub(super) fn run_delay_queue(
    deadlines: &[u64],
    rec: &Arc<Recorder>,
    last: u64,
    w: &Workload,
    multi: bool,
) {
    use futures_util::StreamExt;
    let deadlines = deadlines.to_vec();
    let rec = rec.clone();
    let grace = grace(w);
    on_runtime(multi, move |rt| {
        rt.block_on(async move {
            let map = instant_mapper();
            let until = map(last) + grace;
            let task = tokio::spawn(async move {
                let mut q = tokio_util::time::DelayQueue::with_capacity(deadlines.len());
                for (i, &d) in deadlines.iter().enumerate() {
                    q.insert_at(i, map(d));
                }
                while let Ok(Some(expired)) = tokio::time::timeout_at(until, q.next()).await {
                    rec.fire(expired.into_inner());
                }
            });
            let _ = task.await;
        });
    });
}

pub(super) fn run_floor(deadlines: &[u64], rec: &Arc<Recorder>, spin: bool) {
    let mut order: Vec<usize> = (0..deadlines.len()).collect();
    order.sort_by_key(|&i| deadlines[i]);
    let deadlines = deadlines.to_vec();
    let rec = rec.clone();
    std::thread::spawn(move || {
        pin(SHARD_CORE);
        set_timer_slack_1ns();
        for i in order {
            let d_ns = deadlines[i] * 1_000;
            if spin {
                while clock_ns(libc::CLOCK_REALTIME) < d_ns {
                    std::hint::spin_loop();
                }
            } else {
                let ts = libc::timespec {
                    tv_sec: (d_ns / 1_000_000_000) as libc::time_t,
                    tv_nsec: (d_ns % 1_000_000_000) as libc::c_long,
                };
                // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
                while unsafe {
                    libc::clock_nanosleep(
                        libc::CLOCK_REALTIME,
                        libc::TIMER_ABSTIME,
                        &ts,
                        std::ptr::null_mut(),
                    )
                } == libc::EINTR
                {}
            }
            rec.fire(i);
        }
    })
    .join()
    .expect("floor thread");
}
