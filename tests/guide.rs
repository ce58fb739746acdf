//! `docs/GUIDE.md`, run: each of its shell blocks after "Start it", against the real binary on
//! the journal store and a real receiver, with the guide's address and port replaced by the
//! test's, then the state it must leave checked over HTTP. A guide command that the server
//! refuses, or that no longer parses, fails here before a reader meets it.

mod api_support;
#[path = "support/receiver.rs"]
mod receiver;

use api_support::{eventually, Configured};

/// The guide's shell blocks, in order.
fn blocks(text: &str) -> Vec<String> {
    text.split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(code, _)| code.to_string()))
        .collect()
}

#[test]
fn the_guides_commands_work_against_punctual_serve() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/GUIDE.md"))
        .expect("docs/GUIDE.md");
    let all = blocks(&guide);
    assert!(all.len() >= 6, "the guide's blocks: {}", all.len());
    assert!(all[0].contains("-- serve"), "the first block starts it");
    let rx = receiver::Receiver::ok();
    let config = format!(
        "callback_allow = [{:?}]\ncallback_allow_networks = [\"127.0.0.1/32\"]\n",
        rx.base()
    );
    let dir = tempfile::tempdir().expect("dir");
    let server = Configured::journal(dir.path(), &config, &["--shards", "2"]);
    let s = &server.s;
    let here = s.addr.to_string();
    let hook = rx.base();
    // Each block as the reader runs it; a create-once block twice (the repeat is refused),
    // and the compare-and-set line again, as the guide says to.
    let mut steps = Vec::new();
    for b in &all[1..] {
        let b = b
            .replace("localhost:7480", &here)
            .replace("http://127.0.0.1:9000/", &hook);
        steps.push(b.clone());
        if b.contains("\"if\": \"absent\"") {
            steps.push(b.clone());
        }
        if b.contains("if_version\\\": $V") {
            steps.push(b.lines().last().unwrap_or("").to_string());
        }
    }
    let script = steps.join("\necho\n");
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .output()
        .expect("bash");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");

    // Created once: the repeat was refused, and did not move the deadline.
    assert!(said.contains("\"code\":\"exists\""), "{said}");
    let get = |key: &str| s.json("GET", &format!("/v1/timers/shop/{key}"), "");
    // Paid: cancelled by its version.
    assert_eq!(get("order-8812").0, 404, "{said}");
    // Extended by version once; the stale repeat was refused.
    let (st, g) = get("order-8813");
    assert_eq!(st, 200, "{said}");
    let left_ms =
        (g["fire_at_us"].as_u64().unwrap_or(0) / 1_000).saturating_sub(receiver::now_us() / 1_000);
    assert!(left_ms > 900_000, "extended to 30 minutes: {g}");
    assert!(said.contains("version_mismatch"), "{said}");
    // The cart reminders were cancelled by prefix, in the background.
    eventually("the bulk cancel", || {
        (get("cart-31").0 == 404 && get("cart-32").0 == 404).then_some(())
    });
    assert!(
        said.contains("{\"timers\":[{\"key\":\"order-8813\""),
        "the listing: {said}"
    );
    assert!(
        said.contains("\"state\":\""),
        "the action's progress: {said}"
    );
    // The nightly schedule, and its next three nights in New York time.
    let (st, night) = s.json("GET", "/v1/schedules/shop/nightly-reconcile", "");
    assert_eq!(st, 200, "{said}");
    assert_eq!(night["definition"]["time_zone"], "America/New_York");
    assert!(said.contains("\"local\":\""), "the preview: {said}");
}
