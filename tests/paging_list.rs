//! Listing by prefix and bulk cancel with paging (`--page-horizon-s`) through the real
//! service: timers paged beyond the horizon are listed, in key order among those in the wheel,
//! paged by `next` as any listing, and a bulk cancel cancels them, durably: after a SIGKILL
//! and a restart none of them fires.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{eventually, Configured as Svc, Server};
use receiver::{now_us, Receiver};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// A journal server of 2 shards on `data` paging beyond `horizon_s`.
fn serve(data: &Path, toml: &str, horizon_s: &str) -> Svc {
    Svc::journal(
        data,
        toml,
        &["--shards", "2", "--page-horizon-s", horizon_s],
    )
}

/// PUTs `tenant/key` due `delay_ms` ahead with `body` extra fields; (fire_at_us, version).
fn put(s: &Server, tenant: &str, key: &str, delay_ms: u64, extra: Value) -> (u64, u64) {
    let mut body = json!({"delay_ms": delay_ms, "payload": key});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (st, r) = s.json(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &body.to_string(),
    );
    assert_eq!(st, 201, "PUT {tenant}/{key}: {r}");
    (
        r["fire_at_us"].as_u64().expect("deadline"),
        r["version"].as_u64().expect("version"),
    )
}

/// Waits until the service reports `n` paged timers.
fn paged(s: &Server, n: f64) {
    eventually("the timers to be paged", || {
        (s.metric("punctual_page_timers") == n).then_some(())
    });
}

/// Every timer the listing `query` gives, page after page by `next`, `limit` a page.
fn list_all(s: &Server, tenant: &str, query: &str, limit: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut path = format!("/v1/timers/{tenant}?{query}&limit={limit}");
        if let Some(a) = &after {
            path += &format!("&after={a}");
        }
        let (st, page) = s.json("GET", &path, "");
        assert_eq!(st, 200, "{path}: {page}");
        let timers = page["timers"].as_array().expect("timers").clone();
        assert!(timers.len() <= limit, "{page}");
        all.extend(timers);
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => return all,
        }
    }
}

/// Keys interleaved between the wheel (due within the horizon) and the pages (due an hour
/// ahead): a listing by prefix, read a few at a time by `next` and from an `after` in the
/// middle, shows every one of them once, by key, under the deadline and version its PUT
/// answered, with its payload when asked; no key outside the prefix or of another tenant.
#[test]
fn a_listing_shows_paged_timers_among_the_wheels_by_key() {
    let data = tempfile::tempdir().expect("data dir");
    let svc = serve(data.path(), "open_tenants = true\n", "60");
    let s = &svc.s;
    let mut want: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for i in 0..120 {
        let key = format!("order-{i:03}");
        // Even keys in the wheel (due in 40 s, within the 60 s horizon), odd ones paged.
        let delay = if i % 2 == 0 { 40_000 } else { 3_600_000 };
        want.insert(key.clone(), put(s, "shop", &key, delay, json!({})));
    }
    put(s, "shop", "other-1", 3_600_000, json!({}));
    put(s, "shop", "order", 3_600_000, json!({}));
    put(s, "else", "order-001x", 3_600_000, json!({}));
    want.insert("order".into(), (0, 0));
    paged(s, 63.0);
    let want_keys: Vec<String> = want.keys().cloned().collect();
    for limit in [1, 7, 1_000] {
        let got = list_all(s, "shop", "prefix=order", limit);
        let keys: Vec<String> = got
            .iter()
            .map(|t| t["key"].as_str().unwrap_or("").to_string())
            .collect();
        assert_eq!(keys, want_keys, "limit {limit}");
        for t in &got {
            let key = t["key"].as_str().unwrap_or("");
            let (fire_at, version) = want[key];
            if fire_at > 0 {
                assert_eq!(t["fire_at_us"].as_u64(), Some(fire_at), "{t}");
                assert_eq!(t["version"].as_u64(), Some(version), "{t}");
            }
        }
    }
    // From a paged key on, and from a wheel key on.
    for after in ["order-051", "order-050"] {
        let (st, page) = s.json(
            "GET",
            &format!("/v1/timers/shop?prefix=order-&after={after}&limit=3"),
            "",
        );
        assert_eq!(st, 200, "{page}");
        let keys: Vec<&str> = page["timers"]
            .as_array()
            .expect("timers")
            .iter()
            .filter_map(|t| t["key"].as_str())
            .collect();
        let from: usize = after[6..].parse().expect("number");
        let expect: Vec<String> = (from + 1..from + 4)
            .map(|i| format!("order-{i:03}"))
            .collect();
        assert_eq!(keys, expect, "after {after}");
        assert_eq!(page["next"].as_str(), Some(expect[2].as_str()));
    }
    // Payloads, read back from the pages for the paged ones.
    let (st, page) = s.json("GET", "/v1/timers/shop?prefix=order-00&payloads=true", "");
    assert_eq!(st, 200, "{page}");
    let rows = page["timers"].as_array().expect("timers");
    assert_eq!(rows.len(), 10, "{page}");
    for t in rows {
        assert_eq!(t["payload"], t["key"], "{t}");
    }
}

/// A bulk cancel of a prefix whose timers are mostly paged cancels every one of them, and
/// durably: the service is SIGKILLed as soon as the action says done, and after the restart
/// none of them is pending, none is paged again, and none fires; the timers outside the
/// prefix all fire.
#[test]
fn a_bulk_cancel_cancels_paged_timers_and_none_fires_after_a_sigkill() {
    let data = tempfile::tempdir().expect("data dir");
    let rx = Receiver::ok();
    let toml = format!("callback_allow = [{:?}]\n", rx.base());
    let svc = serve(data.path(), &toml, "2");
    let s = &svc.s;
    let hook = json!({"callback": {"url": rx.url("fire")}});
    let (mut first, mut last) = (u64::MAX, 0);
    for i in 0..200 {
        // Due in 30 to 32 s: paged (beyond the 2 s horizon) until 2 s before, time enough
        // for the puts and the cancel on a busy host.
        let delay = 30_000 + (i % 20) * 100;
        let mut due = vec![put(s, "shop", &format!("order-{i:03}"), delay, hook.clone()).0];
        if i % 10 == 0 {
            due.push(put(s, "shop", &format!("keep-{i:03}"), delay, hook.clone()).0);
        }
        first = first.min(due[0]);
        last = due.into_iter().fold(last, u64::max);
    }
    paged(s, 220.0);
    let (st, v) = s.json("DELETE", "/v1/timers/shop?prefix=order-", "");
    assert_eq!(st, 202, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    let done = eventually("the bulk cancel to finish", || {
        let (st, v) = s.json("GET", &format!("/v1/actions/shop/{id}"), "");
        assert_eq!(st, 200, "{v}");
        (v["state"] == "done").then_some(v)
    });
    let cancelled_at = now_us();
    svc.sigkill();
    assert!(
        cancelled_at + 2_000_000 < first,
        "the puts and the cancel took so long that the timers were no longer paged"
    );
    assert_eq!(
        (done["matched"].as_u64(), done["cancelled"].as_u64()),
        (Some(200), Some(200)),
        "{done}"
    );
    let svc = serve(data.path(), &toml, "2");
    let s = &svc.s;
    assert!(
        list_all(s, "shop", "prefix=order-", 1_000).is_empty(),
        "none pending after the restart"
    );
    assert_eq!(s.req("GET", "/v1/timers/shop/order-007", "").status, 404);
    assert_eq!(list_all(s, "shop", "prefix=keep-", 1_000).len(), 20);
    while now_us() < last + 2_000_000 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let got = rx.wait(Duration::from_secs(10), |r| r.len() >= 20);
    std::thread::sleep(Duration::from_millis(500));
    let fired: Vec<String> = rx
        .received()
        .iter()
        .map(|d| d.json()["key"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(got.len() >= 20, "the kept timers fire: {fired:?}");
    assert!(
        fired.iter().all(|k| k.starts_with("keep-")),
        "a cancelled timer fired: {fired:?}"
    );
    assert_eq!(fired.len(), 20, "{fired:?}");
}
