//! When delivery gives up: a permanent 404, the last attempt spent (a dead letter re-driven or
//! discarded), and a cancel while retries are under way.

use super::*;

#[test]
fn a_404_is_permanent_and_the_timer_is_dead_at_once() {
    let rx = Receiver::start(|_, _| Reply::status(404));
    let s = start(&format!("callback_allow = [{:?}]\n", rx.base()), &[]);
    let (_, r) = put(
        &s,
        "t",
        "gone",
        json!({"delay_ms": 10, "payload": "p", "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 5, "base_delay_ms": 10, "max_delay_ms": 10}}),
    );
    let letters = eventually("a dead letter", || {
        let d = dead(&s, "t");
        (!d.is_empty()).then_some(d)
    });
    assert_eq!(letters.len(), 1);
    let l = &letters[0];
    assert_eq!(l["key"], "gone");
    assert_eq!(l["attempts"], 1);
    assert_eq!(l["last_status"], 404);
    assert_eq!(l["version"], r["version"]);
    assert_eq!(l["fire_at_us"], r["fire_at_us"]);
    assert_eq!(l["payload"], "p");
    assert_eq!(l["callback"]["url"], rx.url("h"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rx.received().len(), 1, "a permanent failure is not retried");
    assert_eq!(s.req("GET", "/v1/timers/t/gone", "").status, 404);
}

#[test]
fn after_max_attempts_a_dead_letter_that_can_be_redriven_or_discarded() {
    let rx = Receiver::start(|_, _| Reply::status(503));
    let s = start(&format!("callback_allow = [{:?}]\n", rx.base()), &[]);
    let retry = json!({"max_attempts": 3, "base_delay_ms": 10, "max_delay_ms": 20});
    for key in ["a", "b"] {
        let (st, _) = put(
            &s,
            "t",
            key,
            json!({"delay_ms": 10, "callback": {"url": rx.url(key)}, "retry": retry}),
        );
        assert_eq!(st, 201);
    }
    let letters = eventually("two dead letters", || {
        let d = dead(&s, "t");
        (d.len() == 2).then_some(d)
    });
    for l in &letters {
        assert_eq!(
            (l["attempts"].as_u64(), l["last_status"].as_u64()),
            (Some(3), Some(503))
        );
    }
    assert_eq!(rx.to("/a").len(), 3);
    let (_, listed) = s.json("GET", "/v1/dead/t?limit=1", "");
    assert_eq!(listed["dead"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["dead"][0]["key"], "a");
    let (_, after) = s.json("GET", "/v1/dead/t?after=a", "");
    assert_eq!(after["dead"][0]["key"], "b");

    // Re-drive "a" against a receiver that now answers 200: one more delivery, same key.
    rx.set_script(|_, _| Reply::status(200));
    let key_before = rx.to("/a")[0].header("idempotency-key").map(str::to_string);
    let r = s.req("POST", "/v1/dead/t/a/retry", "");
    assert_eq!(r.status, 202, "{:?}", String::from_utf8_lossy(&r.body));
    let got = rx.wait(LONG, |_| rx.to("/a").len() >= 4);
    let a: Vec<_> = got.iter().filter(|r| r.path == "/a").collect();
    assert_eq!(a.len(), 4);
    assert_eq!(a[3].header("punctual-attempt"), Some("1"), "a fresh budget");
    assert_eq!(
        a[3].header("idempotency-key").map(str::to_string),
        key_before
    );
    eventually("the re-driven letter leaves the list", || {
        let d = dead(&s, "t");
        (d.len() == 1 && d[0]["key"] == "b").then_some(())
    });
    eventually("the re-driven timer is delivered", || {
        (s.req("GET", "/v1/timers/t/a", "").status == 404).then_some(())
    });
    assert_eq!(s.req("POST", "/v1/dead/t/a/retry", "").status, 404);

    // Discard "b".
    assert_eq!(s.req("DELETE", "/v1/dead/t/b", "").status, 204);
    assert_eq!(s.req("DELETE", "/v1/dead/t/b", "").status, 404);
    assert!(dead(&s, "t").is_empty());
    assert_eq!(s.req("GET", "/v1/dead/t", "").status, 200);
    assert_eq!(s.req("PUT", "/v1/dead/t", "").status, 405);
}

#[test]
fn a_cancel_during_retries_stops_them() {
    let rx = Receiver::start(|_, _| Reply::status(500));
    let s = start(&format!("callback_allow = [{:?}]\n", rx.base()), &[]);
    put(
        &s,
        "t",
        "k",
        json!({"delay_ms": 10, "callback": {"url": rx.url("h")},
               "retry": {"max_attempts": 100, "base_delay_ms": 100, "max_delay_ms": 100}}),
    );
    rx.wait(LONG, |r| r.len() >= 2);
    let (st, g) = s.json("GET", "/v1/timers/t/k", "");
    assert_eq!(st, 200);
    assert!(g["delivery"]["attempts"].as_u64() >= Some(1), "{g}");
    assert!(
        matches!(
            g["delivery"]["state"].as_str(),
            Some("retrying" | "in_flight")
        ),
        "{g}"
    );
    assert_eq!(s.req("DELETE", "/v1/timers/t/k", "").status, 204);
    let at_cancel = rx.received().len();
    std::thread::sleep(Duration::from_millis(800));
    // An attempt already on the wire may still land; no retry follows it.
    assert!(
        rx.received().len() <= at_cancel + 1,
        "retries went on after the cancel"
    );
    assert!(dead(&s, "t").is_empty());
}
