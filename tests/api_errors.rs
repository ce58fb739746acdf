//! Every 4xx/5xx of the API table with its code, and bad input of every kind: the server
//! answers each with a JSON error and stays healthy.

mod api_support;
use api_support::{raw_exchange, Server};

fn expect(s: &Server, method: &str, path: &str, body: &str, status: u16, code: &str) {
    let r = s.req(method, path, body);
    assert_eq!(
        (r.status, r.code().as_str()),
        (status, code),
        "{method} {path} {body:.80}"
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.json()["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

#[test]
fn bad_json_is_400_with_a_code_per_kind_of_mistake() {
    let s = Server::start(&[]);
    let p = "/v1/timers/t/k";
    expect(&s, "PUT", p, "", 400, "malformed_json");
    expect(&s, "PUT", p, "{\"delay_ms\":", 400, "malformed_json");
    expect(&s, "PUT", p, "not json", 400, "malformed_json");
    expect(
        &s,
        "PUT",
        p,
        r#"{"delay_ms":1,"colour":"red"}"#,
        400,
        "invalid_field",
    );
    expect(&s, "PUT", p, r#"{"delay_ms":"10"}"#, 400, "invalid_field");
    expect(&s, "PUT", p, r#"{"fire_at":12}"#, 400, "invalid_field");
    expect(&s, "PUT", p, r#"[1]"#, 400, "invalid_field");
    expect(&s, "PUT", p, r#"{}"#, 400, "invalid_deadline");
    expect(
        &s,
        "PUT",
        p,
        r#"{"delay_ms":1,"fire_at":"2030-01-01T00:00:00Z"}"#,
        400,
        "invalid_deadline",
    );
    expect(
        &s,
        "PUT",
        p,
        r#"{"fire_at":"2030-01-01 00:00"}"#,
        400,
        "invalid_deadline",
    );
    expect(&s, "PUT", p, r#"{"delay_ms":0.5}"#, 400, "invalid_deadline");
    expect(
        &s,
        "POST",
        "/v1/timers/t",
        r#"{"items":[]}"#,
        400,
        "invalid_field",
    );
    assert_eq!(s.req("GET", "/healthz", "").status, 200);
}

#[test]
fn invalid_utf8_in_a_body_is_400_malformed_json() {
    let s = Server::start(&[]);
    let body = b"{\"delay_ms\":1,\"payload\":\"\xff\xfe\"}";
    let r = api_support::request(s.addr, "PUT", "/v1/timers/t/k", &[], body);
    assert_eq!((r.status, r.code().as_str()), (400, "malformed_json"));
}

#[test]
fn deadlines_at_and_beyond_their_bounds() {
    let s = Server::start(&[]);
    let p = "/v1/timers/t/k";
    for ok in [
        r#"{"fire_at_ms":0}"#,
        r#"{"fire_at":"1970-01-01T00:00:00Z"}"#,
        r#"{"delay_ms":0}"#,
        r#"{"delay_ms":315360000000}"#,
    ] {
        let r = s.req("PUT", p, ok);
        assert!(r.status == 201 || r.status == 200, "{ok}: {}", r.status);
    }
    for bad in [
        r#"{"fire_at_ms":-1}"#,
        r#"{"fire_at":"1969-12-31T23:59:59Z"}"#,
        r#"{"delay_ms":-1}"#,
        r#"{"delay_ms":315360000001}"#,
        r#"{"fire_at":"9999-12-31T23:59:59Z"}"#,
        r#"{"fire_at_ms":18446744073709551615}"#,
        r#"{"fire_at_ms":-9223372036854775808}"#,
        r#"{"fire_at_ms":1e300}"#,
    ] {
        expect(&s, "PUT", p, bad, 400, "deadline_out_of_range");
    }
}

#[test]
fn tenants_and_keys_at_and_beyond_their_bounds() {
    let s = Server::start(&[]);
    let body = r#"{"delay_ms":600000}"#;
    let k128 = "k".repeat(128);
    let k129 = "k".repeat(129);
    for ok in [
        format!("/v1/timers/t/{k128}"),
        format!("/v1/timers/{k128}/k"),
        "/v1/timers/a.b_c:d-E9/...".into(),
    ] {
        assert_eq!(s.req("PUT", &ok, body).status, 201, "{ok}");
    }
    expect(
        &s,
        "PUT",
        &format!("/v1/timers/t/{k129}"),
        body,
        400,
        "invalid_key",
    );
    expect(
        &s,
        "PUT",
        &format!("/v1/timers/{k129}/k"),
        body,
        400,
        "invalid_tenant",
    );
    for bad in [".", "..", "a%20b", "a+b", "%2F", "caf%C3%A9"] {
        expect(
            &s,
            "PUT",
            &format!("/v1/timers/t/{bad}"),
            body,
            400,
            "invalid_key",
        );
        expect(
            &s,
            "GET",
            &format!("/v1/timers/{bad}/k"),
            "",
            400,
            "invalid_tenant",
        );
    }
    expect(
        &s,
        "POST",
        "/v1/timers/a%25",
        r#"{"timers":[]}"#,
        400,
        "invalid_tenant",
    );
}

/// A path segment is percent-decoded (RFC 3986) before its check, as clients encode it
/// (`encodeURIComponent` encodes `:`): the decoded name is the timer's. A decoded `/`, a dot
/// segment however spelled, and bytes that do not decode to UTF-8 stay refused.
#[test]
fn percent_encoded_names_are_decoded_before_the_check() {
    let s = Server::start(&[]);
    let body = r#"{"delay_ms":600000}"#;
    let (st, r) = s.json("PUT", "/v1/timers/RAxb/0%3A", body);
    assert_eq!(
        (st, &r["tenant"], &r["key"]),
        (201, &"RAxb".into(), &"0:".into()),
        "{r}"
    );
    assert_eq!(s.req("GET", "/v1/timers/RAxb/0:", "").status, 200);
    assert_eq!(s.req("GET", "/v1/timers/%52Axb/0%3a", "").status, 200);
    let (st, r) = s.json(
        "POST",
        "/v1/timers/%52Axb",
        r#"{"timers":[{"key":"b:1","delay_ms":600000}]}"#,
    );
    assert_eq!((st, &r["results"][0]["status"]), (200, &201.into()), "{r}");
    assert_eq!(s.req("DELETE", "/v1/timers/RAxb/b%3A1", "").status, 204);
    // The dead-letter routes and the list's `after` decode the same way.
    assert_eq!(s.req("DELETE", "/v1/dead/RAxb/0%3A", "").status, 404);
    assert_eq!(s.req("POST", "/v1/dead/R%41xb/0%3A/retry", "").status, 404);
    assert_eq!(s.req("GET", "/v1/dead/RAxb?after=0%3A", "").status, 200);
    for bad in [
        "%2F", "a%2Fb", "a%2fb", "%2e", "%2E%2E", ".%2e", "%2e.", "%FF", "a%00", "%", "%G1",
    ] {
        expect(
            &s,
            "PUT",
            &format!("/v1/timers/t/{bad}"),
            body,
            400,
            "invalid_key",
        );
        expect(
            &s,
            "GET",
            &format!("/v1/timers/{bad}/k"),
            "",
            400,
            "invalid_tenant",
        );
        expect(
            &s,
            "DELETE",
            &format!("/v1/dead/t/{bad}"),
            "",
            400,
            "invalid_key",
        );
    }
    expect(&s, "GET", "/v1/dead/t?after=a%2Fb", "", 400, "invalid_key");
}

#[test]
fn oversized_bodies_and_payloads_are_413() {
    let s = Server::start(&["--max-body-bytes", "4096", "--max-batch-body-bytes", "8192"]);
    let big = format!(r#"{{"delay_ms":1,"payload":"{}"}}"#, "x".repeat(5000));
    expect(&s, "PUT", "/v1/timers/t/k", &big, 413, "body_too_large");
    let batch = format!(
        r#"{{"timers":[{{"key":"a","delay_ms":1,"payload":"{}"}}]}}"#,
        "x".repeat(9000)
    );
    expect(&s, "POST", "/v1/timers/t", &batch, 413, "body_too_large");
    // Declared larger than the limit: refused before the body is read.
    let r = raw_exchange(
        s.addr,
        b"PUT /v1/timers/t/k HTTP/1.1\r\nhost: x\r\ncontent-length: 999999999\r\n\r\n{",
    )
    .expect("answer");
    assert_eq!((r.status, r.code().as_str()), (413, "body_too_large"));
    // Chunked without a length: counted as it arrives.
    let mut chunked =
        b"PUT /v1/timers/t/k HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..5 {
        chunked.extend_from_slice(format!("3e8\r\n{}\r\n", " ".repeat(1000)).as_bytes());
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = raw_exchange(s.addr, &chunked).expect("answer");
    assert_eq!((r.status, r.code().as_str()), (413, "body_too_large"));
    // The payload limit is 65,536 bytes of JSON text (default body limits).
    let s = Server::start(&[]);
    let at = format!(
        r#"{{"delay_ms":600000,"payload":"{}"}}"#,
        "x".repeat(65_534)
    );
    assert_eq!(s.req("PUT", "/v1/timers/t/k", &at).status, 201);
    let over = format!(
        r#"{{"delay_ms":600000,"payload":"{}"}}"#,
        "x".repeat(65_535)
    );
    expect(&s, "PUT", "/v1/timers/t/k", &over, 413, "payload_too_large");
}

/// A batch item longer than any valid one (256 KiB, four times the payload limit) inside a
/// body the server accepts (16 MiB): the whole batch is 413 `payload_too_large`, naming the
/// item, without the item being parsed; an item at the payload limit in the same batch shape
/// is still taken, and one refused for an unknown field still names its key.
#[test]
fn a_batch_item_past_any_valid_size_is_413_for_the_batch() {
    let s = Server::start(&[]);
    let item = |key: &str, n: usize| {
        format!(
            r#"{{"key":"{key}","delay_ms":600000,"payload":"{}"}}"#,
            "x".repeat(n)
        )
    };
    let body = format!(
        r#"{{"timers":[{},{},{}]}}"#,
        item("a", 10),
        item("h", 8 << 20),
        item("b", 10)
    );
    let r = s.req("POST", "/v1/timers/t", &body);
    assert_eq!((r.status, r.code().as_str()), (413, "payload_too_large"));
    assert!(
        String::from_utf8_lossy(&r.body).contains("batch item 1"),
        "{r:?}"
    );
    assert_eq!(
        s.req("GET", "/v1/timers/t/a", "").status,
        404,
        "nothing of the batch applied"
    );
    let body = format!(
        r#"{{"timers":[{},{{"key":"z","zz":1,"payload":[1]}}]}}"#,
        item("a", 65_534)
    );
    let (st, r) = s.json("POST", "/v1/timers/t", &body);
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["results"][0]["status"], 201, "{r}");
    assert_eq!(r["results"][1]["key"], "z", "{r}");
    assert_eq!(r["results"][1]["error"]["code"], "invalid_field", "{r}");
}

/// Batch bodies the scan used to leave to a whole-body parse on the shard (an escaped key, a
/// field after the array, items that are not objects, millions of tiny values) get the
/// answers the API documents, and a refused body applies nothing.
#[test]
fn every_shape_of_batch_body_gets_its_documented_answer() {
    let s = Server::start(&[]);
    let (st, r) = s.json(
        "POST",
        "/v1/timers/t",
        r#"{"\u0074imers":[{"key":"e1","delay_ms":600000},{"key":"e2","delay_ms":600000}]}"#,
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["results"][1]["status"], 201, "{r}");
    let (st, r) = s.json(
        "POST",
        "/v1/timers/t",
        r#"{"timers":[1,{"key":"o1","delay_ms":600000},"x"]}"#,
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["results"][0]["error"]["code"], "invalid_field", "{r}");
    assert_eq!(r["results"][1]["status"], 201, "{r}");
    assert_eq!(r["results"][2]["error"]["code"], "invalid_field", "{r}");
    let r = s.req(
        "POST",
        "/v1/timers/t",
        "{\"timers\":[\n{\"key\":\"f1\",\"delay_ms\":600000}\n],\n \"x\":1}",
    );
    assert_eq!((r.status, r.code().as_str()), (400, "invalid_field"));
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        text.contains("unknown field `x`") && text.contains("at line 4 column 4"),
        "{text}"
    );
    assert_eq!(
        s.req("GET", "/v1/timers/t/f1", "").status,
        404,
        "nothing applied"
    );
    // Thirty times the item limit: counted to its end and named. (Three million took a debug
    // server ~16 s on a busy host, near the test client's 20 s read bound; the answer is the
    // same.)
    let numbers = format!(r#"{{"timers":[{}]}}"#, vec!["1"; 300_000].join(","));
    let r = s.req("POST", "/v1/timers/t", &numbers);
    assert_eq!((r.status, r.code().as_str()), (413, "too_many_items"));
    assert!(String::from_utf8_lossy(&r.body).contains("300000"), "{r:?}");
    assert_eq!(s.req("GET", "/v1/timers/t/e1", "").status, 200);
    // Chunked, without a length: the frames are joined whole and in order.
    let items: Vec<String> = (0..300)
        .map(|i| {
            format!(
                r#"{{"key":"c{i}","delay_ms":600000,"payload":"{}"}}"#,
                "p".repeat(i)
            )
        })
        .collect();
    let body = format!(r#"{{"timers":[{}]}}"#, items.join(","));
    let mut chunked =
        b"POST /v1/timers/t HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for piece in body.as_bytes().chunks(777) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = raw_exchange(s.addr, &chunked).expect("answer");
    assert_eq!(r.status, 200, "{r:?}");
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(text.matches(r#""status":201"#).count(), 300, "{text}");
    let (st, got) = s.json("GET", "/v1/timers/t/c299", "");
    assert_eq!(st, 200);
    assert_eq!(got["payload"], "p".repeat(299));
}

const TENANTS: &str = r#"
open_tenants = true
[tenants.locked]
token = "s3cret-0123456789abcdef0123456789"
[tenants.capped]
max_pending = 2
"#;

fn with_tenants() -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    std::io::Write::write_all(&mut f, TENANTS.as_bytes()).expect("write");
    let path = f.path().to_str().expect("utf-8 path").to_string();
    (Server::start(&["--config", &path]), f)
}

#[test]
fn token_is_checked_first_and_401_carries_www_authenticate() {
    let (s, _f) = with_tenants();
    let p = "/v1/timers/locked/k";
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Basic s3cret-0123456789abcdef0123456789"),
        Some("Bearer"),
    ] {
        let h: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let r = s.req_h("PUT", p, &h, "this body is not even JSON");
        assert_eq!(
            (r.status, r.code().as_str()),
            (401, "unauthorized"),
            "{auth:?}"
        );
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    }
    for verb in ["GET", "DELETE"] {
        assert_eq!(s.req(verb, p, "").status, 401);
    }
    assert_eq!(s.req("POST", "/v1/timers/locked", "{}").status, 401);
    let ok = s.req_h(
        "PUT",
        p,
        &[("authorization", "bearer s3cret-0123456789abcdef0123456789")],
        r#"{"delay_ms":600000}"#,
    );
    assert_eq!(ok.status, 201);
    let ok = s.req_h(
        "GET",
        p,
        &[("Authorization", "BEARER s3cret-0123456789abcdef0123456789")],
        "",
    );
    assert_eq!(ok.status, 200);
    // A header sent for a tenant without a token is ignored.
    let r = s.req_h(
        "PUT",
        "/v1/timers/open/k",
        &[("authorization", "Bearer whatever")],
        r#"{"delay_ms":600000}"#,
    );
    assert_eq!(r.status, 201);
}

#[test]
fn quota_of_pending_timers_is_429_and_replacements_do_not_count() {
    let (s, _f) = with_tenants();
    let body = r#"{"delay_ms":600000}"#;
    assert_eq!(s.req("PUT", "/v1/timers/capped/a", body).status, 201);
    assert_eq!(s.req("PUT", "/v1/timers/capped/b", body).status, 201);
    expect(
        &s,
        "PUT",
        "/v1/timers/capped/c",
        body,
        429,
        "quota_exceeded",
    );
    assert_eq!(
        s.req("PUT", "/v1/timers/capped/a", body).status,
        200,
        "a replacement at quota"
    );
    assert_eq!(s.req("DELETE", "/v1/timers/capped/b", "").status, 204);
    let (st, r) = s.json(
        "POST",
        "/v1/timers/capped",
        r#"{"timers":[{"key":"a","delay_ms":600000},{"key":"c","delay_ms":600000},{"key":"d","delay_ms":600000}]}"#,
    );
    assert_eq!(st, 200);
    let statuses: Vec<u64> = r["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|x| x["status"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(statuses, [200, 201, 429]);
    assert_eq!(r["results"][2]["error"]["code"], "quota_exceeded");
    // A fired timer frees its slot.
    assert_eq!(s.req("DELETE", "/v1/timers/capped/c", "").status, 204);
    assert_eq!(
        s.req("PUT", "/v1/timers/capped/now", r#"{"fire_at_ms":0}"#)
            .status,
        201
    );
    let mut status = 0;
    for _ in 0..500 {
        status = s.req("PUT", "/v1/timers/capped/later", body).status;
        if status == 201 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(status, 201);
}

#[test]
fn a_full_ring_is_503_overloaded_with_retry_after() {
    // One shard: the batch is pushed by the shard's own thread, which cannot drain its ring
    // until the handler yields, so pushes past the tenant's share of the ring (a quarter of
    // its 16) are refused. The handler first looks at its slice of time (and may yield, and
    // the ring drain) after 31 items; after that an item is taken or refused by how much the
    // shard drained meanwhile.
    let s = Server::start(&["--shards", "1", "--ring-capacity", "16"]);
    let items: Vec<_> = (0..100)
        .map(|i| serde_json::json!({"key": format!("k{i}"), "delay_ms": 600000}))
        .collect();
    let (st, r) = s.json(
        "POST",
        "/v1/timers/t",
        &serde_json::json!({"timers": items}).to_string(),
    );
    assert_eq!(st, 200);
    let res = r["results"].as_array().expect("results");
    let refused = |x: &serde_json::Value| x["status"] == 503 && x["error"]["code"] == "overloaded";
    assert!(res[..4].iter().all(|x| x["status"] == 201), "{res:?}");
    assert!(res[4..31].iter().all(refused), "{res:?}");
    assert!(
        res[31..].iter().all(|x| x["status"] == 201 || refused(x)),
        "{res:?}"
    );
    let n = res.iter().filter(|x| refused(x)).count();
    let m = String::from_utf8_lossy(&s.req("GET", "/metrics", "").body).to_string();
    assert!(
        m.contains(&format!("punctual_ring_rejected_total{{shard=\"0\"}} {n}")),
        "{n} refused: {m}"
    );
}

/// No two test servers are given the same port. The kernel hands a port that was let go to a
/// later bind of port 0 often enough (126 times in 2,000 here, about 9 in 500), and two servers
/// on one port both answer (the service binds with SO_REUSEPORT): a test's start-up check and
/// requests then reach another test's server, and its assertions fail for nothing they test.
#[test]
fn no_two_test_servers_are_given_the_same_port() {
    let mut given = std::collections::BTreeSet::new();
    for _ in 0..500 {
        let port = api_support::free_port();
        assert!(given.insert(port), "port {port} given twice");
    }
}
