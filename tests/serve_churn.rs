//! Durable timers under churn, end to end: the real `punctual` binary with two shards and a
//! real redis-server. Each round, 10,000 timers arrive in batches of 500 from four keep-alive
//! connections (delays 1–4 s); right after, eight connections cancel 1,000 random ones and
//! reschedule 500 (delays 1–3 s) while the early ones already fire; then the round's timers
//! fire with no request in flight, until 600 ms past its last deadline. Five rounds, each with
//! its own four tenants, on the same service. Late fires under this load come in bursts that
//! need not occur in every round, and a request that arrives meanwhile can cut a burst short:
//! hence the quiet stretch at the end of each round, and several rounds.
//!
//! The tenants' streams must then hold what the client was told (the model is in
//! `support/churn/`): every acknowledged timer that was not cancelled or replaced exactly
//! once, with its version, deadline and payload; no cancelled or replaced version; nothing
//! early; nothing more than 500 ms late (a bound that only a bug crosses, not a timing
//! target). `/metrics` must count the same fires and nothing may be left pending.
//!
//! The requests are drawn from a seeded RNG: `PUNCTUAL_CHURN_SEED=<n>` replays a run's.

mod api_support;
#[path = "support/churn/mod.rs"]
mod churn;
#[path = "support/keepalive.rs"]
mod keepalive;
#[path = "support/redis_server.rs"]
mod redis_server;

use api_support::Server;
use churn::{Check, Http, Plan, Spec};
use redis_server::RedisServer;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const DEFAULT_SEED: u64 = 0x00c0_ffee_7153;

fn spec() -> Spec {
    let seed = std::env::var("PUNCTUAL_CHURN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    Spec {
        rounds: 5,
        settle_ms: Some(600),
        tenants: 4,
        timers_per_tenant: 2_500,
        batch: 500,
        register_conns: 4,
        delay_ms: (1_000, 4_000),
        churn_conns: 8,
        deletes: 1_000,
        puts: 500,
        put_delay_ms: (1_000, 3_000),
        seed,
    }
}

#[test]
fn under_churn_every_acknowledged_timer_fires_once_on_time_and_no_cancelled_one_fires() {
    let spec = spec();
    let redis = RedisServer::start();
    let url = redis.url();
    let server = Server::start(&["--redis", &url, "--shards", "2"]);
    let plan = Plan::new(&spec);
    let out = churn::run(&spec, &plan, || Http::new(server.addr));

    // Every deadline has passed (each round settles); poll until each due timer is there.
    let mut con = redis.client().expect("redis client");
    let give_up = Instant::now() + Duration::from_secs(10);
    churn::collect(&mut con, &spec, &out.model, give_up);
    // A moment more for anything that would arrive twice, then the final read.
    std::thread::sleep(Duration::from_millis(300));
    let streams = churn::collect(&mut con, &spec, &out.model, Instant::now());
    let check = churn::check(&out.model, &streams);
    let (fired_total, pending) = settled_metrics(&server, check.entries);

    let mut report = String::new();
    let _ = writeln!(
        report,
        "seed {} (PUNCTUAL_CHURN_SEED); registered {} acknowledged in {:.2} s, churn {:.2} s; \
         {} answered 503, {} exchanges lost",
        spec.seed,
        out.model.acknowledged,
        out.register_secs,
        out.churn_secs,
        out.model.unavailable,
        out.model.lost.len(),
    );
    let _ = write!(report, "{check}");
    let _ = writeln!(
        report,
        "/metrics: punctual_timers_fired_total {fired_total:?}, punctual_timers_pending {pending:?}"
    );

    let mut problems = problems(&check);
    if !out.model.violations.is_empty() {
        problems.push(format!(
            "{} answers contradict the contract, e.g. {:?}",
            out.model.violations.len(),
            &out.model.violations[..out.model.violations.len().min(5)]
        ));
    }
    if !out.model.lost.is_empty() {
        problems.push(format!(
            "{} exchanges failed (the server must not drop a connection), e.g. {:?}",
            out.model.lost.len(),
            &out.model.lost[..out.model.lost.len().min(5)]
        ));
    }
    if fired_total != Some(check.entries as f64) {
        problems.push(format!(
            "punctual_timers_fired_total is {fired_total:?}, the streams hold {} entries",
            check.entries
        ));
    }
    if pending != Some(0.0) {
        problems.push(format!(
            "punctual_timers_pending is {pending:?} after every deadline passed"
        ));
    }
    assert!(problems.is_empty(), "{}\n{report}", problems.join("\n"));
    eprintln!("{report}");
}

/// The failures of `check`, one line each.
fn problems(check: &Check) -> Vec<String> {
    check
        .failures()
        .into_iter()
        .map(|(what, list)| format!("{what}: {}", list.len()))
        .collect()
}

/// (fired total, pending) summed over the shards, once the fired total matches `entries` or
/// after a few seconds: a fire is counted when it happens, its entry lands a flush later.
fn settled_metrics(server: &Server, entries: usize) -> (Option<f64>, Option<f64>) {
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        let text = String::from_utf8_lossy(&server.req("GET", "/metrics", "").body).into_owned();
        let fired = churn::metric_sum(&text, "punctual_timers_fired_total");
        let pending = churn::metric_sum(&text, "punctual_timers_pending");
        if fired == Some(entries as f64) || Instant::now() > give_up {
            return (fired, pending);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The checker itself, on a hand-made model and streams: each kind of fault is reported.
#[test]
fn the_check_reports_missing_duplicate_cancelled_replaced_early_and_late_entries() {
    use churn::{Answer, Item, Model};
    use redis_server::StreamEntry;
    let item = |key: &str| Item {
        key: key.into(),
        delay_ms: 1_000,
        payload: format!(r#"{{"k":"{key}"}}"#),
    };
    let at = |version, fire_at_us| Answer::Scheduled {
        version,
        fire_at_us,
        replaced: false,
    };
    let mut m = Model::default();
    for (v, key) in [
        "ok",
        "dup",
        "gone",
        "early",
        "late",
        "cancelled",
        "moved",
        "lost",
    ]
    .into_iter()
    .enumerate()
    {
        m.schedule("t", &item(key), &at(v as u64 + 1, 1_000_000));
    }
    m.cancel("t", "cancelled", &Answer::Cancelled);
    let replaced = Answer::Scheduled {
        version: 100,
        fire_at_us: 2_000_000,
        replaced: true,
    };
    m.schedule("t", &item("moved"), &replaced);
    m.schedule("t", &item("lost"), &Answer::Unavailable);
    let entry = |key: &str, version, fire_at_us, fired_at_us| StreamEntry {
        id_ms: fired_at_us / 1000,
        key: key.into(),
        version,
        fire_at_us,
        fired_at_us,
        payload: format!(r#"{{"k":"{key}"}}"#),
    };
    let streams = vec![(
        "t".to_string(),
        vec![
            entry("ok", 1, 1_000_000, 1_000_100),
            entry("dup", 2, 1_000_000, 1_000_100),
            entry("dup", 2, 1_000_000, 1_000_100),
            entry("early", 4, 1_000_000, 999_999),
            entry("late", 5, 1_000_000, 1_600_000),
            entry("cancelled", 6, 1_000_000, 1_000_100),
            entry("moved", 7, 1_000_000, 1_000_100),
            entry("moved", 100, 2_000_000, 2_000_100),
            // Uncertain: its entries are not counted, but still held to the deadline.
            entry("lost", 8, 1_000_000, 1_000_100),
            entry("lost", 99, 3_000_000, 2_999_000),
        ],
    )];
    let c = churn::check(&m, &streams);
    let keys = |list: &[churn::Seen]| list.iter().map(|s| s.key.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&c.missing), ["gone"], "{c}");
    assert_eq!(keys(&c.duplicates), ["dup"], "{c}");
    assert_eq!(keys(&c.forbidden), ["cancelled", "moved"], "{c}");
    assert_eq!(keys(&c.early), ["early", "lost"], "{c}");
    assert_eq!(keys(&c.late), ["late"], "{c}");
    assert!(c.unknown.is_empty() && c.wrong_record.is_empty(), "{c}");
    assert_eq!((c.due, c.entries, c.uncertain_keys), (6, 10, 1), "{c}");
    assert!(m.violations.is_empty(), "{:?}", m.violations);
}
