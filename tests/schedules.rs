//! Recurring schedules through the real binary: `/v1/schedules` delivers each occurrence to a
//! real HTTP receiver on time (never before its nominal instant), once, with its schedule, its
//! nominal time and its sequence; a SIGKILL and a restart on the same port and data directory
//! neither lose nor double an occurrence (the missed ones fire under the catch-up policy);
//! pause, resume and DELETE stop and start it at their answer; bad definitions are 400s that
//! name their field.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{Configured, Server};
use receiver::{now_us, Received, Receiver, Reply};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// One delivery of an occurrence, as the receiver got it.
#[derive(Debug, Clone)]
struct Got {
    schedule: String,
    occurrence_us: u64,
    sequence: u64,
    caught_up: bool,
    version: u64,
    fired_at_us: u64,
    idempotency: String,
    arrived_us: u64,
}

fn got(r: &Received) -> Got {
    let b = r.json();
    let p = &b["payload"];
    Got {
        schedule: p["schedule"].as_str().unwrap_or_default().to_string(),
        occurrence_us: p["occurrence_us"].as_u64().expect("occurrence_us"),
        sequence: p["sequence"].as_u64().expect("sequence"),
        caught_up: p["caught_up"].as_bool().expect("caught_up"),
        version: b["version"].as_u64().expect("version"),
        fired_at_us: b["fired_at_us"].as_u64().expect("fired_at_us"),
        idempotency: r.header("idempotency-key").unwrap_or_default().to_string(),
        arrived_us: r.at_us,
    }
}

fn all(rx: &Receiver) -> Vec<Got> {
    rx.received().iter().map(got).collect()
}

/// Every delivery on time: not before its occurrence, by the server's fire and by the
/// receiver's clock.
fn assert_never_early(gots: &[Got]) {
    for g in gots {
        assert!(
            g.fired_at_us >= g.occurrence_us && g.arrived_us >= g.occurrence_us,
            "fired early: {g:?}"
        );
    }
}

/// Each occurrence fired once: one version and one sequence per occurrence, one occurrence per
/// sequence, the sequences 1, 2, … without a gap, `period_us` apart. A delivery may repeat
/// (a webhook is at least once across a crash), always with the same version and
/// `Idempotency-Key`. The occurrences in sequence order, and how many deliveries repeated.
fn assert_each_occurrence_once(gots: &[Got], period_us: u64) -> (Vec<Got>, usize) {
    let mut by_occurrence: BTreeMap<u64, Got> = BTreeMap::new();
    let mut repeats = 0;
    for g in gots {
        match by_occurrence.get(&g.occurrence_us) {
            Some(first) => {
                assert_eq!(
                    (first.version, first.sequence, &first.idempotency),
                    (g.version, g.sequence, &g.idempotency),
                    "one occurrence fired twice, as two: {first:?} and {g:?}"
                );
                repeats += 1;
            }
            None => {
                by_occurrence.insert(g.occurrence_us, g.clone());
            }
        }
    }
    let seq: Vec<Got> = by_occurrence.into_values().collect();
    for (i, g) in seq.iter().enumerate() {
        assert_eq!(
            g.sequence,
            i as u64 + 1,
            "sequences skip or repeat: {seq:#?}"
        );
    }
    for w in seq.windows(2) {
        assert_eq!(
            w[1].occurrence_us - w[0].occurrence_us,
            period_us,
            "an occurrence is missing between {:?} and {:?}",
            w[0],
            w[1]
        );
    }
    (seq, repeats)
}

/// Waits (at most 30 s) for a delivery of an occurrence after `past_us`; then every delivery
/// of a per-second schedule so far, checked never early and each occurrence once: the
/// occurrences in order and how many deliveries repeated.
fn once_going_on(rx: &Receiver, past_us: u64) -> (Vec<Got>, usize) {
    rx.wait(Duration::from_secs(30), |r| {
        r.iter().map(got).any(|g| g.occurrence_us > past_us)
    });
    let gots = all(rx);
    assert_never_early(&gots);
    assert_each_occurrence_once(&gots, 1_000_000)
}

fn config_for(rx: &Receiver) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("config");
    use std::io::Write;
    writeln!(f, "callback_allow = [{:?}]", rx.base()).expect("write config");
    f
}

#[test]
fn an_every_second_schedule_fires_each_occurrence_once_on_time_across_a_sigkill() {
    let rx = Receiver::start(|_, _| Reply::status(200));
    let config = config_for(&rx);
    let data = tempfile::tempdir().expect("tempdir");
    let (cfg, dir) = (
        config.path().to_string_lossy(),
        data.path().to_string_lossy(),
    );
    let args = [
        "--config",
        &cfg,
        "--store",
        "journal",
        "--data-dir",
        &dir,
        "--shards",
        "2",
    ];
    let mut first = Server::start(&args);
    let body = format!(
        r#"{{"every_ms": 1000, "catch_up": {{"policy": "all", "window_ms": 60000}},
            "payload": {{"job": "tick"}}, "callback": {{"url": "{}"}}}}"#,
        rx.url("tick")
    );
    let (status, put) = first.json("PUT", "/v1/schedules/shop/tick", &body);
    assert_eq!(status, 201, "{put}");
    assert_eq!(put["sequence"], 0);
    assert_eq!(put["next"].as_array().map(Vec::len), Some(5), "{put}");
    let (status, again) = first.json("GET", "/v1/schedules/shop/tick?next=3", "");
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["next"].as_array().map(Vec::len), Some(3), "{again}");
    assert_eq!(again["definition"]["payload"]["job"], "tick");

    rx.wait(Duration::from_secs(20), |r| r.len() >= 3);
    let before = all(&rx);
    assert!(before.len() >= 3, "{before:?}");
    assert!(before.iter().all(|g| g.schedule == "tick"), "{before:?}");
    assert_never_early(&before);
    assert_each_occurrence_once(&before, 1_000_000);
    let (_, put) = first.json("GET", "/v1/schedules/shop/tick", "");
    assert!(put["sequence"].as_u64() >= Some(3), "{put}");

    // Down for about three occurrences; the restart catches them up (`all`), then goes on.
    first.child.kill().expect("SIGKILL");
    let _ = first.child.wait();
    let killed_us = now_us();
    std::thread::sleep(Duration::from_millis(3_200));
    let second = Server::start_at(first.addr, &args);
    let restarted_us = now_us();
    let (seq, repeats) = once_going_on(&rx, restarted_us + 2_000_000);
    // The restart's first fire spends every occurrence since the kill: those more than a
    // second before it (give or take a pass) were missed, and fire caught up, each once.
    let after_kill: Vec<&Got> = seq.iter().filter(|g| g.occurrence_us > killed_us).collect();
    let fire0 = after_kill.iter().map(|g| g.fired_at_us).min().unwrap_or(0);
    let missed: Vec<&&Got> = after_kill
        .iter()
        .filter(|g| g.occurrence_us + 1_300_000 < fire0)
        .collect();
    assert!(
        missed.len() >= 2 && missed.iter().all(|g| g.caught_up),
        "the occurrences missed while down fire, each once, caught up: {missed:?}"
    );
    assert!(
        after_kill
            .iter()
            .all(|g| g.occurrence_us < restarted_us || !g.caught_up),
        "an occurrence after the restart fired as caught up: {after_kill:?}"
    );
    eprintln!(
        "{} occurrences, {} caught up after the restart, {} deliveries repeated",
        seq.len(),
        missed.len(),
        repeats
    );
    // The schedule's own timers are not the tenant's timers.
    let (status, listed) = second.json("GET", "/v1/timers/shop", "");
    assert_eq!(status, 200);
    assert_eq!(
        listed["timers"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
    let (status, listed) = second.json("GET", "/v1/schedules/shop", "");
    assert_eq!(status, 200);
    assert_eq!(listed["schedules"][0]["key"], "tick", "{listed}");
    assert_eq!(
        listed["schedules"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
}

#[test]
fn a_per_second_cron_pauses_resumes_with_its_catch_up_and_stops_at_its_delete() {
    let rx = Receiver::start(|_, _| Reply::status(200));
    let config = config_for(&rx);
    let cfg = config.path().to_string_lossy();
    let s = Server::start(&["--config", &cfg, "--store", "memory"]);
    let body = format!(
        r#"{{"cron": "* * * * * *", "time_zone": "Asia/Kolkata",
            "payload": [1, 2], "callback": {{"url": "{}"}}}}"#,
        rx.url("cron")
    );
    let (status, put) = s.json("PUT", "/v1/schedules/shop/sec", &body);
    assert_eq!(status, 201, "{put}");
    let local = put["next"][0]["local"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(local.ends_with("+05:30"), "{put}");
    rx.wait(Duration::from_secs(20), |r| r.len() >= 3);

    // Paused: nothing due after the answer fires.
    let (status, paused) = s.json("POST", "/v1/schedules/shop/sec/pause", "");
    assert_eq!(
        (status, &paused["paused"]),
        (200, &serde_json::json!(true)),
        "{paused}"
    );
    let paused_us = now_us();
    std::thread::sleep(Duration::from_millis(3_300));
    let during = all(&rx);
    assert!(
        during.iter().all(|g| g.occurrence_us <= paused_us),
        "fired while paused: {during:?}"
    );
    // Resumed: `latest` (the default) fires at most one of the occurrences missed while
    // paused (the most recent, or the one on time at the resume's fire), then goes on.
    let (status, resumed) = s.json("POST", "/v1/schedules/shop/sec/resume", "");
    assert_eq!(
        (status, &resumed["paused"]),
        (200, &serde_json::json!(false)),
        "{resumed}"
    );
    let resumed_us = now_us();
    rx.wait(Duration::from_secs(20), |r| {
        r.iter()
            .map(got)
            .any(|g| g.occurrence_us > resumed_us + 1_000_000)
    });
    let gots = all(&rx);
    assert_never_early(&gots);
    let caught: Vec<&Got> = gots
        .iter()
        .filter(|g| g.occurrence_us > paused_us && g.occurrence_us <= resumed_us)
        .collect();
    assert!(
        caught.len() <= 1,
        "latest catches up one at most: {caught:?}"
    );
    assert!(
        caught
            .iter()
            .all(|g| g.occurrence_us + 1_100_000 >= resumed_us),
        "an older missed occurrence fired: {caught:?}"
    );
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for g in &gots {
        assert_eq!(
            seen.insert(g.sequence, g.occurrence_us),
            None,
            "twice: {g:?}"
        );
    }
    let mut sequences: Vec<u64> = seen.keys().copied().collect();
    sequences.sort_unstable();
    assert_eq!(sequences, (1..=gots.len() as u64).collect::<Vec<_>>());

    // Deleted: 204, and nothing due after the answer fires.
    assert_eq!(s.req("DELETE", "/v1/schedules/shop/sec", "").status, 204);
    let deleted_us = now_us();
    std::thread::sleep(Duration::from_millis(2_500));
    let after = all(&rx);
    assert!(
        after.iter().all(|g| g.occurrence_us <= deleted_us),
        "fired after its DELETE: {after:?}"
    );
    assert_eq!(
        s.metric("punctual_schedule_occurrences") as usize,
        after.len(),
        "every occurrence fired is counted, and was delivered once"
    );
    assert!(
        s.metric("punctual_schedule_skipped") >= 2.0,
        "the pause's misses"
    );
    assert_eq!(s.req("GET", "/v1/schedules/shop/sec", "").status, 404);
    assert_eq!(s.req("DELETE", "/v1/schedules/shop/sec", "").status, 404);
    assert_eq!(
        s.req("POST", "/v1/schedules/shop/sec/pause", "").status,
        404
    );
}

#[test]
fn a_bad_definition_is_a_400_that_names_its_field() {
    let s = Server::start(&["--store", "memory"]);
    let cases = [
        (r#"{"cron": "61 * * * *"}"#, "cron"),
        (r#"{"cron": "0 0 30 2 *"}"#, "cron"),
        (r#"{"every_ms": 1000, "cron": "* * * * *"}"#, "cron"),
        (r#"{"payload": 1}"#, "cron"),
        (r#"{"every_ms": 500}"#, "every_ms"),
        (
            r#"{"cron": "0 * * * *", "time_zone": "Mars/Olympus"}"#,
            "time_zone",
        ),
        (r#"{"every_ms": 1000, "time_zone": "UTC"}"#, "time_zone"),
        (r#"{"every_ms": 1000, "start_at": "tomorrow"}"#, "start_at"),
        (
            r#"{"every_ms": 1000, "max_occurrences": 0}"#,
            "max_occurrences",
        ),
        (
            r#"{"every_ms": 1000, "catch_up": {"policy": "some"}}"#,
            "schedule",
        ),
        (r#"{"every_ms": 1000, "colour": "red"}"#, "schedule"),
        (
            r#"{"every_ms": 1000, "retry": {"max_attempts": 2}}"#,
            "retry",
        ),
    ];
    for (body, field) in cases {
        let r = s.req("PUT", "/v1/schedules/shop/bad", body);
        assert_eq!(
            r.status,
            400,
            "{body}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let message = r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            message.contains(field),
            "{body}: {message:?} does not name {field}"
        );
    }
    assert_eq!(s.req("GET", "/v1/schedules/shop/bad", "").status, 404);
    assert_eq!(s.req("PUT", "/v1/schedules/shop/bad@x", "{}").status, 400);
    let r = s.req("GET", "/v1/schedules/shop/bad?next=101", "");
    assert_eq!(r.status, 400);
    // A whole number written as JSON may write one is an integer (JSON Schema's, which the
    // document gives these fields): accepted as the timer's fields are; a fraction is not.
    let whole = r#"{"every_ms": 60000.0, "max_occurrences": 3e0, "catch_up": {"policy": "skip", "window_ms": 1000.0}}"#;
    let r = s.req("PUT", "/v1/schedules/shop/whole", whole);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = s.req("PUT", "/v1/schedules/shop/half", r#"{"every_ms": 60000.5}"#);
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
}

#[test]
fn the_preview_follows_the_zone_and_its_daylight_saving_policy() {
    let s = Server::start(&["--store", "memory"]);
    let body = r#"{"cron": "30 2 * * *", "time_zone": "America/New_York",
                   "start_at": "2027-03-13T00:00:00Z", "dst": {"gap": "shift"}}"#;
    let (status, put) = s.json("PUT", "/v1/schedules/shop/nightly", body);
    assert_eq!(status, 201, "{put}");
    let (_, got) = s.json("GET", "/v1/schedules/shop/nightly?next=3", "");
    let locals: Vec<&str> = got["next"]
        .as_array()
        .expect("next")
        .iter()
        .filter_map(|n| n["local"].as_str())
        .collect();
    assert_eq!(
        locals,
        [
            "2027-03-13T02:30:00-05:00",
            "2027-03-14T03:30:00-04:00",
            "2027-03-15T02:30:00-04:00"
        ]
    );
    // Replaced: 200, the cursor kept.
    let (status, replaced) = s.json("PUT", "/v1/schedules/shop/nightly", body);
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["sequence"], 0);
}

/// An occurrence whose delivery fails for good is a dead letter under its own key
/// (`@key@occurrence_us`), as the dead-letter list shows it: that key pages the list, and
/// re-drives (delivered once the receiver answers) and discards the letter, as for a timer's.
#[test]
fn an_occurrences_dead_letter_is_paged_re_driven_and_discarded_by_its_key() {
    let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let f = failing.clone();
    let rx = Receiver::start(
        move |_, _| match f.load(std::sync::atomic::Ordering::SeqCst) {
            true => Reply::status(400),
            false => Reply::status(200),
        },
    );
    let config = config_for(&rx);
    let cfg = config.path().to_string_lossy();
    let s = Server::start(&["--config", &cfg, "--shards", "2"]);
    let body = format!(
        r#"{{"every_ms": 1000, "callback": {{"url": "{}"}}, "retry": {{"max_attempts": 1}}}}"#,
        rx.url("dead")
    );
    let (status, put) = s.json("PUT", "/v1/schedules/shop/d", &body);
    assert_eq!(status, 201, "{put}");
    let dead_keys = |s: &Server, query: &str| -> Vec<String> {
        let (status, page) = s.json("GET", &format!("/v1/dead/shop{query}"), "");
        assert_eq!(status, 200, "{query}: {page}");
        let keys = page["dead"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["key"].as_str().map(str::to_string))
            .collect();
        keys
    };
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while dead_keys(&s, "").len() < 2 {
        assert!(std::time::Instant::now() < give_up, "no two dead letters");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(s.req("DELETE", "/v1/schedules/shop/d", "").status, 204);
    // Paged by the last key of each page, as for a timer's letters.
    let first = dead_keys(&s, "?limit=1");
    assert_eq!(first.len(), 1);
    assert!(first[0].starts_with("@d@"), "{first:?}");
    let after = &first[0];
    let second = dead_keys(&s, &format!("?limit=1&after={after}"));
    assert_eq!(second.len(), 1, "the page after {after}");
    assert!(second[0] > first[0], "{first:?} then {second:?}");

    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    let before = rx.received().len();
    let r = s.req("POST", &format!("/v1/dead/shop/{}/retry", first[0]), "");
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    rx.wait(Duration::from_secs(10), |r| {
        r.len() > before
            && r.last()
                .is_some_and(|x| x.json()["key"] == first[0].as_str())
    });
    let r = s.req("DELETE", &format!("/v1/dead/shop/{}", second[0]), "");
    assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.body));
    let left = dead_keys(&s, "");
    assert!(
        !left.contains(&first[0]) && !left.contains(&second[0]),
        "re-driven and discarded letters still listed: {left:?}"
    );
    // A key that only looks internal is still refused.
    for bad in ["@", "@d@", "@d@1x", "@@1"] {
        let r = s.req("DELETE", &format!("/v1/dead/shop/{bad}"), "");
        assert_eq!(r.status, 400, "{bad}: {}", String::from_utf8_lossy(&r.body));
    }
}

/// SIGKILLs at four points of a per-second schedule's delivery, each followed by a restart on
/// the same port and data directory at once: at `all`, no occurrence between the last
/// delivered before a kill and the first after it is lost, none fires under two versions, and
/// the schedule goes on after the last restart. The receiver answers each delivery 200 ms
/// late, so the early kill points fall while a delivery is under way (the one a restart may
/// repeat, under its version). About 15 s.
#[test]
fn a_schedule_loses_and_doubles_no_occurrence_across_four_sigkills() {
    let rx = Receiver::start(|_, _| Reply::status(200).after(Duration::from_millis(200)));
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let data = tempfile::tempdir().expect("tempdir");
    let args = ["--shards", "2"];
    let started = std::time::Instant::now();
    let mut server = Configured::journal(data.path(), &toml, &args);
    let body = format!(
        r#"{{"every_ms": 1000, "catch_up": {{"policy": "all", "window_ms": 60000}},
            "callback": {{"url": "{}"}}}}"#,
        rx.url("k")
    );
    let (status, put) = server.s.json("PUT", "/v1/schedules/shop/k", &body);
    assert_eq!(status, 201, "{put}");
    // Milliseconds after a delivery arrives at which the server is killed.
    for (i, after_ms) in [20u64, 150, 500, 850].into_iter().enumerate() {
        let seen = rx.received().len();
        let got = rx.wait(Duration::from_secs(10), |r| r.len() > seen);
        assert!(got.len() > seen, "kill {i}: no delivery since the restart");
        std::thread::sleep(Duration::from_millis(after_ms));
        server = server.restart_after_sigkill(data.path(), &args);
    }
    let restarted_us = now_us();
    let (seq, repeats) = once_going_on(&rx, restarted_us + 1_000_000);
    assert!(
        seq.last()
            .is_some_and(|g| g.occurrence_us > restarted_us + 1_000_000),
        "the schedule did not go on after the last restart: {seq:#?}"
    );
    let (_, now) = server.s.json("GET", "/v1/schedules/shop/k", "");
    assert!(
        now["sequence"].as_u64() >= seq.last().map(|g| g.sequence),
        "the record's sequence is behind its deliveries: {now}"
    );
    eprintln!(
        "{} occurrences over four kills in {:?}, {} deliveries repeated",
        seq.len(),
        started.elapsed(),
        repeats
    );
}
