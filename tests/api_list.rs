//! Listing pending timers by key prefix against the real binary: pages by key across shards,
//! `next` until the last page, keys added and removed while paging (none listed twice, none
//! that stayed pending missed), payloads on request, and bad input.

mod api_support;

use api_support::Server;
use serde_json::{json, Value};
use std::collections::BTreeSet;

fn put(s: &Server, tenant: &str, key: &str) -> u64 {
    let (st, v) = s.json(
        "PUT",
        &format!("/v1/timers/{tenant}/{key}"),
        &json!({"delay_ms": 600_000, "payload": {"k": key}}).to_string(),
    );
    assert!(st == 201 || st == 200, "{v}");
    v["version"].as_u64().expect("version")
}

fn page(s: &Server, query: &str) -> Value {
    let (st, v) = s.json("GET", &format!("/v1/timers/t?{query}"), "");
    assert_eq!(st, 200, "{query}: {v}");
    v
}

fn keys(p: &Value) -> Vec<String> {
    p["timers"]
        .as_array()
        .expect("timers")
        .iter()
        .map(|t| t["key"].as_str().expect("key").to_string())
        .collect()
}

#[test]
fn pages_by_key_across_shards_until_the_last() {
    let s = Server::start(&["--shards", "2"]);
    let mut want = BTreeSet::new();
    for i in 0..10 {
        let key = format!("order-88{i}");
        put(&s, "t", &key);
        want.insert(key);
    }
    put(&s, "t", "order-9");
    put(&s, "t", "other");
    put(&s, "u", "order-885");
    let mut got = Vec::new();
    let mut query = "prefix=order-88&limit=4".to_string();
    loop {
        let p = page(&s, &query);
        let ks = keys(&p);
        assert!(ks.len() <= 4, "{p}");
        got.extend(ks.clone());
        match p["next"].as_str() {
            Some(next) => {
                assert_eq!(Some(next), ks.last().map(String::as_str), "{p}");
                query = format!("prefix=order-88&limit=4&after={next}");
            }
            None => break,
        }
    }
    assert_eq!(got, want.iter().cloned().collect::<Vec<_>>());
    // A page shows what GET shows; payloads only on request.
    let p = page(&s, "prefix=order-880&limit=1");
    let (_, g) = s.json("GET", "/v1/timers/t/order-880", "");
    let t = &p["timers"][0];
    assert_eq!(
        (&t["fire_at_us"], &t["version"]),
        (&g["fire_at_us"], &g["version"])
    );
    assert!(t.get("payload").is_none(), "{p}");
    assert!(p.get("next").is_none(), "one key, one page: {p}");
    let p = page(&s, "prefix=order-880&payloads=true");
    assert_eq!(p["timers"][0]["payload"], json!({"k": "order-880"}));
    // No prefix: the tenant's whole set, by key.
    assert_eq!(keys(&page(&s, "")).len(), 12);
}

#[test]
fn keys_added_and_removed_while_paging_are_listed_once_and_none_that_stayed_is_missed() {
    let s = Server::start(&["--shards", "2"]);
    for i in 10..40 {
        put(&s, "t", &format!("k{i}"));
    }
    let first = page(&s, "prefix=k&limit=10");
    let after = first["next"].as_str().expect("more pages").to_string();
    // Meanwhile: a key before the cursor and one after it are added, one after it cancelled,
    // and one after it replaced.
    put(&s, "t", "k0");
    put(&s, "t", "k99");
    assert_eq!(s.req("DELETE", "/v1/timers/t/k30", "").status, 204);
    put(&s, "t", "k31");
    let mut seen = keys(&first);
    let mut query = format!("prefix=k&limit=10&after={after}");
    loop {
        let p = page(&s, &query);
        seen.extend(keys(&p));
        match p["next"].as_str() {
            Some(next) => query = format!("prefix=k&limit=10&after={next}"),
            None => break,
        }
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a key listed twice: {seen:?}");
    for i in (10..40).filter(|&i| i != 30) {
        assert!(unique.contains(&format!("k{i}")), "k{i} missed: {seen:?}");
    }
    assert!(unique.contains(&"k99".to_string()));
    assert!(!unique.contains(&"k30".to_string()));
}

#[test]
fn bad_list_input_is_400_naming_the_parameter() {
    let s = Server::start(&[]);
    for (query, names) in [
        ("prefix=a%2Fb", "prefix"),
        ("prefix=a%20b", "prefix"),
        ("limit=0", "limit"),
        ("limit=10001", "limit"),
        ("limit=ten", "limit"),
        ("after=a%2Fb", "after"),
        ("payloads=1", "payloads"),
        ("color=red", "color"),
        // Characters no key holds, a prefix longer than any key, a parameter given twice.
        ("prefix=a*", "prefix"),
        ("prefix=%C3%A9", "prefix"),
        ("prefix=a%00", "prefix"),
        (&format!("prefix={}", "a".repeat(129)), "prefix"),
        ("prefix=a&prefix=b", "prefix"),
        ("limit=5&limit=6", "limit"),
        ("after=a&after=b", "after"),
        ("payloads=true&limit=1001", "limit"),
    ] {
        let (st, e) = s.json("GET", &format!("/v1/timers/t?{query}"), "");
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("invalid_field")),
            "{query}"
        );
        let message = e["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(names), "{query}: {message}");
    }
    let r = s.req("PUT", "/v1/timers/t", "");
    assert_eq!(
        (r.status, r.header("allow")),
        (405, Some("GET, POST, DELETE"))
    );
}

#[test]
fn churn_between_every_page_lists_no_key_twice_and_misses_none_that_stayed() {
    let s = Server::start(&["--shards", "4"]);
    let mut rng = fastrand::Rng::with_seed(7);
    let initial: Vec<String> = (0..150).map(|i| format!("c{:04}", i * 10)).collect();
    for k in &initial {
        put(&s, "t", k);
    }
    // Between pages: keys added (anywhere: behind the cursor, ahead of it), keys cancelled
    // and keys replaced. Each change is remembered with the cursor it was made at.
    let mut live: BTreeSet<String> = initial.iter().cloned().collect();
    let mut gone_ahead = BTreeSet::new(); // cancelled ahead of the cursor, never put again
    let mut added_ahead = BTreeSet::new(); // put ahead of the cursor, still pending
    let mut seen: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let query = match &after {
            Some(a) => format!("prefix=c&limit=7&after={a}"),
            None => "prefix=c&limit=7".to_string(),
        };
        let p = page(&s, &query);
        pages += 1;
        seen.extend(keys(&p));
        let Some(next) = p["next"].as_str().map(str::to_string) else {
            break;
        };
        for _ in 0..3 {
            let k = format!("c{:04}", rng.u32(0..1_500) * 10 + rng.u32(1..10));
            put(&s, "t", &k);
            gone_ahead.remove(&k);
            if k > next {
                added_ahead.insert(k.clone());
            }
            live.insert(k);
        }
        for _ in 0..2 {
            let pick: Vec<&String> = live.iter().collect();
            let k = pick[rng.usize(0..pick.len())].clone();
            assert_eq!(
                s.req("DELETE", &format!("/v1/timers/t/{k}"), "").status,
                204
            );
            live.remove(&k);
            added_ahead.remove(&k);
            if k > next {
                gone_ahead.insert(k);
            }
        }
        let pick: Vec<&String> = live.iter().collect();
        let replaced = pick[rng.usize(0..pick.len())].clone();
        put(&s, "t", &replaced);
        after = Some(next);
    }
    assert!(pages > 20, "{pages} pages: too few to churn between");
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "not by key, or a key listed twice");
    let listed: BTreeSet<&String> = seen.iter().collect();
    for k in initial.iter().filter(|k| live.contains(*k)) {
        assert!(listed.contains(k), "{k} stayed pending and was missed");
    }
    for k in &added_ahead {
        assert!(
            listed.contains(k),
            "{k}, put ahead of the cursor, was missed"
        );
    }
    for k in &gone_ahead {
        assert!(
            !listed.contains(k),
            "{k}, cancelled ahead of the cursor, was listed"
        );
    }
}
