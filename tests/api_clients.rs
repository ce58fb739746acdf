//! Ordinary HTTP clients, used as their users use them, against the real server: Python's
//! `requests` with a `Session` and the standard library's `http.client` on one connection
//! (`tests/clients/requests_session.py`), Node's own `fetch` (`tests/clients/node_fetch.mjs`),
//! and `curl --http1.1` reusing its connection across many transfers. Each drives PUT, GET,
//! DELETE and batches through a tenant's rate limit, its quota and a `413`, and must meet no
//! connection error: every early answer keeps the connection or says `Connection: close`.
//!
//! The Python packages come from `scripts/test` (`PUNCTUAL_TEST_PYTHON` names its
//! interpreter); node and curl from the system (`scripts/test` installs them where missing).

mod api_support;
use api_support::Server;
use std::io::Write;
use std::path::Path;
use std::process::Command;

const TENANTS: &str = "[tenants.calm]\n\
                       [tenants.limited]\nmax_requests_per_s = 5\nburst = 5\n\
                       [tenants.capped]\nmax_pending = 3\n";

/// A server with the three tenants the clients use, and a body limit of 4 KiB.
fn server() -> (Server, tempfile::NamedTempFile) {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(TENANTS.as_bytes()).expect("write");
    let path = f.path().to_str().expect("utf-8 path").to_string();
    let s = Server::start(&["--config", &path, "--max-body-bytes", "4096"]);
    (s, f)
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Runs `program` with `args`; its standard output when it succeeds, else a panic with
/// everything it said.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): scripts/test installs what these tests need")
        });
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// The statuses a client script counted (its last line: `{"201": 9, "429": 57, …}`).
fn counted(stdout: &str) -> serde_json::Value {
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not the counts ({e}): {stdout}"))
}

#[test]
fn python_requests_session_and_http_client_meet_no_connection_error() {
    let python = std::env::var("PUNCTUAL_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import requests"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "{python} cannot import requests: run the tests with scripts/test, which installs it"
    );
    let (s, _f) = server();
    let base = format!("http://{}", s.addr);
    let c = counted(&run(&python, &[&script("requests_session.py"), &base]));
    for status in ["200", "201", "204", "404", "405", "413", "429"] {
        assert!(
            c[status].as_u64().is_some_and(|n| n > 0),
            "no {status}: {c}"
        );
    }
}

#[test]
fn node_fetch_meets_no_connection_error() {
    let (s, _f) = server();
    let base = format!("http://{}", s.addr);
    let c = counted(&run("node", &[&script("node_fetch.mjs"), &base]));
    for status in ["200", "201", "204", "404", "405", "413", "429"] {
        assert!(
            c[status].as_u64().is_some_and(|n| n > 0),
            "no {status}: {c}"
        );
    }
}

/// One `curl --http1.1` command, its transfers chained with `--next` so that they share its
/// connection, one line per transfer: the status (`000` for a transfer that got no answer)
/// and how many connections it opened.
#[test]
fn curl_reusing_its_connection_meets_no_connection_error() {
    let (s, _f) = server();
    let base = format!("http://{}", s.addr);
    let far = r#"{"delay_ms":600000,"payload":{"order":8812}}"#;
    let big = format!(r#"{{"delay_ms":1,"payload":"{}"}}"#, "x".repeat(10_000));
    let batch = r#"{"timers":[{"key":"b0","delay_ms":600000},{"key":"b1","delay_ms":600000}]}"#;
    let mut transfers: Vec<(&str, String, Option<&str>)> = vec![
        ("PUT", "/v1/timers/calm/k0".into(), Some(far)),
        ("GET", "/v1/timers/calm/k0".into(), None),
        ("POST", "/v1/timers/calm".into(), Some(batch)),
        ("PUT", "/v1/timers/calm/big".into(), Some(&big)),
        ("GET", "/v1/timers/calm/k0".into(), None),
        ("PUT", "/v1/nothing".into(), Some(far)),
        ("PATCH", "/v1/timers/calm/k0".into(), Some(far)),
    ];
    for i in 0..20 {
        transfers.push(("PUT", format!("/v1/timers/limited/k{i}"), Some(far)));
        transfers.push(("GET", "/v1/timers/calm/k0".into(), None));
    }
    for i in 0..5 {
        transfers.push(("PUT", format!("/v1/timers/capped/k{i}"), Some(far)));
    }
    transfers.push(("DELETE", "/v1/timers/calm/k0".into(), None));
    let mut args: Vec<String> = Vec::new();
    for (i, (method, path, body)) in transfers.iter().enumerate() {
        if i > 0 {
            args.push("--next".into());
        }
        args.extend(
            [
                "--http1.1",
                "--silent",
                "--show-error",
                "--max-time",
                "30",
                "--output",
                "/dev/null",
                "--write-out",
                "%{http_code} %{num_connects}\\n",
                "--request",
                method,
                "--header",
                "content-type: application/json",
            ]
            .map(String::from),
        );
        if let Some(b) = body {
            args.extend(["--data-binary".into(), b.to_string()]);
        }
        args.push(format!("{base}{path}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run("curl", &args);
    let lines: Vec<(u16, u32)> = out
        .lines()
        .map(|l| {
            let (code, connects) = l.split_once(' ').unwrap_or((l, ""));
            (code.parse().unwrap_or(0), connects.parse().unwrap_or(0))
        })
        .collect();
    assert_eq!(lines.len(), transfers.len(), "{out}");
    let statuses: Vec<u16> = lines.iter().map(|l| l.0).collect();
    assert!(!statuses.contains(&0), "a transfer got no answer: {out}");
    assert_eq!(statuses[..7], [201, 200, 200, 413, 200, 404, 405], "{out}");
    assert!(statuses.contains(&429), "never rate limited: {out}");
    let capped = &statuses[statuses.len() - 6..statuses.len() - 1];
    assert_eq!(capped, [201, 201, 201, 429, 429], "{out}");
    // The connection is reused: a new one only after the 413, which says it closes.
    let opened: u32 = lines.iter().map(|l| l.1).sum();
    assert_eq!(opened, 2, "connections opened: {out}");
}
