//! `punctual cluster status`: asks one node for `GET /cluster` and prints it as a table (or,
//! with `--json`, the answer as it came).
//!
//! The request is one HTTP/1.1 exchange with hyper's client over a glommio socket
//! (`crate::runtime::hyperio`), on an executor of its own on the calling thread, as the webhook client
//! sends; connect and answer together are bounded by [`TIMEOUT`]. Exit 0 when the node
//! answered 200; 1 when it could not be reached, answered an error (not in cluster mode:
//! 404; Redis did not answer it: 503), or answered something that is not the report; 2 for
//! a URL it cannot use.

use crate::config::{ClusterArgs, ClusterCommand};
use crate::nodes::report::{Epochs, Holder, Report};
use crate::runtime::hyperio::Io;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header::{AUTHORIZATION, HOST};
use hyper::{Request, StatusCode};
use std::fmt::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

/// The longest the command waits: connect, then the answer (the node waits at most 2 s for
/// Redis).
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `punctual cluster …`; errors go to stderr.
pub fn run(args: &ClusterArgs) -> ExitCode {
    let ClusterCommand::Status { url, json, token } = &args.command;
    let target = match Target::parse(url) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("punctual cluster status: {e}");
            return ExitCode::from(2);
        }
    };
    let answer = match fetch(&target, token.as_deref()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("punctual cluster status: cannot reach {url}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match answer {
        (StatusCode::OK, body) => match serde_json::from_slice::<Report>(&body) {
            Ok(_) if *json => {
                println!("{}", String::from_utf8_lossy(&body));
                ExitCode::SUCCESS
            }
            Ok(report) => {
                print!("{}", table(&report));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("punctual cluster status: {url} answered 200 but not a cluster status ({e}); is it a punctual node?");
                ExitCode::FAILURE
            }
        },
        (status, body) => {
            eprintln!("punctual cluster status: {}", refusal(url, status, &body));
            ExitCode::FAILURE
        }
    }
}

/// Where to send the request: the resolved address, the `Host` header, the path.
struct Target {
    addrs: Vec<SocketAddr>,
    host: String,
    path: String,
}

impl Target {
    fn parse(text: &str) -> Result<Target, String> {
        let url = url::Url::parse(text).map_err(|e| format!("--url {text:?}: {e}"))?;
        if url.scheme() != "http" {
            return Err(format!(
                "--url {text:?}: only http:// is served by a node (no TLS on the API)"
            ));
        }
        let host = url
            .host_str()
            .ok_or_else(|| format!("--url {text:?} names no host"))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let addrs: Vec<SocketAddr> = (host.trim_start_matches('[').trim_end_matches(']'), port)
            .to_socket_addrs()
            .map_err(|e| format!("--url {text:?}: cannot resolve {host}: {e}"))?
            .collect();
        let path = format!("{}/cluster", url.path().trim_end_matches('/'));
        Ok(Target {
            addrs,
            host: format!("{host}:{port}"),
            path,
        })
    }
}

/// GET the target, at most [`TIMEOUT`] in all: its status and body.
fn fetch(target: &Target, token: Option<&str>) -> Result<(StatusCode, Bytes), String> {
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .map_err(|e| format!("cannot start an executor: {e}"))?;
    ex.run(async {
        let exchange = exchange(target, token);
        let expire = async {
            glommio::timer::sleep(TIMEOUT).await;
            Err(format!("no answer within {} s", TIMEOUT.as_secs()))
        };
        futures_lite::future::or(exchange, expire).await
    })
}

async fn exchange(target: &Target, token: Option<&str>) -> Result<(StatusCode, Bytes), String> {
    let mut last = String::from("the host resolves to no address");
    let mut stream = None;
    for addr in &target.addrs {
        match glommio::net::TcpStream::connect(*addr).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("connect {addr}: {e}"),
        }
    }
    let stream = stream.ok_or(last)?;
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake(Io::new(stream, TIMEOUT))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    glommio::spawn_local(async move {
        let _ = conn.await;
    })
    .detach();
    let mut req = Request::get(target.path.as_str()).header(HOST, target.host.as_str());
    if let Some(token) = token {
        req = req.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("the request: {e}"))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("the request: {e}"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("the answer's body: {e}"))?
        .to_bytes();
    Ok((status, body))
}

/// What to tell the operator of an answer other than 200.
fn refusal(url: &str, status: StatusCode, body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Inner,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        code: String,
        message: String,
    }
    let said = serde_json::from_slice::<Body>(body).ok();
    let detail = said.as_ref().map_or_else(
        || String::from_utf8_lossy(body).chars().take(200).collect(),
        |b| format!("{}: {}", b.error.code, b.error.message),
    );
    let what = match status {
        StatusCode::NOT_FOUND => "is not a node in cluster mode",
        StatusCode::SERVICE_UNAVAILABLE => "could not read the cluster's state from Redis",
        StatusCode::UNAUTHORIZED => "needs its metrics_token (--token)",
        _ => "refused",
    };
    format!("{url} {what} ({status}; {detail})")
}

/// The report as text: the live nodes, then what no live node holds, then this node's view.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:<24} {:<21} {:>10} {:>9}",
        "NODE", "ADVERTISE", "STARTED (UTC)", "PARTITIONS", "EPOCHS"
    );
    for h in &r.live {
        let me = if h.id == r.this_node.id { " *" } else { "" };
        let _ = writeln!(
            out,
            "{:<24} {:<24} {:<21} {:>10} {:>9}",
            format!("{}{me}", h.id),
            h.advertise.as_deref().unwrap_or("-"),
            h.started_at_us.map_or_else(|| "-".into(), utc),
            h.partitions.count,
            epochs(h.epochs.as_ref()),
        );
    }
    for h in &r.live {
        ranges_of(&mut out, h);
    }
    let _ = writeln!(
        out,
        "\nunowned partitions: {}{}",
        r.unowned.count,
        list(&r.unowned.ranges)
    );
    if r.not_live.is_empty() {
        let _ = writeln!(out, "leases held by nodes not live: none");
    } else {
        let _ = writeln!(out, "leases held by nodes not live:");
        for h in &r.not_live {
            let _ = writeln!(
                out,
                "  {}: {} partitions, epochs {}",
                h.id,
                h.partitions.count,
                epochs(h.epochs.as_ref())
            );
            ranges_of(&mut out, h);
        }
    }
    if r.unreadable.count > 0 {
        let _ = writeln!(
            out,
            "unreadable lease values: {} ({})",
            r.unreadable.count, r.unreadable.ranges
        );
    }
    let t = &r.this_node;
    let agree = if t.holds == t.should_own {
        "agree"
    } else {
        "differ (settling, or this node's view lags)"
    };
    let _ = writeln!(
        out,
        "\nthis node ({}): holds {}, its routing view says it should own {}: {agree}",
        t.id, t.holds.count, t.should_own.count
    );
    if t.load_overdue.count > 0 {
        let _ = writeln!(
            out,
            "ALERT: {} partitions held but not loaded for over 5 s (their timers do not fire): {}",
            t.load_overdue.count, t.load_overdue.ranges
        );
    }
    let _ = writeln!(out, "read from Redis at {}", utc(r.read_at_us));
    out
}

fn ranges_of(out: &mut String, h: &Holder) {
    let _ = writeln!(out, "\n{} partitions:", h.id);
    wrapped(out, "    ", or_none(&h.partitions.ranges));
    if let Some(e) = h.epochs.as_ref().filter(|e| e.partitions.len() > 1) {
        for (epoch, ranges) in &e.partitions {
            let _ = writeln!(out, "  under epoch {epoch}:");
            wrapped(out, "    ", ranges);
        }
    }
}

/// Writes `ranges` in lines of at most [`WIDTH`] characters, each after `indent`, broken after
/// a comma.
fn wrapped(out: &mut String, indent: &str, ranges: &str) {
    let mut line = String::new();
    for part in ranges.split_inclusive(',') {
        if !line.is_empty() && indent.len() + line.len() + part.len() > WIDTH {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        line.push_str(part);
    }
    let _ = writeln!(out, "{indent}{line}");
}

/// The widest line of partition ranges.
const WIDTH: usize = 96;

fn epochs(e: Option<&Epochs>) -> String {
    match e {
        None => "-".into(),
        Some(e) if e.min == e.max => e.min.to_string(),
        Some(e) => format!("{}-{}", e.min, e.max),
    }
}

fn list(ranges: &str) -> String {
    if ranges.is_empty() {
        String::new()
    } else {
        format!(" ({ranges})")
    }
}

fn or_none(ranges: &str) -> &str {
    if ranges.is_empty() {
        "none"
    } else {
        ranges
    }
}

/// UTC microseconds as `2026-12-04T02:20:36Z` (RFC 3339, whole seconds).
fn utc(us: u64) -> String {
    let rfc3339 = time::format_description::well_known::Rfc3339;
    i64::try_from(us / 1_000_000)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(&rfc3339).ok())
        .unwrap_or_else(|| us.to_string())
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
