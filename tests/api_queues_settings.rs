//! The pull queues' per-tenant settings and figures through the real binary: a retention of
//! its own (a message ready past it becomes a dead letter, on the memory store and across a
//! journal restart that shortens it), the cap on waiting receives (`429 too_many_receives`
//! with `Retry-After`, per tenant, freed as receives end), the `punctual_queue_*` families of
//! `/metrics` (checked by promtool where it is installed), and bad settings refused at start.

mod api_support;

use api_support::{eventually, Configured, Server};
use serde_json::{json, Value};
use std::io::Write;
use std::time::Duration;

const TOKEN: &str = "shop-token-0123456789abcdef0123456";
const OTHER: &str = "other-token-0123456789abcdef012345";

fn start(toml: &str) -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(toml.as_bytes()).expect("write");
    let path = f.path().to_str().expect("utf-8 path").to_string();
    let s = Server::start(&["--store", "memory", "--shards", "2", "--config", &path]);
    (s, f)
}

fn put_due(s: &Server, token: &str, tenant: &str, key: &str) {
    let body = json!({"delay_ms": 0, "payload": {"k": key}});
    let (status, b) = s.call(token, "PUT", &format!("/v1/timers/{tenant}/{key}"), &body);
    assert!(status == 201 || status == 200, "PUT {key}: {status} {b}");
}

fn depth(s: &Server, token: &str, tenant: &str) -> Value {
    let (status, d) = s.call(token, "GET", &format!("/v1/queues/{tenant}"), &Value::Null);
    assert_eq!(status, 200, "{d}");
    d
}

fn dead_keys(s: &Server, token: &str, tenant: &str) -> Vec<String> {
    let (_, d) = s.call(token, "GET", &format!("/v1/dead/{tenant}"), &Value::Null);
    api_support::keys_of(&d["dead"])
}

/// The value of `family`'s sample for `tenant` in a scrape's text.
fn sample(text: &str, family: &str, tenant: &str) -> Option<f64> {
    let head = format!("{family}{{tenant=\"{tenant}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&head)?.trim().parse().ok())
}

/// Asserts `tenant`'s sample of each `punctual_queue_<family>` in a scrape's text.
fn expect(text: &str, tenant: &str, families: &[(&str, f64)]) {
    for (family, v) in families {
        let name = format!("punctual_queue_{family}");
        let queue: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("punctual_queue_"))
            .collect();
        assert_eq!(sample(text, &name, tenant), Some(*v), "{name}: {queue:#?}");
    }
}

fn scrape(s: &Server) -> String {
    let r = s.req("GET", "/metrics", "");
    assert_eq!(r.status, 200);
    String::from_utf8_lossy(&r.body).into_owned()
}

#[test]
fn a_message_ready_past_its_tenants_retention_becomes_a_dead_letter() {
    let toml = format!(
        "[tenants.shop]\ntoken = \"{TOKEN}\"\nqueue = true\nqueue_retention_s = 1\n\
         [tenants.other]\ntoken = \"{OTHER}\"\nqueue = true\n"
    );
    let (s, _f) = start(&toml);
    put_due(&s, TOKEN, "shop", "old");
    put_due(&s, OTHER, "other", "kept");
    eventually("both are ready", || {
        (depth(&s, TOKEN, "shop")["ready"] == 1 && depth(&s, OTHER, "other")["ready"] == 1)
            .then_some(())
    });
    eventually("shop's message is a dead letter", || {
        (dead_keys(&s, TOKEN, "shop") == ["old"]).then_some(())
    });
    assert_eq!(depth(&s, TOKEN, "shop")["ready"], 0);
    // The other tenant keeps its default of 7 days.
    assert_eq!(depth(&s, OTHER, "other")["ready"], 1);
    assert!(dead_keys(&s, OTHER, "other").is_empty());
    let text = scrape(&s);
    assert_eq!(
        sample(&text, "punctual_queue_dead_letters_made_total", "shop"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "punctual_queue_dead_letters_made_total", "other"),
        Some(0.0)
    );
}

#[test]
fn a_restart_with_a_shorter_retention_ends_old_messages_and_forgets_a_removed_tenant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let conf = |retention: u64, with_other: bool| {
        let mut t = format!(
            "[tenants.shop]\ntoken = \"{TOKEN}\"\nqueue = true\nqueue_retention_s = {retention}\n"
        );
        if with_other {
            t.push_str(&format!(
                "[tenants.other]\ntoken = \"{OTHER}\"\nqueue = true\n"
            ));
        }
        t
    };
    let first = Configured::journal(&data, &conf(3600, true), &["--shards", "2"]);
    put_due(&first.s, TOKEN, "shop", "a");
    put_due(&first.s, OTHER, "other", "b");
    eventually("both are ready", || {
        (depth(&first.s, TOKEN, "shop")["ready"] == 1
            && depth(&first.s, OTHER, "other")["ready"] == 1)
            .then_some(())
    });
    assert!(sample(&scrape(&first.s), "punctual_queue_ready", "other").is_some());
    first.sigkill();
    std::thread::sleep(Duration::from_millis(1100));
    // Back with a retention of 1 s: the message, ready for longer, is a dead letter at once.
    let second = Configured::journal(&data, &conf(1, false), &["--shards", "2"]);
    eventually("a is a dead letter after the restart", || {
        (dead_keys(&second.s, TOKEN, "shop") == ["a"]).then_some(())
    });
    assert_eq!(depth(&second.s, TOKEN, "shop")["ready"], 0);
    // The tenant taken out of the configuration has no queue series any more.
    let text = scrape(&second.s);
    assert!(!text.contains("tenant=\"other\""), "{text}");
    assert!(
        sample(&text, "punctual_queue_ready", "shop").is_some(),
        "{text}"
    );
}

/// A receive that waits up to `wait_ms`, on its own thread: its status, code and body.
fn waiting_receive(
    s: &Server,
    token: &'static str,
    tenant: &'static str,
    wait_ms: u64,
) -> std::thread::JoinHandle<(u16, Value)> {
    let addr = s.addr;
    std::thread::spawn(move || {
        let auth = format!("Bearer {token}");
        let body = json!({"wait_ms": wait_ms, "max": 1}).to_string();
        let path = format!("/v1/queues/{tenant}/receive");
        let r = api_support::request(
            addr,
            "POST",
            &path,
            &[("authorization", &auth)],
            body.as_bytes(),
        );
        (r.status, r.json())
    })
}

#[test]
fn receives_past_the_tenants_waiting_cap_are_refused_429_until_one_ends() {
    let toml = format!(
        "queue_max_waiting = 5\n\
         [tenants.shop]\ntoken = \"{TOKEN}\"\nqueue = true\nqueue_max_waiting = 2\n\
         [tenants.other]\ntoken = \"{OTHER}\"\nqueue = true\n"
    );
    let (s, _f) = start(&toml);
    let polls: Vec<_> = (0..2)
        .map(|_| waiting_receive(&s, TOKEN, "shop", 20_000))
        .collect();
    eventually("two receives wait", || {
        let text = scrape(&s);
        (sample(&text, "punctual_queue_waiting_receives", "shop") == Some(2.0)).then_some(())
    });
    let auth = format!("Bearer {TOKEN}");
    let body = json!({"wait_ms": 1000}).to_string();
    let r = s.req_h(
        "POST",
        "/v1/queues/shop/receive",
        &[("authorization", &auth)],
        &body,
    );
    assert_eq!((r.status, r.code()), (429, "too_many_receives".to_string()));
    assert_eq!(r.header("retry-after"), Some("1"));
    // A receive that would not wait is not refused, nor is another tenant's wait.
    let (status, b) = s.call(TOKEN, "POST", "/v1/queues/shop/receive", &json!({}));
    assert_eq!((status, b), (200, json!({"messages": []})));
    let (status, b) = s.call(
        OTHER,
        "POST",
        "/v1/queues/other/receive",
        &json!({"wait_ms": 200}),
    );
    assert_eq!((status, b), (200, json!({"messages": []})));
    // A message ends one wait (max 1 each): its place is free for a new one.
    put_due(&s, TOKEN, "shop", "m");
    eventually("one wait ended", || {
        let text = scrape(&s);
        (sample(&text, "punctual_queue_waiting_receives", "shop") == Some(1.0)).then_some(())
    });
    let (status, b) = s.call(
        TOKEN,
        "POST",
        "/v1/queues/shop/receive",
        &json!({"wait_ms": 200}),
    );
    assert_eq!((status, b), (200, json!({"messages": []})));
    let text = scrape(&s);
    assert_eq!(
        sample(&text, "punctual_queue_receives_refused_total", "shop"),
        Some(1.0)
    );
    // The one still waiting answers at the stop, at once, with nothing.
    let pid = s.child.id() as i32;
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let mut got: Vec<usize> = polls
        .into_iter()
        .map(|p| {
            let (status, b) = p.join().expect("poll");
            assert_eq!(status, 200, "{b}");
            b["messages"].as_array().map_or(0, Vec::len)
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, [0, 1]);
}

#[test]
fn queue_metrics_count_receives_acks_nacks_expiries_and_dead_letters_per_tenant() {
    let toml = format!(
        "[tenants.shop]\ntoken = \"{TOKEN}\"\nqueue = true\nqueue_max_receives = 2\n\
         [tenants.other]\ntoken = \"{OTHER}\"\nqueue = true\n"
    );
    let (s, _f) = start(&toml);
    for k in ["a", "b", "c"] {
        put_due(&s, TOKEN, "shop", k);
    }
    eventually("three are ready", || {
        (depth(&s, TOKEN, "shop")["ready"] == 3).then_some(())
    });
    std::thread::sleep(Duration::from_millis(20));
    let text = scrape(&s);
    assert_eq!(sample(&text, "punctual_queue_ready", "shop"), Some(3.0));
    assert!(sample(&text, "punctual_queue_oldest_ready_age_seconds", "shop").unwrap_or(0.0) > 0.0);
    assert_eq!(sample(&text, "punctual_queue_ready", "other"), Some(0.0));
    let receive = |max: u64, visibility_ms: u64| {
        let body = json!({"max": max, "visibility_ms": visibility_ms});
        let (status, b) = s.call(TOKEN, "POST", "/v1/queues/shop/receive", &body);
        assert_eq!(status, 200, "{b}");
        b["messages"].as_array().cloned().unwrap_or_default()
    };
    let first = receive(2, 60_000);
    assert_eq!(first.len(), 2);
    let settle = |action: &str, m: &Value| {
        let body = json!({"receipts": [m["receipt"]]});
        let (status, b) = s.call(TOKEN, "POST", &format!("/v1/queues/shop/{action}"), &body);
        assert_eq!(
            (status, b["results"][0]["status"].clone()),
            (200, json!(204))
        );
    };
    settle("ack", &first[0]);
    settle("nack", &first[1]);
    let text = scrape(&s);
    let shop = [
        ("received_total", 2.0),
        ("acked_total", 1.0),
        ("nacked_total", 1.0),
    ];
    expect(&text, "shop", &shop);
    expect(&text, "shop", &[("ready", 2.0)]);
    // Both left are received, their leases end: the nacked one on its second receive is a
    // dead letter, the other is ready again.
    let leased = std::time::Instant::now();
    assert_eq!(receive(10, 1_500).len(), 2);
    let text = scrape(&s);
    if leased.elapsed() < Duration::from_millis(1_400) {
        expect(&text, "shop", &[("in_flight", 2.0)]);
    }
    // The gauges are counted just before the counters are read: a scrape may see a lease's
    // end in the counters and not yet in the gauges.
    let text = eventually("both leases ended", || {
        let text = scrape(&s);
        let ended = sample(&text, "punctual_queue_expired_total", "shop") == Some(2.0)
            && sample(&text, "punctual_queue_in_flight", "shop") == Some(0.0);
        ended.then_some(text)
    });
    let shop = [
        ("received_total", 4.0),
        ("dead_letters_made_total", 1.0),
        ("in_flight", 0.0),
        ("ready", 1.0),
    ];
    expect(&text, "shop", &shop);
    expect(&text, "other", &[("received_total", 0.0)]);
    promtool_check(&text);
}

/// `promtool check metrics` on the scrape's `punctual_queue_*` families, where promtool is
/// installed. promtool reads the Prometheus text format, where a counter's family is named
/// with its `_total` (OpenMetrics names it without): the families' heads are renamed so.
fn promtool_check(text: &str) {
    let counters: Vec<String> = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix("# TYPE punctual_queue_")?
                .strip_suffix(" counter")
        })
        .map(|name| format!("punctual_queue_{name}"))
        .collect();
    let mut families = String::new();
    for line in text.lines().filter(|l| l.contains("punctual_queue_")) {
        let mut line = line.to_string();
        for c in &counters {
            for head in ["# HELP ", "# TYPE "] {
                if let Some(rest) = line.strip_prefix(&format!("{head}{c} ")) {
                    line = format!("{head}{c}_total {rest}");
                }
            }
        }
        families.push_str(&line);
        families.push('\n');
    }
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("promtool is not installed: the exposition's format is not checked");
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(families.as_bytes())
            .expect("write to promtool");
    }
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{families}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_queue_settings_are_refused_at_start_with_the_key_named() {
    for (toml, key) in [
        ("queue_retention_s = 0\n", "queue_retention_s"),
        (
            "[tenants.a]\nqueue = true\nqueue_retention_s = 0\n",
            "tenants.a.queue_retention_s",
        ),
        (
            "[tenants.a]\nqueue = true\nqueue_retention_s = 99999999999\n",
            "tenants.a.queue_retention_s",
        ),
        ("queue_max_waiting = 0\n", "queue_max_waiting"),
        (
            "[tenants.a]\nqueue = true\nqueue_max_waiting = 1000000\n",
            "tenants.a.queue_max_waiting",
        ),
    ] {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(toml.as_bytes()).expect("write");
        let path = f.path().to_str().expect("utf-8 path").to_string();
        let (status, err) = Server::refused(&["--store", "memory", "--config", &path]);
        assert!(!status.success(), "{toml} was accepted");
        assert!(err.contains(&format!("`{key}`")), "{toml}: {err}");
    }
}
