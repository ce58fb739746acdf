//! The pull queues' routes: each documented answer provoked on a server with a queue tenant
//! (`q`), a tenant with a token, and a tenant without a queue. The 429 and the unknown tenant
//! are provoked by `admission` (`rate_limited`) and here (`too_many_receives`), the 501 of the
//! Redis store by `store_down`.

use super::*;

const QUEUE_TENANTS: &str = r#"
[tenants.q]
queue = true
queue_max_receives = 2
queue_max_waiting = 1
[tenants.locked]
token = "s3cret-0123456789abcdef0123456789"
queue = true
[tenants.plain]
"#;

pub(super) fn queues(spec: &Spec) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(QUEUE_TENANTS.as_bytes()).expect("write");
    let conf = f.path().to_str().expect("utf-8 path").to_string();
    let args = [
        "--config",
        &conf,
        "--store",
        "memory",
        "--body-timeout-ms",
        "1000",
    ];
    let s = Server::start(&args);
    let api = Api { spec, s: &s };
    assert_eq!(api.ask("GET", "/v1/queues/q", "").status, 200);
    let settle = [
        ("ack", r#"{"receipts": ["x"]}"#),
        ("nack", r#"{"receipts": ["x"], "delay_ms": 10}"#),
        ("extend", r#"{"receipts": ["x"], "visibility_ms": 1000}"#),
    ];
    let mut routes = vec![("GET", "/v1/queues/{t}".to_string(), "")];
    routes.push(("POST", "/v1/queues/{t}/receive".into(), "{}"));
    for (action, body) in settle {
        routes.push(("POST", format!("/v1/queues/{{t}}/{action}"), body));
    }
    for (method, template, body) in &routes {
        let at = |t: &str| template.replace("{t}", t);
        let a = api.ask(method, &at("plain"), body);
        assert_eq!(a.sc(), (404, "not_found"), "{method} {template}");
        let a = api.ask(method, &at("locked"), body);
        assert_eq!(a.sc(), (401, "unauthorized"), "{method} {template}");
        let a = api.ask(method, &at("a%20b"), body);
        assert_eq!(a.sc(), (400, "invalid_tenant"), "{method} {template}");
        assert_eq!(api.oversized_head(method, &at("q")).status, 431);
        if *method == "POST" {
            let p = at("q");
            let head =
                format!("POST {p} HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999\r\n\r\n{{");
            let a = api.raw("POST", &p, head.as_bytes());
            assert_eq!(a.sc(), (413, "body_too_large"), "{template}");
            assert_eq!(api.slow_body("POST", &p).sc(), (408, "request_timeout"));
            assert_eq!(api.ask("POST", &p, "{").sc(), (400, "malformed_json"));
            assert_eq!(
                api.ask("POST", &p, r#"{"max": 0, "receipts": []}"#).status,
                400
            );
        }
    }
    // A message: received, extended, nacked, received again and acknowledged, with the
    // results' statuses the document lists.
    let put = api.ask(
        "PUT",
        "/v1/timers/q/m",
        r#"{"delay_ms": 0, "payload": {"n": 1}}"#,
    );
    assert_eq!(put.status, 201);
    let receive = r#"{"max": 5, "wait_ms": 5000, "visibility_ms": 30000}"#;
    let first = api.ask("POST", "/v1/queues/q/receive", receive);
    let receipt = first.body["messages"][0]["receipt"]
        .as_str()
        .expect("a message")
        .to_string();
    let one = |action: &str, extra: &str| {
        let body = format!(r#"{{"receipts": [{receipt:?}]{extra}}}"#);
        api.ask("POST", &format!("/v1/queues/q/{action}"), &body)
            .items()
            .into_iter()
            .map(|(s, c)| (s, c.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        one("extend", r#", "visibility_ms": 60000"#),
        vec![(204, String::new())]
    );
    assert_eq!(one("nack", ""), vec![(204, String::new())]);
    assert_eq!(one("ack", ""), vec![(409, "lease_expired".to_string())]);
    let unknown = api.ask("POST", "/v1/queues/q/ack", r#"{"receipts": ["forged"]}"#);
    assert_eq!(unknown.items(), vec![(404, "unknown_receipt")]);
    let again = api.ask("POST", "/v1/queues/q/receive", receive);
    assert_eq!(again.body["messages"][0]["receive_count"], 2);
    let depth = api.ask("GET", "/v1/queues/q", "");
    assert_eq!(depth.body["in_flight"], 1);
    let empty = api.ask("POST", "/v1/queues/q/receive", "");
    assert_eq!(empty.body["messages"], json!([]));
    // One receive waits (`queue_max_waiting = 1`): another that would wait is refused.
    let addr = s.addr;
    let waiting = std::thread::spawn(move || {
        let body = br#"{"wait_ms": 3000}"#;
        request(addr, "POST", "/v1/queues/q/receive", &[], body).status
    });
    let waits = (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        s.metric("punctual_queue_waiting_receives") == 1.0
    });
    assert!(waits, "the first receive never waited");
    let refused = api.ask("POST", "/v1/queues/q/receive", r#"{"wait_ms": 100}"#);
    assert_eq!(refused.sc(), (429, "too_many_receives"));
    assert_eq!(waiting.join().expect("waiting receive"), 200);
}
