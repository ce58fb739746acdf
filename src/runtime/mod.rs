//! The runtime's room: what punctual does about glommio, in one place. Each shard runs one
//! glommio `LocalExecutor` pinned to its core; the shard's loop (`crate::shard`), its HTTP
//! connections (`crate::api`), its webhook deliveries (`crate::sink::webhook`) and its store's
//! task all share that executor's thread. glommio 0.9 has behaviours that such a thread must
//! not meet, and hyper expects a runtime glommio is not; the modules here are the answers, and
//! nothing else in the house works around glommio.
//!
//! | module | what it answers |
//! |---|---|
//! | [`cooperate`] | how long work on a shard's thread may hold it: ~200 µs slices and the yield between them, a yield the reactor must see (`Yield`), and a slice that ends when the thread's parked shard is due (`ShardAway`) |
//! | [`doorbell`] | how another thread wakes a task on a shard's executor without glommio's foreign-waker path (whose stale flag leaves a latency completion with no task, and whose reference count races) |
//! | [`hyperio`] | glommio sockets (plain or TLS) and timers adapted to hyper; writes bounded per slice, and a write-stall timeout |
//! | [`watchdog`] | the backstop: a thread that wakes a shard whose executor sleeps in io_uring past its time, and counts each such stall |
//!
//! The shard's own part, its park (`shard/park.rs`: glommio's timer raced against the ring's
//! wake socket, a nap bounded by `MAX_NAP` on a shared thread) and its wake socket
//! (`shard/wakee.rs`), stays with the loop, which it is part of.
//!
//! # Giving the thread back
//!
//! Every task on a shard's thread gives it away itself; glommio's preemption timer is never
//! relied on. Long work runs in `cooperate` slices, and two rules came from glommio and hyper:
//!
//! - a glommio `Timer` is ready whenever it is polled after its deadline, reactor or not, and
//!   hyper's connection task polls a handler up to 16 times a turn and then wakes itself: a
//!   handler's yield on a plain timer was no yield, and a 16 MiB body was read and copied for
//!   1–10 ms with the shard's park long over. A `cooperate::Yield` is ready only once the
//!   reactor fired its timer (guarded by
//!   `cooperate::tests::a_yield_polled_again_by_its_own_task_waits_for_the_reactor`);
//! - a parked shard says when its park ends (`cooperate::ShardAway`), and every slice on the
//!   thread ends at its next check after that instant, not at its own end
//!   (`cooperate::tests::a_slice_ends_when_the_thread_s_shard_is_due`).
//!
//! ## The glommio behaviours this design avoids
//!
//! glommio 0.9 can put its thread to sleep while a task is runnable. Its `LocalExecutor::run`
//! parks (`react` with no preemption timer) whenever `run_task_queues` ran nothing, and that
//! runs nothing when `need_preempt()` is already true at its first check, without looking at
//! whether a task queue is active (`executor/mod.rs`). `need_preempt()` means "the latency
//! ring's completion queue is not empty": `reactor.rs` compares that queue's head and tail
//! through the pointers `sys/uring.rs::preempt_pointers` hands it. The park then sleeps in
//! `io_uring_enter` unless its own reap finds a completion with a task behind it, a due glommio
//! timer, a foreign wake or a blocking-pool result. So the executor sleeps with work runnable
//! when a latency-ring completion *with no task behind it* lands between a round's I/O poll
//! (which empties that ring) and its first check, and nothing else is pending; it sleeps until
//! the next timer or I/O, which may be seconds away. What lands in the latency ring, and what
//! punctual does about each (no patched glommio; the upstream fix, "do not park while a task
//! queue is runnable", is in no release on crates.io):
//!
//! | trigger | punctual's side | guarded by |
//! |---|---|---|
//! | the preemption timer (armed at every poll) fires before the check: the poll took longer than the timer | glommio's default 100 ms is kept, never a shorter one (250 µs fired thousands of timers 0.1–2.7 s late); shards yield on their own, never relying on preemption. Left: a 100 ms stall of the thread inside that window | `tests/shard_cooperation.rs::shards_keep_firing_when_glommio_preempts_before_every_round` (a 20 µs timer: the trigger on almost every round) |
//! | the notifier `eventfd` read, completed by a foreign wake: glommio writes the `eventfd` when the executor is flagged asleep, and the flag goes stale (raised before each sleep, cleared only after one really taken), so a wake of an awake executor that already took the waker leaves a completion with no task | replies from other threads (the shards answering HTTP tasks) reach a shard's tasks through its `doorbell`: a main-ring read with a task behind it, no glommio foreign wake. the journal's I/O thread answers the same way (`store/journal/io.rs`). So do the name resolver's answers (`resolve.rs`). Left: a doorbell whose bell cannot be written (those wakes fall back to glommio's path, counted in `punctual_doorbell_fallback_wakes_total`), and the watchdog's own wakes, which exist to end such a sleep | `doorbell::tests::replies_from_another_thread_arrive_through_the_doorbell`, `doorbell::tests::a_bell_that_cannot_be_rung_strands_no_reply` |
//! | the same `eventfd`, written by glommio's blocking pool on each result, by tasks in `Latency::Matters` queues, or by its throughput timer (after `ring_depth` main-ring completions) | no latency-sensitive queue; the journal's I/O and name resolution run on threads of their own, not the blocking pool | — |
//! | the round's own `install_eventfd`, which re-arms that read and completes it at once when the counter is already set | as above | — |
//! | accept, connect and `recv` (peek, datagrams) completions: a waiting task is woken by the park's reap, so the park does not sleep; a cancelled one (a dropped accept at drain, a connect timeout) leaves a completion with no task | the shards' wake sockets and stream reads are main-ring polls (glommio's stream reads try a non-blocking read first, then poll) | — |
//!
//! Whatever is left is bounded, for every task on the thread: a shard that shares its thread
//! never parks for longer than `MAX_NAP` (2 ms, `park.rs`), and its park's timer ends such a
//! sleep; and the `watchdog` wakes a shard loop still asleep 1 ms past its time from another
//! thread.
//! A watchdog wake that finds the executor asleep in `io_uring_enter` is counted
//! (`punctual_executor_stalls_total`, with every wake in `punctual_shard_watchdog_wakes_total`),
//! and so, apart, is each of those where the shard's task had been runnable for 1 ms, because
//! what its park or yield waited on had woken it (`punctual_executor_runnable_sleeps_total`,
//! `watchdog::Noter`): that is the park bug itself, where the rest are timers or I/O that came
//! late to a sleeping executor. A park's timer ends one such sleep; the round after it can
//! sleep again, with no timer left until the loop runs, which is why the watchdog keeps
//! waking a sleeping executor until the loop has run.
//! A stall of another task that the nap ends is bounded but not counted.
//!
//! The watchdog guards the shard's thread from its executor's first task to its last, not
//! only the loop. Under a preemption timer shorter than a reactor pass (tests) the loop runs
//! as a task of its own, and the hand-overs to it and back (its first poll, and the wake of
//! the task that awaits it when it ends) were slept through the same way: a shutdown left a
//! shard behind in about one engine in 50. The task that runs the executor registers first
//! (`Pulse::register_home`) and is handed back to the watchdog when the shard is done
//! (`Pulse::hand_back`; `engine::shard_start::run_under_preempt_timer`), guarded by
//! `tests/shard_cooperation.rs::engines_under_a_20_us_preemption_timer_start_and_stop_every_time`.
//! That window, not the wakes' noting, is what failed the stress test when the park and yield
//! were first wrapped in `Pulse::noted`.
//!
//!
//! # Cost
//!
//! A yield: one glommio timer and one reactor pass, a few microseconds, only on a shared
//! thread and only after work. A doorbell wake: a queue push and, when the shard sleeps, one
//! byte on a socket. The watchdog: one thread, a 1 ms tick that reads each shard's pulse.

pub(crate) mod cooperate;
pub(crate) mod doorbell;
pub(crate) mod hyperio;
pub(crate) mod watchdog;
