//! Paging (`--page-horizon-s`) through the real service: `punctual serve` on a real data
//! directory with a two-second horizon, so that most timers are paged, loaded and fired within
//! the test, and SIGKILLed and started again on the same directory between rounds. A model of
//! what must fire is kept beside it, as a `BTreeMap`; every webhook delivery is checked
//! against it: exactly the versions the model holds fire, none before its deadline, none lost,
//! and GETs and cancels of paged timers answer as the model says.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{Configured as Svc, Server};
use receiver::{now_us, Receiver};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// The horizon the test's server pages beyond, in seconds.
const HORIZON_S: u64 = 2;
/// A timer this close to its deadline is left alone by the test's ops, so that the model never
/// races a fire.
const SETTLED_US: u64 = 1_500_000;
/// How long after its deadline the test still leaves a timer alone: its fire and delivery
/// are done by then, even across a restart.
const GRACE_US: u64 = 5_000_000;

/// A journal server of 2 shards on `data` with `toml` as its config file, paging beyond
/// `HORIZON_S`.
fn serve(data: &Path, toml: &str) -> Svc {
    let horizon = HORIZON_S.to_string();
    Svc::journal(data, toml, &["--shards", "2", "--page-horizon-s", &horizon])
}

/// What must happen: the pending timers, and every version that must fire.
#[derive(Default)]
struct Model {
    /// (tenant, key) → (deadline µs, version, payload).
    pending: BTreeMap<(String, String), (u64, u64, u64)>,
    /// (tenant, key, version) → deadline µs.
    fire: BTreeMap<(String, String, u64), u64>,
}

impl Model {
    /// The pending timer of `id`, unless it may be firing (then `Err`: leave it alone).
    fn settled(&self, id: &(String, String), now: u64) -> Result<Option<(u64, u64, u64)>, ()> {
        match self.pending.get(id) {
            Some(p) if p.0 < now + SETTLED_US => Err(()),
            other => Ok(other.copied()),
        }
    }

    fn scheduled(&mut self, id: (String, String), deadline: u64, version: u64, payload: u64) {
        if let Some(old) = self
            .pending
            .insert(id.clone(), (deadline, version, payload))
        {
            self.fire.remove(&(id.0.clone(), id.1.clone(), old.1));
        }
        self.fire.insert((id.0, id.1, version), deadline);
    }

    fn cancelled(&mut self, id: &(String, String)) {
        if let Some(old) = self.pending.remove(id) {
            self.fire.remove(&(id.0.clone(), id.1.clone(), old.1));
        }
    }

    /// Forgets the timers due more than `GRACE_US` before `now`: they fired (or fire after
    /// a restart), and the model's `fire` keeps them. Until then `settled` leaves them alone.
    fn forget_due(&mut self, now: u64) {
        self.pending.retain(|_, p| p.0 + GRACE_US > now);
    }
}

/// One round of random ops against the server and the model.
fn round(s: &Server, rx: &Receiver, model: &mut Model, rng: &mut fastrand::Rng, ops: usize) {
    let url = rx.url("fire");
    for _ in 0..ops {
        let now = now_us();
        model.forget_due(now);
        let tenant = format!("t{}", rng.u32(0..3));
        let key = format!("k{}", rng.u32(0..40));
        let id = (tenant.clone(), key.clone());
        let Ok(current) = model.settled(&id, now) else {
            continue;
        };
        // Most far enough to be paged; some near, so that replaces cross the horizon.
        let ahead_ms = if rng.u32(0..4) == 0 {
            rng.u64(1_600..2_000)
        } else {
            rng.u64(2_600..7_000)
        };
        let payload = rng.u64(..);
        match rng.u32(0..10) {
            0..=5 => {
                let body = json!({"fire_at_ms": now / 1_000 + ahead_ms, "payload": payload, "callback": {"url": url}});
                let (st, r) = s.json(
                    "PUT",
                    &format!("/v1/timers/{tenant}/{key}"),
                    &body.to_string(),
                );
                let expect = if current.is_some() { 200 } else { 201 };
                assert_eq!(st, expect, "PUT {tenant}/{key}: {r}");
                let (deadline, version) = (
                    r["fire_at_us"].as_u64().expect("deadline"),
                    r["version"].as_u64().expect("version"),
                );
                model.scheduled(id, deadline, version, payload);
            }
            6 => {
                let st = s
                    .req("DELETE", &format!("/v1/timers/{tenant}/{key}"), "")
                    .status;
                assert_eq!(
                    st,
                    if current.is_some() { 204 } else { 404 },
                    "DELETE {tenant}/{key}"
                );
                model.cancelled(&id);
            }
            7 | 8 => {
                let (st, r) = s.json("GET", &format!("/v1/timers/{tenant}/{key}"), "");
                match current {
                    Some((deadline, version, payload)) => {
                        assert_eq!(st, 200, "GET {tenant}/{key}: {r}");
                        assert_eq!(r["fire_at_us"].as_u64(), Some(deadline), "{r}");
                        assert_eq!(r["version"].as_u64(), Some(version), "{r}");
                        assert_eq!(r["payload"].as_u64(), Some(payload), "{r}");
                    }
                    None => assert_eq!(st, 404, "GET {tenant}/{key}: {r}"),
                }
            }
            _ => {
                // A batch of this tenant's keys, each left alone if it may be firing.
                let mut items = Vec::new();
                let mut ids = Vec::new();
                for _ in 0..5 {
                    let k = format!("k{}", rng.u32(0..40));
                    let i = (tenant.clone(), k.clone());
                    if model.settled(&i, now).is_err() || ids.contains(&i) {
                        continue;
                    }
                    let p = rng.u64(..);
                    let at = now / 1_000 + rng.u64(2_600..7_000);
                    items.push(
                        json!({"key": k, "fire_at_ms": at, "payload": p, "callback": {"url": url}}),
                    );
                    ids.push(i);
                }
                if items.is_empty() {
                    continue;
                }
                let (st, r) = s.json(
                    "POST",
                    &format!("/v1/timers/{tenant}"),
                    &json!({"timers": items}).to_string(),
                );
                assert_eq!(st, 200, "batch: {r}");
                let results = r["results"].as_array().cloned().unwrap_or_default();
                assert_eq!(results.len(), ids.len(), "{r}");
                for ((i, item), res) in ids.into_iter().zip(&items).zip(&results) {
                    let (deadline, version) = (
                        res["fire_at_us"].as_u64().expect("deadline"),
                        res["version"].as_u64().expect("version"),
                    );
                    model.scheduled(
                        i,
                        deadline,
                        version,
                        item["payload"].as_u64().expect("payload"),
                    );
                }
            }
        }
    }
}

#[test]
fn paged_timers_fire_exactly_as_a_model_says_across_kills() {
    let data = tempfile::tempdir().expect("data dir");
    let rx = Receiver::ok();
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let mut rng = fastrand::Rng::with_seed(0x9a6e);
    let mut model = Model::default();
    let mut paged_seen = 0.0f64;
    let mut s = serve(data.path(), &toml);
    for r in 0..3 {
        round(&s.s, &rx, &mut model, &mut rng, 250);
        paged_seen = paged_seen.max(s.s.metric("punctual_page_timers"));
        // Let some paged timers load and fire in this run, then kill it mid-way.
        std::thread::sleep(Duration::from_millis(1_500));
        if r < 2 {
            s.sigkill();
            s = serve(data.path(), &toml);
            // Paged again from the journal at the start.
            paged_seen = paged_seen.max(s.s.metric("punctual_page_timers"));
        }
    }
    assert!(
        paged_seen > 0.0,
        "the rounds paged nothing: the test would not test paging"
    );
    let last = model.fire.values().copied().max().unwrap_or(0);
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    let delivered = loop {
        let got: BTreeMap<(String, String, u64), u64> = rx
            .received()
            .iter()
            .map(|d| {
                let b: Value = d.json();
                let id = (
                    b["tenant"].as_str().unwrap_or("").to_string(),
                    b["key"].as_str().unwrap_or("").to_string(),
                    b["version"].as_u64().unwrap_or(0),
                );
                assert!(
                    d.at_us >= b["fire_at_us"].as_u64().unwrap_or(u64::MAX),
                    "delivered before its deadline: {b}"
                );
                (id, d.at_us)
            })
            .collect();
        let all = model.fire.keys().all(|k| got.contains_key(k));
        if (all && now_us() > last + 1_000_000) || std::time::Instant::now() > give_up {
            break got;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let expected: BTreeSet<_> = model.fire.keys().cloned().collect();
    let got: BTreeSet<_> = delivered.keys().cloned().collect();
    let lost: Vec<_> = expected.difference(&got).collect();
    let extra: Vec<_> = got.difference(&expected).collect();
    assert!(
        lost.is_empty(),
        "{} of {} never fired: {:?}",
        lost.len(),
        expected.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        extra.is_empty(),
        "fired but replaced or cancelled first: {:?}",
        &extra[..extra.len().min(5)]
    );
    assert_eq!(
        s.s.metric("punctual_page_timers"),
        0.0,
        "every paged timer loaded"
    );
    assert_eq!(s.s.metric("punctual_timers_pending"), 0.0);
}

/// Polls `/metrics` until the sum of `name` meets `done`, for at most 5 s (gauges are published
/// every 100 ms); the last value seen.
fn metric_until(s: &Server, name: &str, done: impl Fn(f64) -> bool) -> f64 {
    let give_up = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let v = s.metric(name);
        if done(v) || std::time::Instant::now() > give_up {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`metric_until`] the sum is `want`.
fn metric_becomes(s: &Server, name: &str, want: f64) -> f64 {
    metric_until(s, name, |v| v == want)
}

/// Paged timers hold their tenant's quota slots and the shard's capacity as timers in the
/// wheel do, through replaces, cancels, a fire and a SIGKILL.
#[test]
fn paged_timers_count_against_quotas_and_capacity_across_a_kill() {
    let data = tempfile::tempdir().expect("data dir");
    let conf = data.path().join("punctual.toml");
    std::fs::write(
        &conf,
        "open_tenants = true\n[tenants.acme]\nmax_pending = 3\n",
    )
    .expect("config");
    let (conf, dir) = (
        conf.to_string_lossy().into_owned(),
        data.path().join("data").to_string_lossy().into_owned(),
    );
    let args = [
        "--config",
        &conf,
        "--store",
        "journal",
        "--data-dir",
        &dir,
        "--shards",
        "1",
        "--shard-capacity",
        "6",
        "--page-horizon-s",
        "2",
    ];
    let put = |s: &Server, tenant: &str, key: &str, delay_ms: u64| {
        let body = json!({"delay_ms": delay_ms, "payload": key}).to_string();
        let (st, r) = s.json("PUT", &format!("/v1/timers/{tenant}/{key}"), &body);
        (st, r["error"]["code"].as_str().unwrap_or("").to_string())
    };
    let far = 600_000;
    let mut s = Server::start(&args);
    for k in ["k1", "k2", "k3"] {
        assert_eq!(put(&s, "acme", k, far).0, 201);
    }
    assert_eq!(
        metric_becomes(&s, "punctual_page_timers", 3.0),
        3.0,
        "paged"
    );
    assert_eq!(put(&s, "acme", "k4", far), (429, "quota_exceeded".into()));
    assert_eq!(put(&s, "acme", "k1", far).0, 200, "a paged timer replaced");
    assert_eq!(s.req("DELETE", "/v1/timers/acme/k2", "").status, 204);
    assert_eq!(
        put(&s, "acme", "k4", far).0,
        201,
        "the cancel gave the slot back"
    );
    for k in ["x1", "x2", "x3"] {
        assert_eq!(put(&s, "open", k, far).0, 201);
    }
    assert_eq!(
        put(&s, "open", "x4", far),
        (503, "capacity_exceeded".into()),
        "paged timers fill the shard's capacity"
    );
    let _ = s.child.kill();
    let _ = s.child.wait();
    let s = Server::start(&args);
    assert_eq!(
        metric_becomes(&s, "punctual_page_timers", 6.0),
        6.0,
        "paged again at the start"
    );
    assert_eq!(put(&s, "acme", "k5", far), (429, "quota_exceeded".into()));
    assert_eq!(
        put(&s, "open", "x4", far),
        (503, "capacity_exceeded".into())
    );
    let (st, r) = s.json("GET", "/v1/timers/acme/k3", "");
    assert_eq!((st, r["payload"].as_str()), (200, Some("k3")), "{r}");
    // Replaced out of the pages to fire soon: its fire gives its slot back.
    assert_eq!(put(&s, "acme", "k1", 300).0, 200);
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while s.req("GET", "/v1/timers/acme/k1", "").status == 200 {
        assert!(std::time::Instant::now() < give_up, "k1 never fired");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        put(&s, "acme", "k5", far).0,
        201,
        "the fire gave the slot back"
    );
    assert_eq!(metric_becomes(&s, "punctual_page_timers", 6.0), 6.0);
}

/// A page damaged on disk under the running service: the load that reads it ends the process
/// with status 1, as a failed journal sync does, and the restart pages the timers again from
/// the journal, so that every one of them fires.
#[test]
fn a_damaged_page_ends_the_process_and_the_restart_fires_every_timer() {
    let data = tempfile::tempdir().expect("data dir");
    let rx = Receiver::ok();
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let mut s = serve(data.path(), &toml);
    let now_ms = now_us() / 1_000;
    let big = "x".repeat(2_000);
    let items: Vec<Value> = (0..100)
        .map(|i| json!({"key": format!("k{i}"), "fire_at_ms": now_ms + 6_000, "payload": big, "callback": {"url": rx.url("fire")}}))
        .collect();
    let (st, r) = s.s.json(
        "POST",
        "/v1/timers/t",
        &json!({"timers": items}).to_string(),
    );
    assert_eq!(st, 200, "{r}");
    assert!(
        metric_until(&s.s, "punctual_page_disk_bytes", |v| v > 0.0) > 0.0,
        "the bucket's page was written"
    );
    let pages = data.path().join("pages");
    let page = std::fs::read_dir(&pages)
        .expect("pages")
        .flat_map(|d| std::fs::read_dir(d.expect("shard dir").path()).expect("shard pages"))
        .map(|e| e.expect("page").path())
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .expect("a page on disk");
    let mut bytes = std::fs::read(&page).expect("page");
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&page, &bytes).expect("damage the page");
    let give_up = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = s.s.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "the load of a damaged page did not end the process"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1), "{status}");
    let _s = serve(data.path(), &toml);
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let fired: BTreeSet<String> = rx
            .received()
            .iter()
            .filter_map(|d| d.json()["key"].as_str().map(str::to_string))
            .collect();
        if fired.len() == 100 {
            break;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "{} of 100 fired after the restart",
            fired.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A dense page loading while other timers fall due: 3,000 timers paged into the buckets of
/// one 400 ms span, and 300 in the wheel due over the seconds their load runs. Every timer
/// fires exactly once (no delivery repeated, none lost), none before its deadline, and none
/// absurdly late: a bound of seconds, for correctness on a shared debug host, not a figure
/// (the figure, lateness percentiles while a million paged timers load:
/// `cargo run --release --example page_load_lateness`, in BENCHMARKS.md).
#[test]
fn a_dense_page_loading_fires_each_timer_once_and_none_absurdly_late() {
    const DENSE: usize = 3_000;
    const NEAR: usize = 300;
    /// Fired this long after its deadline or later is no timer service.
    const ABSURD_US: u64 = 3_000_000;
    let data = tempfile::tempdir().expect("data dir");
    let rx = Receiver::ok();
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let s = serve(data.path(), &toml);
    let url = rx.url("fire");
    let dense_at = now_us() / 1_000 + 3_500;
    let mut expected = BTreeSet::new();
    let mut batch = |items: Vec<Value>| {
        let (st, r) = s.s.json(
            "POST",
            "/v1/timers/t",
            &json!({"timers": items}).to_string(),
        );
        assert_eq!(st, 200, "{r}");
        for res in r["results"].as_array().into_iter().flatten() {
            let key = res["key"].as_str().expect("key").to_string();
            expected.insert((key, res["version"].as_u64().expect("version")));
        }
    };
    for chunk in (0..DENSE).collect::<Vec<_>>().chunks(500) {
        batch(
            chunk
                .iter()
                .map(|i| json!({"key": format!("d{i}"), "fire_at_ms": dense_at + (*i as u64 % 400), "payload": i, "callback": {"url": url}}))
                .collect(),
        );
    }
    assert!(
        metric_until(&s.s, "punctual_page_timers", |v| v >= DENSE as f64) >= DENSE as f64,
        "the dense span was paged"
    );
    let now_ms = now_us() / 1_000;
    assert!(
        now_ms + 2_000 < dense_at,
        "registration took too long to test a load"
    );
    batch(
        (0..NEAR)
            .map(|i| json!({"key": format!("n{i}"), "fire_at_ms": now_ms + 300 + (i as u64 * (dense_at - now_ms - 300)) / NEAR as u64, "payload": i, "callback": {"url": url}}))
            .collect(),
    );
    let all = DENSE + NEAR;
    let got = rx.wait(Duration::from_secs(30), |r| r.len() >= all);
    // Time for a repeated delivery to show.
    std::thread::sleep(Duration::from_millis(500));
    let got = if got.len() >= all { rx.received() } else { got };
    let mut seen = BTreeMap::new();
    let mut late = Vec::new();
    for d in &got {
        let b: Value = d.json();
        let id = (
            b["key"].as_str().unwrap_or("").to_string(),
            b["version"].as_u64().unwrap_or(0),
        );
        let (due, fired) = (
            b["fire_at_us"].as_u64().expect("fire_at_us"),
            b["fired_at_us"].as_u64().expect("fired_at_us"),
        );
        assert!(fired >= due, "fired before its deadline: {b}");
        if fired - due > ABSURD_US {
            late.push((id.0.clone(), fired - due));
        }
        *seen.entry(id).or_insert(0u32) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "delivered more than once: {:?}",
        &twice[..twice.len().min(5)]
    );
    let fired: BTreeSet<_> = seen.keys().cloned().collect();
    let lost: Vec<_> = expected.difference(&fired).collect();
    assert!(
        lost.is_empty(),
        "{} of {all} never fired: {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert_eq!(
        fired.len(),
        all,
        "fired, but not one of the timers scheduled"
    );
    assert!(
        late.is_empty(),
        "fired absurdly late (µs): {:?}",
        &late[..late.len().min(5)]
    );
}
