//! `docs/openapi.yaml` against the real server: every answer the tests provoke — each
//! documented status of each route, and every error code that a request can provoke cheaply —
//! has a status the document lists for its route and method, the headers it requires, and a
//! body valid against the schema it gives for that status. The document itself is checked
//! too: every `$ref` resolves, every schema compiles, and its paths are exactly the router's.

#[path = "../api_support/mod.rs"]
mod api_support;
#[path = "../openapi_support/mod.rs"]
mod openapi_support;
#[path = "../support/receiver.rs"]
mod receiver;

use api_support::{raw_exchange, read_response, request, Resp, Server};
use openapi_support::{refs, router_routes, shape, Covered, Spec};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::Write;

const TENANTS: &str = r#"
open_tenants = true
[tenants.locked]
token = "s3cret-0123456789abcdef0123456789"
[tenants.capped]
max_pending = 2
"#;

/// Error codes that no cheap request provokes: a shard full at `shard_capacity`, a forward to
/// another node that gave no answer (only nodes on a Redis Cluster forward:
/// `tests/cluster_nodes.rs` provokes it), a request still waiting when the shards stop, and a
/// server bug.
const NOT_PROVOKED: [&str; 4] = [
    "capacity_exceeded",
    "internal",
    "peer_unavailable",
    "shutting_down",
];

/// The token of the dead-letter server's `/metrics`.
const METRICS_TOKEN: &str = "metrics-0123456789abcdef0123456789";

/// An answer, already checked against the document.
struct Answer {
    status: u16,
    code: String,
    body: Value,
}

impl Answer {
    fn of(spec: &Spec, method: &str, path: &str, r: &Resp) -> Answer {
        let body = spec.check(method, path, r);
        let code = body["error"]["code"].as_str().unwrap_or("").to_string();
        Answer {
            status: r.status,
            code,
            body,
        }
    }

    /// (status, error code): what most assertions compare.
    fn sc(&self) -> (u16, &str) {
        (self.status, &self.code)
    }

    /// (status, error code) of each batch item.
    fn items(&self) -> Vec<(u64, &str)> {
        let results = self.body["results"].as_array().into_iter().flatten();
        results
            .map(|x| {
                let code = x["error"]["code"].as_str().unwrap_or("");
                (x["status"].as_u64().unwrap_or(0), code)
            })
            .collect()
    }
}

/// Requests to one server, each answer checked against the document.
struct Api<'a> {
    spec: &'a Spec,
    s: &'a Server,
}

impl Api<'_> {
    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        let r = request(self.s.addr, method, path, headers, body.as_bytes());
        Answer::of(self.spec, method, path, &r)
    }

    fn ask(&self, method: &str, path: &str, body: &str) -> Answer {
        self.send(method, path, &[], body)
    }

    /// A PUT whose body is also checked against the request schema: a body the server
    /// accepts must be valid, and one it refuses as `invalid_field` or `invalid_deadline`
    /// must not be (when it is JSON at all).
    fn put(&self, path: &str, body: &str) -> Answer {
        let a = self.ask("PUT", path, body);
        if let Ok(sent) = serde_json::from_str::<Value>(body) {
            let errors = self.spec.errors_for("PutTimerRequest", &sent);
            match a.sc() {
                (200 | 201, _) => assert!(errors.is_empty(), "{body} accepted: {errors:?}"),
                (400, "invalid_field" | "invalid_deadline") => {
                    assert!(
                        !errors.is_empty(),
                        "{body}: {}, the schema takes it",
                        a.code
                    )
                }
                _ => {}
            }
        }
        a
    }

    /// A batch whose body is also checked against the request schema: a body answered 200
    /// (its items each with their own result) must be valid, and one refused as
    /// `invalid_field` must not be.
    fn batch(&self, path: &str, body: &str) -> Answer {
        let a = self.ask("POST", path, body);
        if let Ok(sent) = serde_json::from_str::<Value>(body) {
            let errors = self.spec.errors_for("BatchRequest", &sent);
            match a.sc() {
                (200, _) => assert!(errors.is_empty(), "{body} answered 200: {errors:?}"),
                (400, "invalid_field") => {
                    assert!(
                        !errors.is_empty(),
                        "{body}: invalid_field, the schema takes it"
                    )
                }
                _ => {}
            }
        }
        a
    }

    /// Raw bytes, for what the tiny client cannot send.
    fn raw(&self, method: &str, path: &str, bytes: &[u8]) -> Answer {
        let r = raw_exchange(self.s.addr, bytes).expect("an answer");
        Answer::of(self.spec, method, path, &r)
    }

    /// A body that never completes: 408 after `body_timeout_ms`.
    fn slow_body(&self, method: &str, path: &str) -> Answer {
        let mut c = self.s.connect();
        let head = format!("{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{{");
        c.write_all(head.as_bytes()).expect("write");
        let r = read_response(&mut c).expect("an answer");
        Answer::of(self.spec, method, path, &r)
    }

    /// A request head over `max_header_bytes`: 431 with an empty body.
    fn oversized_head(&self, method: &str, path: &str) -> Answer {
        let big = "a".repeat(20_000);
        let req = format!("{method} {path} HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n");
        self.raw(method, path, req.as_bytes())
    }
}

#[test]
fn real_answers_match_the_openapi_document() {
    let spec = Spec::load();
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(TENANTS.as_bytes()).expect("write");
    let conf = f.path().to_str().expect("utf-8 path").to_string();
    std::thread::scope(|scope| {
        scope.spawn(|| store_down(&spec));
        scope.spawn(|| small_server(&spec));
        scope.spawn(|| journal_store(&spec));
        scope.spawn(|| dead_letters(&spec));
        scope.spawn(|| queues::queues(&spec));
        scope.spawn(|| history::history(&spec));
        let args = [
            "--config",
            &conf,
            "--body-timeout-ms",
            "1000",
            "--max-header-bytes",
            "8192",
        ];
        let s = Server::start(&args);
        let api = Api { spec: &spec, s: &s };
        timer_route(&api);
        schedules(&api);
        batch_and_operations(&api);
        unlisted_methods(&api);
    });
    // Every documented status was produced, but 500 (a server bug, never provoked) and the
    // answers only a node on a Redis Cluster gives (`/cluster` 200 and its 503 from Redis:
    // `tests/cluster_status.rs` checks them against this document).
    let missing: Vec<Covered> = spec
        .documented()
        .difference(&spec.covered())
        .filter(|c| c.status != 500 && !(c.path == "/cluster" && c.status == 200))
        // A bulk cancel on a node among others, and with a tenant's 64 actions running.
        .filter(|c| !(c.path == "/v1/timers/{tenant}" && c.method == "DELETE" && c.status > 500))
        // A pull queue's store refusing its write: a full or failed journal.
        .filter(|c| !(c.path.starts_with("/v1/queues/") && c.status == 503))
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "documented, never produced: {missing:#?}"
    );
    // Every error code the document lists was produced, but those no cheap request provokes.
    let listed: BTreeSet<String> = spec.doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect();
    let unseen: Vec<_> = listed.difference(&spec.codes_seen()).cloned().collect();
    assert_eq!(unseen, NOT_PROVOKED, "error codes never produced");
}

#[test]
fn the_document_is_complete_and_its_references_resolve() {
    let spec = Spec::load();
    let version = spec.doc["openapi"].as_str().unwrap_or("");
    assert!(version.starts_with("3.1."), "OpenAPI 3.1, not {version:?}");
    let mut all = Vec::new();
    refs(&spec.doc, "", &mut all);
    assert!(all.len() > 50, "only {} $refs found", all.len());
    for (at, r) in &all {
        let target = r.strip_prefix('#').and_then(|p| spec.doc.pointer(p));
        assert!(target.is_some(), "{at}: $ref {r:?} does not resolve");
    }
    let schemas = spec.doc["components"]["schemas"].as_object();
    for (name, schema) in schemas.into_iter().flatten() {
        let valid = jsonschema::meta::is_valid(schema);
        assert!(
            valid,
            "components/schemas/{name} is not a valid JSON Schema"
        );
        spec.validator(schema);
    }
    // Every response of every operation: a description, and schemas that compile.
    for c in spec.documented() {
        let item = &spec.doc["paths"][&c.path];
        let op = match c.method.as_str() {
            "*" => &item["x-unlisted-methods"],
            m => &item[m.to_lowercase()],
        };
        let resp = spec.resolve(&op["responses"][c.status.to_string()]);
        assert!(resp["description"].is_string(), "{c:?} has no description");
        for (_, media) in resp["content"].as_object().into_iter().flatten() {
            spec.validator(&media["schema"]);
        }
    }
    // The document's paths are exactly the router's routes.
    let routes_rs = concat!(env!("CARGO_MANIFEST_DIR"), "/src/api/routes.rs");
    let source = std::fs::read_to_string(routes_rs).expect("read src/api/routes.rs");
    let routes = router_routes(&source);
    assert!(routes.len() >= 4, "read only {routes:?} from route()");
    let paths = spec.doc["paths"].as_object().into_iter().flatten();
    let documented: BTreeSet<String> = paths.map(|(p, _)| shape(p)).collect();
    assert_eq!(
        routes,
        documented,
        "router routes vs {}",
        openapi_support::DOC
    );
    // Each `{name}` of a path is declared as a parameter, and nothing else is.
    for (path, item) in spec.doc["paths"].as_object().into_iter().flatten() {
        let params = item["parameters"].as_array().into_iter().flatten();
        let declared: BTreeSet<&str> = params
            .map(|p| spec.resolve(p)["name"].as_str().unwrap_or(""))
            .collect();
        let used: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .collect();
        assert_eq!(declared, used, "{path}: path parameters");
    }
}

#[test]
fn a_body_off_the_schema_fails_the_check() {
    // The checker must be able to fail: an undocumented or missing field, a code the status
    // does not allow, an undocumented status and a missing header are all refused.
    let spec = Spec::load();
    let resp = |status: u16, body: &str| Resp {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.as_bytes().to_vec(),
    };
    let ok = r#"{"tenant":"t","key":"k","fire_at_us":1,"version":2}"#;
    spec.check("PUT", "/v1/timers/t/k", &resp(201, ok));
    for (status, body) in [
        (
            201,
            r#"{"tenant":"t","key":"k","fire_at_us":1,"version":2,"extra":1}"#,
        ),
        (201, r#"{"tenant":"t","key":"k","fire_at_us":1}"#),
        (
            201,
            r#"{"tenant":"t","key":"k","fire_at_us":1,"version":0}"#,
        ),
        (400, r#"{"error":{"code":"quota_exceeded","message":"m"}}"#),
        (400, r#"{"error":{"code":"invalid_key"}}"#),
        (402, r#"{"error":{"code":"not_found","message":"m"}}"#),
        (401, r#"{"error":{"code":"unauthorized","message":"m"}}"#),
    ] {
        let checked =
            std::panic::catch_unwind(|| spec.check("PUT", "/v1/timers/t/k", &resp(status, body)));
        assert!(checked.is_err(), "{status} {body} passed the check");
    }
}

#[test]
fn the_route_reader_sees_every_match_arm() {
    // A route added to the router shows up here, and so fails the comparison above until
    // the document describes it.
    let source = r#"
fn route(path: &str) -> Route<'_> {
    match (it.next(), it.next(), it.next(), it.next(), it.next()) {
        (Some("metrics"), None, ..) => Route::Metrics,
        (Some("v1"), Some("dead"), Some(t), None, _) if !t.is_empty() => Route::Dead(t),
        _ => Route::NotFound,
    }
}
"#;
    let want: BTreeSet<String> = ["/metrics", "/v1/dead/{}"].map(String::from).into();
    assert_eq!(router_routes(source), want);
}

mod history;
mod queues;
mod scenarios;
mod schedules;
use scenarios::*;
use schedules::*;
