//! The history route: each documented answer provoked on a server whose callbacks go to a
//! receiver that answers 200 on one path and 503 on another. The 429 and the unknown tenant are provoked by
//! `admission`, the 501 of the Redis store by `store_down`, the 405 by `unlisted_methods`.

use super::*;

pub(super) fn history(spec: &Spec) {
    let rx = receiver::Receiver::start(|r, _| {
        receiver::Reply::status(if r.path == "/ok" { 200 } else { 503 })
    });
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    let conf = format!(
        "callback_allow = [{:?}]\n[tenants.t]\n[tenants.locked]\ntoken = \"s3cret-0123456789abcdef0123456789\"\n",
        rx.base()
    );
    f.write_all(conf.as_bytes()).expect("write");
    let path = f.path().to_str().expect("utf-8 path").to_string();
    let s = Server::start(&["--config", &path, "--store", "memory"]);
    let api = Api { spec, s: &s };
    let retry = json!({"max_attempts": 2, "base_delay_ms": 10, "max_delay_ms": 10});
    for (key, to) in [("a", "ok"), ("b", "fail")] {
        let body = json!({"delay_ms": 1, "callback": {"url": rx.url(to)}, "retry": retry});
        assert_eq!(
            api.put(&format!("/v1/timers/t/{key}"), &body.to_string())
                .status,
            201
        );
    }
    assert_eq!(
        api.put("/v1/timers/t/plain", r#"{"delay_ms": 1}"#).status,
        201
    );
    // Each outcome that a page shows: delivered (200), dead (503 twice), fired (no callback).
    let settled = (0..2000).find_map(|_| {
        let a = api.ask("GET", "/v1/history/t", "");
        let entries = a.body["entries"].as_array().cloned().unwrap_or_default();
        let done = entries.len() == 3 && entries.iter().all(|e| e["outcome"] != "retrying");
        std::thread::sleep(std::time::Duration::from_millis(10));
        done.then_some(a)
    });
    let a = settled.expect("three settled entries");
    let mut outcomes: Vec<_> = a.body["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["outcome"].clone())
        .collect();
    outcomes.sort_by_key(Value::to_string);
    assert_eq!(
        outcomes,
        [json!("dead_lettered"), json!("delivered"), json!("fired")]
    );
    let page = api.ask("GET", "/v1/history/t?limit=2", "");
    let next = page.body["next"].as_str().expect("a next page").to_string();
    let last = api.ask("GET", &format!("/v1/history/t?limit=2&after={next}"), "");
    assert_eq!(last.body["entries"].as_array().map(Vec::len), Some(1));
    assert_eq!(api.ask("GET", "/v1/history/t?key=a", "").status, 200);
    for (query, code) in [
        ("/v1/history/t?limit=0", "invalid_field"),
        ("/v1/history/t?after=x", "invalid_field"),
        ("/v1/history/t?key=a%2F", "invalid_key"),
        ("/v1/history/a%20b", "invalid_tenant"),
    ] {
        assert_eq!(api.ask("GET", query, "").sc(), (400, code), "{query}");
    }
    assert_eq!(
        api.ask("GET", "/v1/history/locked", "").sc(),
        (401, "unauthorized")
    );
    assert_eq!(api.oversized_head("GET", "/v1/history/t").status, 431);
}
