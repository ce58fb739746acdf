//! Bulk cancel against the real binary: `DELETE /v1/timers/{tenant}?prefix=` answers `202`
//! with an action's id and cancels, in the background, every key pending under the prefix
//! before the `202` (keys put while it runs do not hide any), none outside it; the action's
//! progress; an empty prefix only with `all=true`; bad input; a shard too busy for its
//! cancels; a restart after it, which keeps its cancels and the action as it ended; and a
//! SIGKILL in the middle of one, after which the action reads back as `interrupted` with what
//! it had done.

mod api_support;

use api_support::{eventually, put_batches, Configured, Server};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn put(s: &Server, tenant: &str, key: &str) {
    let (st, v) = s.json(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &json!({"delay_ms": 600_000}).to_string(),
    );
    assert!(st == 201 || st == 200, "{key}: {v}");
}

fn pending(s: &Server, tenant: &str, key: &str) -> bool {
    let r = s.req("GET", &format!("/v1/timers/{tenant}/{key}"), "");
    assert!(r.status == 200 || r.status == 404, "{key}: {}", r.status);
    r.status == 200
}

/// Starts a bulk cancel: the action's id.
fn bulk(s: &Server, tenant: &str, query: &str) -> String {
    let (st, v) = s.json("DELETE", &format!("/v1/timers/{tenant}?{query}"), "");
    assert_eq!(st, 202, "{query}: {v}");
    v["id"].as_str().expect("id").to_string()
}

/// The action's progress once it is done.
fn finished(s: &Server, tenant: &str, id: &str) -> Value {
    eventually("the bulk cancel to finish", || {
        let (st, v) = s.json("GET", &format!("/v1/actions/{tenant}/{id}"), "");
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["id"], id, "{v}");
        assert!(v["state"] == "running" || v["state"] == "done", "{v}");
        (v["state"] == "done").then_some(v)
    })
}

#[test]
fn cancels_every_key_pending_under_the_prefix_while_keys_are_added_and_none_outside() {
    let s = Arc::new(Server::start(&["--shards", "2"]));
    let before: Vec<String> = (0..2_500).map(|i| format!("order-88{i:05}")).collect();
    for key in &before {
        put(&s, "t", key);
    }
    let outside = ["order-8", "order-9", "other", "ORDER-88x"];
    for key in outside {
        put(&s, "t", key);
    }
    put(&s, "u", "order-88000");
    // Keys put while the cancel runs, under the prefix (after and among the listed ones)
    // and outside it.
    let stop = Arc::new(AtomicBool::new(false));
    let adder = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Acquire) && n < 2_000 {
                put(&s, "t", &format!("order-88{n:05}-new"));
                put(&s, "t", &format!("zz-{n}"));
                n += 1;
            }
            n
        })
    };
    let id = bulk(&s, "t", "prefix=order-88");
    let done = finished(&s, "t", &id);
    stop.store(true, Ordering::Release);
    let added = adder.join().expect("adder");
    let (matched, cancelled) = (done["matched"].as_u64(), done["cancelled"].as_u64());
    assert!(matched >= Some(2_500) && cancelled >= Some(2_500), "{done}");
    assert!(cancelled <= matched, "{done}");
    assert!(done.get("error").is_none(), "{done}");
    for key in &before {
        assert!(!pending(&s, "t", key), "{key} is still pending: {done}");
    }
    for key in outside {
        assert!(pending(&s, "t", key), "{key} was outside the prefix");
    }
    for n in (0..added).step_by(97) {
        assert!(
            pending(&s, "t", &format!("zz-{n}")),
            "zz-{n} was outside the prefix"
        );
    }
    assert!(pending(&s, "u", "order-88000"), "another tenant's key");
    assert!(s.metric("punctual_bulk_actions") >= 1.0);
    assert!(s.metric("punctual_bulk_cancelled") >= 2_500.0);
}

#[test]
fn an_empty_prefix_needs_all_and_bad_input_is_refused_by_name() {
    let s = Server::start(&["--shards", "2"]);
    for key in ["a", "b-1", "c:2"] {
        put(&s, "t", key);
    }
    put(&s, "u", "a");
    for (query, names) in [
        ("", "all=true"),
        ("prefix=", "all=true"),
        ("all=false", "all=true"),
        ("prefix=a/b", "prefix"),
        ("prefix=a%20b", "prefix"),
        ("all=yes", "all"),
        ("limit=5", "limit"),
        // Two prefixes are refused, never one of them cancelled.
        ("prefix=a&prefix=b-", "prefix"),
        ("prefix=a&all=true&all=false", "all"),
    ] {
        let (st, e) = s.json("DELETE", &format!("/v1/timers/t?{query}"), "");
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("invalid_field")),
            "{query}: {e}"
        );
        let message = e["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(names), "{query}: {message}");
    }
    assert!(
        pending(&s, "t", "a"),
        "a refused bulk cancel cancels nothing"
    );
    let id = bulk(&s, "t", "all=true");
    let done = finished(&s, "t", &id);
    assert_eq!(
        (&done["matched"], &done["cancelled"]),
        (&json!(3), &json!(3))
    );
    for key in ["a", "b-1", "c:2"] {
        assert!(!pending(&s, "t", key), "{key}");
    }
    assert!(pending(&s, "u", "a"), "another tenant's key");
    // A prefix that matches nothing is done with nothing matched.
    let id = bulk(&s, "u", "prefix=zzz");
    let done = finished(&s, "u", &id);
    assert_eq!(
        (&done["matched"], &done["cancelled"]),
        (&json!(0), &json!(0))
    );
    // Actions are the tenant's; an unknown one is 404.
    for path in [
        "/v1/actions/u/".to_string() + &id.replace('-', "x"),
        format!("/v1/actions/t/{id}"),
    ] {
        let (st, e) = s.json("GET", &path, "");
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (404, Some("not_found")),
            "{path}"
        );
        let message = e["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("unknown action"), "{message}");
    }
    // Counted: the two actions started (the refused ones never started) and the three
    // timers they cancelled.
    assert_eq!(s.metric("punctual_bulk_actions"), 2.0);
    assert_eq!(s.metric("punctual_bulk_cancelled"), 3.0);
}

#[test]
fn a_restart_keeps_what_the_action_cancelled_and_the_action_as_it_ended() {
    let dir = tempfile::tempdir().expect("dir");
    let args = ["--shards", "2", "--fsync", "always"];
    let s = Configured::journal(dir.path(), "", &args);
    for i in 0..50 {
        put(&s.s, "t", &format!("cart-{i}"));
    }
    put(&s.s, "t", "kept");
    let id = bulk(&s.s, "t", "prefix=cart-");
    let done = finished(&s.s, "t", &id);
    assert_eq!(done["cancelled"], json!(50), "{done}");
    s.sigkill();

    let s = Configured::journal(dir.path(), "", &args);
    for i in 0..50 {
        assert!(
            !pending(&s.s, "t", &format!("cart-{i}")),
            "cart-{i} came back"
        );
    }
    assert!(pending(&s.s, "t", "kept"));
    let (st, v) = s.s.json("GET", &format!("/v1/actions/t/{id}"), "");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v, done, "the action as it ended");
    let (st, e) = s.s.json("GET", &format!("/v1/actions/u/{id}"), "");
    assert_eq!((st, e["error"]["code"].as_str()), (404, Some("not_found")));
    let again = bulk(&s.s, "t", "prefix=cart-");
    assert_ne!(again, id, "an id is never given twice");
}

#[test]
fn an_action_cut_short_by_sigkill_reads_back_as_interrupted_with_what_it_had_done() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().to_string_lossy().into_owned();
    let args = [
        "--shards",
        "2",
        "--fsync",
        "always",
        "--store",
        "journal",
        "--data-dir",
        &data,
    ];
    let mut s = Server::start(&args);
    let keys: Vec<String> = (0..40_000).map(|i| format!("big-{i:05}")).collect();
    put_batches(s.addr, "t", &keys);
    put(&s, "t", "kept");
    let id = bulk(&s, "t", "prefix=big-");
    // Killed once the second page is listed (the first one's cancels answered and recorded),
    // long before the fortieth.
    let at_kill = eventually("the second page listed", || {
        let (_, v) = s.json("GET", &format!("/v1/actions/t/{id}"), "");
        (v["matched"].as_u64() >= Some(2_000)).then_some(v)
    });
    assert_eq!(at_kill["state"], "running", "{at_kill}");
    s.child.kill().expect("SIGKILL");
    s.child.wait().expect("reaped");

    for round in 0..2 {
        let s = Server::start_at(s.addr, &args);
        let (st, v) = s.json("GET", &format!("/v1/actions/t/{id}"), "");
        assert_eq!(st, 200, "restart {round}: {v}");
        assert_eq!(
            (&v["id"], &v["state"]),
            (&json!(id), &json!("interrupted")),
            "{v}"
        );
        let (matched, cancelled) = (
            v["matched"].as_u64().unwrap_or(0),
            v["cancelled"].as_u64().unwrap_or(0),
        );
        // What it recorded is whole pages, cancelled in key order, and stays cancelled.
        assert!(cancelled >= 1_000 && cancelled % 1_000 == 0, "{v}");
        assert_eq!(matched, cancelled, "nothing was put again: {v}");
        for key in keys[..cancelled as usize].iter().step_by(37) {
            assert!(!pending(&s, "t", key), "{key} came back: {v}");
        }
        assert!(pending(&s, "t", "kept"));
        drop(s);
    }
    // Started again under a new id, a new action goes on from the start of the prefix.
    let s = Server::start_at(s.addr, &args);
    let again = bulk(&s, "t", "prefix=big-");
    assert_ne!(again, id);
    let (st, v) = s.json("GET", &format!("/v1/actions/t/{again}"), "");
    assert_eq!(st, 200, "{v}");
    assert!(v["state"] == "running" || v["state"] == "done", "{v}");
}

#[test]
fn a_shard_too_busy_for_a_cancel_is_asked_again_and_every_key_is_cancelled() {
    // A ring of 16, of which a tenant may hold 4: the action sends 64 cancels at a time, so
    // the shard refuses most of each burst, and each refused one is sent again.
    let s = Server::start(&["--shards", "1", "--ring-capacity", "16"]);
    for i in 0..300 {
        put(&s, "t", &format!("busy-{i}"));
    }
    let id = bulk(&s, "t", "prefix=busy-");
    let done = finished(&s, "t", &id);
    assert!(done.get("error").is_none(), "{done}");
    assert_eq!(
        (&done["matched"], &done["cancelled"]),
        (&json!(300), &json!(300))
    );
    assert!(!pending(&s, "t", "busy-0") && !pending(&s, "t", "busy-299"));
}

/// Timers paged beyond `--page-horizon-s` on the journal are listed by prefix, payloads and
/// all, merged by key with those in the wheel, and reached by a bulk cancel as they are.
#[test]
fn paged_timers_are_listed_and_bulk_cancelled_as_those_in_the_wheel() {
    let dir = tempfile::tempdir().expect("dir");
    let args = ["--shards", "2", "--page-horizon-s", "60"];
    let s = Configured::journal(dir.path(), "", &args);
    let put_in = |key: &str, delay_ms: u64| {
        let body = json!({"delay_ms": delay_ms, "payload": {"k": key}}).to_string();
        let (st, v) = s.s.json("PUT", &format!("/v1/timers/t/{key}"), &body);
        assert_eq!(st, 201, "{key}: {v}");
    };
    // Even keys due in 10 minutes, beyond the horizon: paged. Odd ones in the wheel.
    let keys: Vec<String> = (0..40).map(|i| format!("o-{i:02}")).collect();
    for (i, key) in keys.iter().enumerate() {
        put_in(key, if i % 2 == 0 { 600_000 } else { 40_000 });
    }
    put_in("kept", 600_000);
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let query = match &after {
            Some(a) => format!("prefix=o-&limit=15&payloads=true&after={a}"),
            None => "prefix=o-&limit=15&payloads=true".to_string(),
        };
        let (st, page) = s.s.json("GET", &format!("/v1/timers/t?{query}"), "");
        assert_eq!(st, 200, "{page}");
        for t in page["timers"].as_array().expect("timers") {
            let key = t["key"].as_str().expect("key").to_string();
            assert_eq!(t["payload"], json!({"k": key}), "{t}");
            listed.push(key);
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(listed, keys, "every key once, in key order, paged or not");
    let id = bulk(&s.s, "t", "prefix=o-");
    let done = finished(&s.s, "t", &id);
    assert_eq!(
        (&done["matched"], &done["cancelled"]),
        (&json!(40), &json!(40)),
        "{done}"
    );
    for key in &keys {
        assert!(!pending(&s.s, "t", key), "{key} is still pending: {done}");
    }
    assert!(pending(&s.s, "t", "kept"), "outside the prefix");
}
