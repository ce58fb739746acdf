//! Sending a plan: registrations then churn, round after round, each connection on its own
//! thread; and the [`Client`] for punctual's HTTP API over one keep-alive connection.

use super::model::{Answer, Client, Model};
use super::plan::{ChurnOp, Item, Plan, Round, Spec};
use crate::keepalive::KeepAlive;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a run did and how long its phases took (summed over the rounds).
pub struct Outcome {
    pub model: Model,
    pub register_secs: f64,
    pub churn_secs: f64,
}

/// Sends the plan, round after round: the registrations from `spec.register_conns`
/// connections, then the churn from `spec.churn_conns`; `connect` opens one connection.
pub fn run<C: Client>(spec: &Spec, plan: &Plan, connect: impl Fn() -> C + Sync) -> Outcome {
    let model = Mutex::new(Model::default());
    let tenants = spec.tenants();
    let (mut register_secs, mut churn_secs) = (0.0, 0.0);
    for round in &plan.rounds {
        let started = Instant::now();
        register(spec.register_conns, round, &tenants, &model, &connect);
        register_secs += started.elapsed().as_secs_f64();
        let started = Instant::now();
        churn(round, &tenants, &model, &connect);
        churn_secs += started.elapsed().as_secs_f64();
        if let Some(settle) = spec.settle_ms {
            let last = model.lock().expect("model lock").last_deadline_us();
            let until = last + settle * 1000;
            std::thread::sleep(Duration::from_micros(until.saturating_sub(super::now_us())));
        }
    }
    Outcome {
        model: model.into_inner().expect("model lock"),
        register_secs,
        churn_secs,
    }
}

/// The round's batches, spread over `conns` connections.
fn register<C: Client>(
    conns: usize,
    round: &Round,
    tenants: &[String],
    model: &Mutex<Model>,
    connect: &(impl Fn() -> C + Sync),
) {
    let conns = conns.max(1);
    std::thread::scope(|s| {
        for c in 0..conns {
            s.spawn(move || {
                let mut client = connect();
                for (t, items) in round.batches.iter().skip(c).step_by(conns) {
                    let answers = client.register(&tenants[*t], items);
                    let mut m = model.lock().expect("model lock");
                    for (item, answer) in items.iter().zip(&answers) {
                        m.schedule(&tenants[*t], item, answer);
                    }
                }
            });
        }
    });
}

/// The round's cancels and reschedules, one connection per list.
fn churn<C: Client>(
    round: &Round,
    tenants: &[String],
    model: &Mutex<Model>,
    connect: &(impl Fn() -> C + Sync),
) {
    std::thread::scope(|s| {
        for ops in &round.churn {
            s.spawn(move || {
                let mut client = connect();
                for op in ops {
                    match op {
                        ChurnOp::Delete { tenant, key } => {
                            let answer = client.cancel(&tenants[*tenant], key);
                            let mut m = model.lock().expect("model lock");
                            m.cancel(&tenants[*tenant], key, &answer);
                        }
                        ChurnOp::Put { tenant, item } => {
                            let answer = client.put(&tenants[*tenant], item);
                            let mut m = model.lock().expect("model lock");
                            m.schedule(&tenants[*tenant], item, &answer);
                        }
                    }
                }
            });
        }
    });
}

/// The punctual HTTP API over one keep-alive connection.
pub struct Http {
    conn: KeepAlive,
}

impl Http {
    pub fn new(addr: SocketAddr) -> Http {
        Http {
            conn: KeepAlive::new(addr, Duration::from_secs(30)),
        }
    }
}

/// A 200/201 body `{"fire_at_us","version"}` (also a batch item's), else why not.
fn scheduled(status: u64, v: &serde_json::Value) -> Answer {
    match (status, v["version"].as_u64(), v["fire_at_us"].as_u64()) {
        (200 | 201, Some(version), Some(fire_at_us)) => Answer::Scheduled {
            version,
            fire_at_us,
            replaced: status == 200,
        },
        (503, _, _) => Answer::Unavailable,
        _ => Answer::Unexpected(format!("{status} {v}")),
    }
}

impl Client for Http {
    fn register(&mut self, tenant: &str, items: &[Item]) -> Vec<Answer> {
        let mut body = String::from(r#"{"timers":["#);
        for (i, it) in items.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(
                body,
                r#"{sep}{{"key":"{}","delay_ms":{},"payload":{}}}"#,
                it.key, it.delay_ms, it.payload
            );
        }
        body.push_str("]}");
        let all = |a: Answer| vec![a; items.len()];
        let reply = match self
            .conn
            .send("POST", &format!("/v1/timers/{tenant}"), body.as_bytes())
        {
            Ok(r) => r,
            Err(e) => return all(Answer::Lost(e.to_string())),
        };
        let text = String::from_utf8_lossy(&reply.body);
        match reply.status {
            200 => {}
            503 => return all(Answer::Unavailable),
            s => return all(Answer::Unexpected(format!("batch answered {s}: {text}"))),
        }
        let v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        match v["results"].as_array() {
            Some(results) if results.len() == items.len() => results
                .iter()
                .zip(items)
                .map(|(r, it)| match r["key"].as_str() {
                    Some(k) if k == it.key => scheduled(r["status"].as_u64().unwrap_or(0), r),
                    _ => Answer::Unexpected(format!("result for another key: {r}")),
                })
                .collect(),
            _ => all(Answer::Unexpected(format!(
                "batch results do not match: {text}"
            ))),
        }
    }

    fn cancel(&mut self, tenant: &str, key: &str) -> Answer {
        match self
            .conn
            .send("DELETE", &format!("/v1/timers/{tenant}/{key}"), b"")
        {
            Ok(r) => match r.status {
                204 => Answer::Cancelled,
                404 => Answer::NotFound,
                503 => Answer::Unavailable,
                s => Answer::Unexpected(format!("{s} {}", String::from_utf8_lossy(&r.body))),
            },
            Err(e) => Answer::Lost(e.to_string()),
        }
    }

    fn put(&mut self, tenant: &str, item: &Item) -> Answer {
        let body = format!(
            r#"{{"delay_ms":{},"payload":{}}}"#,
            item.delay_ms, item.payload
        );
        let path = format!("/v1/timers/{tenant}/{}", item.key);
        match self.conn.send("PUT", &path, body.as_bytes()) {
            Ok(r) => {
                let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
                scheduled(u64::from(r.status), &v)
            }
            Err(e) => Answer::Lost(e.to_string()),
        }
    }
}
