//! The webhook side of the API: turning a registration's `callback` and `retry` into the
//! timer's delivery metadata (checked against the tenant's allow-list: no open relay), showing
//! a pending timer's delivery, and the dead-letter routes:
//!
//! | route | answer |
//! |---|---|
//! | `GET /v1/dead/{tenant}?limit=N&after=KEY` | 200 `{"dead": [...]}`, by key, at most N (default 100, at most 1,000) |
//! | `POST /v1/dead/{tenant}/{key}/retry` | 202 `{"tenant","key","version","fire_at_us"}`: delivered again now, a fresh attempt budget; 404 without a dead letter; 409 `timer_pending` while a timer is pending under the key |
//! | `DELETE /v1/dead/{tenant}/{key}` | 204, or 404 |

use super::array::read_array;
use super::body::Registration;
use super::error::ApiError;
use super::forward::Here;
use super::respond::{self, CallbackView, DeliveryView, Resp, RetryView, TimerBody};
use super::state::App;
use super::unread::RequestBody;
use crate::engine::{Cancelled, DeadInfo, TimerInfo};
use crate::error::{validate_name, NameKind};
use crate::runtime::cooperate::Slice;
use crate::sink::webhook::settings::CallbackError;
use crate::sink::webhook::{describe, new_meta};
use hyper::{Method, Request, StatusCode};
use serde::Serialize;
use serde_json::value::RawValue;

/// Dead letters listed when the request names no limit, and the most it may name.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

impl From<CallbackError> for ApiError {
    fn from(e: CallbackError) -> Self {
        match e {
            CallbackError::NotAllowed(_) | CallbackError::Off => {
                ApiError::CallbackNotAllowed(e.to_string())
            }
            CallbackError::Invalid { .. } | CallbackError::Retry(_) => {
                ApiError::InvalidField(e.to_string())
            }
        }
    }
}

impl App {
    /// The delivery metadata of a registration: empty without a callback (given or the
    /// tenant's default).
    pub fn meta_for(&self, tenant: &str, reg: &Registration<'_>) -> Result<Vec<u8>, ApiError> {
        let w = &self.shared.webhooks;
        let Some(url) = w.callback_for(tenant, reg.callback.as_deref())? else {
            if reg.retry.is_some() {
                return Err(ApiError::InvalidField(
                    "\"retry\" needs a \"callback\" (or a callback_url for the tenant)".into(),
                ));
            }
            return Ok(Vec::new());
        };
        let r = reg.retry;
        let policy = w.retry_for(
            tenant,
            r.and_then(|r| r.max_attempts),
            r.and_then(|r| r.base_delay_ms),
            r.and_then(|r| r.max_delay_ms),
        )?;
        Ok(new_meta(url, policy, reg.deadline.0))
    }

    /// `/v1/dead/{tenant}[/{key}[/retry]]`.
    pub(super) async fn dead(
        &self,
        tenant: &str,
        key: Option<&str>,
        retry: bool,
        req: Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        let allow = match (key, retry) {
            (None, _) => "GET",
            (Some(_), false) => "DELETE",
            (Some(_), true) => "POST",
        };
        if req.method().as_str() != allow {
            return Err(ApiError::MethodNotAllowed {
                method: req.method().to_string(),
                allow,
            });
        }
        self.check(tenant, &req)?;
        let Some(key) = key else {
            return self.list_dead(tenant, req).await;
        };
        validate_name(NameKind::Key, key)?;
        let req = match self.route_keyed(tenant, key, req).await? {
            Here::Local(req) => req,
            Here::Forwarded(resp) => return Ok(resp),
        };
        if *req.method() == Method::POST {
            let s = self.handle.redrive_async(tenant, key).await?;
            return Ok(respond::json_of(
                StatusCode::ACCEPTED,
                &respond::ScheduledBody::new(tenant, key, &s),
            ));
        }
        match self.handle.discard_dead_async(tenant, key).await? {
            Cancelled::Cancelled { .. } => Ok(respond::empty(StatusCode::NO_CONTENT)),
            Cancelled::NotFound => Err(ApiError::NotFound(format!(
                "no dead letter for tenant {tenant:?} and key {key:?}"
            ))),
        }
    }
}

impl App {
    /// `GET /v1/dead/{tenant}`: this node's first `limit` letters after `after`, merged by key
    /// with every other live node's, asked for the same page at once (on a node among others;
    /// a request that came forwarded is answered from this node's partitions alone). A page
    /// of the merged lists is the page of the whole cluster's list: each node's letters come
    /// sorted by key, and a node's first `limit` are all it can give to the first `limit` of
    /// the whole. A node that does not answer fails the list (`503 peer_unavailable`) rather
    /// than leave its letters out; a key listed by two nodes (one loading a partition the
    /// other has not dropped yet) is listed once.
    async fn list_dead(&self, tenant: &str, req: Request<RequestBody>) -> Result<Resp, ApiError> {
        let (limit, after) = list_query(req.uri().query())?;
        let (others, asks) = self.ask_others(&req);
        let mine = self
            .handle
            .dead_letters_async(tenant, after.as_deref(), limit)
            .await?;
        let mut theirs = Vec::with_capacity(asks.len());
        for ask in asks {
            theirs.push(ask.await);
        }
        if others.is_empty() {
            let bytes = mine.iter().map(DeadBody::bytes).sum();
            let dead = mine.iter().map(DeadBody::new);
            return Ok(respond::json_array_of(StatusCode::OK, "dead", dead, bytes).await);
        }
        let mut all: Vec<(String, Box<RawValue>)> = Vec::with_capacity(limit * (1 + others.len()));
        let mut slice = Slice::begin();
        for d in &mine {
            let raw = serde_json::value::to_raw_value(&DeadBody::new(d))
                .map_err(|e| ApiError::Internal(format!("a dead letter: {e}")))?;
            all.push((d.key.clone(), raw));
            if slice.is_over() {
                slice.next().await;
            }
        }
        for (peer, answer) in others.iter().zip(theirs) {
            let answer = answer?;
            all.extend(peer_page(peer, answer.status, &answer.body).await?);
        }
        let merged = merge_pages(all, limit);
        let bytes = respond::raw_bytes(merged.iter().map(AsRef::as_ref));
        Ok(respond::json_array_of(StatusCode::OK, "dead", merged, bytes).await)
    }
}

/// One peer's page of dead letters, each with its key, read a letter at a time (`array.rs`):
/// with their bodies, a page of 1,000 letters is tens of megabytes, and read whole it was one
/// step of the shard answering the list. An answer that is not a page fails the list, saying
/// which node gave it.
async fn peer_page(
    peer: &str,
    status: StatusCode,
    body: &[u8],
) -> Result<Vec<(String, Box<RawValue>)>, ApiError> {
    let unusable = |why: String| {
        ApiError::PeerUnavailable(format!(
            "the node {peer} did not give its dead letters ({why}); the list needs every node's"
        ))
    };
    if status != StatusCode::OK {
        return Err(unusable(format!("it answered {status}")));
    }
    let mut letters = Vec::new();
    read_array(body, "dead", |raw| {
        letters.push((letter_key(&raw)?, raw));
        Ok(())
    })
    .await
    .map_err(unusable)?;
    Ok(letters)
}

/// A peer's letter's key: its first field, as [`DeadBody`] writes a letter, read without
/// going through the rest (the payload can be 64 KB of numbers, the slowest JSON to read);
/// a letter written otherwise is read whole for it.
fn letter_key(raw: &RawValue) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Keyed {
        key: String,
    }
    if let Some(rest) = raw.get().strip_prefix(r#"{"key":"#) {
        if let Some(Ok(key)) = serde_json::Deserializer::from_str(rest)
            .into_iter::<String>()
            .next()
        {
            return Ok(key);
        }
    }
    serde_json::from_str::<Keyed>(raw.get())
        .map(|k| k.key)
        .map_err(|e| e.to_string())
}

/// The first `limit` of the nodes' pages, by key, each key once.
fn merge_pages(mut all: Vec<(String, Box<RawValue>)>, limit: usize) -> Vec<Box<RawValue>> {
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all.dedup_by(|a, b| a.0 == b.0);
    all.truncate(limit);
    all.into_iter().map(|(_, raw)| raw).collect()
}

/// `limit` and `after` of a dead-letter list.
fn list_query(query: Option<&str>) -> Result<(usize, Option<String>), ApiError> {
    let mut limit = DEFAULT_LIMIT;
    let mut after = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("limit", v)) => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::InvalidField(format!("limit must be 1 to {MAX_LIMIT}"))
                    })?;
            }
            Some(("after", v)) => {
                let v = super::segment::decoded(v);
                validate_name(NameKind::Key, &v)?;
                after = Some(v.into_owned());
            }
            _ => {
                return Err(ApiError::InvalidField(format!(
                    "unknown query parameter {pair:?}; expected limit and after"
                )))
            }
        }
    }
    Ok((limit, after))
}

/// One dead letter.
#[derive(Serialize)]
struct DeadBody<'a> {
    key: &'a str,
    version: u64,
    fire_at_us: u64,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a str>,
    callback: Option<CallbackView>,
    payload: &'a RawValue,
}

impl<'a> DeadBody<'a> {
    /// About what a letter encodes to: its body's bytes (the payload is copied as it is), its
    /// key and error twice over (a string that needs escaping takes up to twice its bytes, a
    /// control character six times), and the field names and numbers around them.
    fn bytes(d: &DeadInfo) -> usize {
        2 * d.key.len() + d.body_bytes + d.last_error.as_ref().map_or(0, String::len) + 192
    }

    fn new(d: &'a DeadInfo) -> Self {
        DeadBody {
            key: &d.key,
            version: d.version,
            fire_at_us: d.fire_at.0,
            attempts: d.attempts,
            last_status: d.last_status,
            last_error: d.last_error.as_deref(),
            callback: d.callback.clone().map(|url| CallbackView { url }),
            payload: respond::payload(&d.payload),
        }
    }
}

/// A pending timer's body: with its callback, retry policy and delivery when it has a
/// callback (its `fire_at_us` stays its own deadline, not the next attempt's).
pub fn timer_body<'a>(tenant: &'a str, key: &'a str, info: &'a TimerInfo) -> TimerBody<'a> {
    let mut body = TimerBody::new(tenant, key, info);
    let Some(d) = describe(&info.meta) else {
        return body;
    };
    body.fire_at_us = d.fire_at_us;
    body.retry = Some(RetryView {
        max_attempts: d.retry.max_attempts,
        base_delay_ms: d.retry.base_delay_ms,
        max_delay_ms: d.retry.max_delay_ms,
    });
    body.delivery = Some(DeliveryView {
        state: d.state,
        attempts: d.attempts,
        next_at_us: info.deadline.0,
        last_status: d.last_status,
        last_error: d.last_error,
    });
    body.callback = Some(CallbackView { url: d.callback });
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_reads_limit_and_after_and_refuses_the_rest() {
        assert_eq!(list_query(None), Ok((DEFAULT_LIMIT, None)));
        assert_eq!(
            list_query(Some("limit=5&after=k1")),
            Ok((5, Some("k1".into())))
        );
        for bad in ["limit=0", "limit=1001", "limit=x", "after=a/b", "sort=key"] {
            assert!(list_query(Some(bad)).is_err(), "{bad}");
        }
    }

    fn raw(key: &str, from: &str) -> (String, Box<RawValue>) {
        let json = serde_json::json!({"key": key, "from": from}).to_string();
        (key.into(), RawValue::from_string(json).expect("JSON"))
    }

    #[test]
    fn pages_merge_by_key_each_key_once_up_to_the_limit() {
        let all = vec![
            raw("c", "a"),
            raw("a", "a"),
            raw("e", "a"),
            raw("b", "b"),
            raw("c", "b"),
            raw("d", "b"),
        ];
        let merged = merge_pages(all, 4);
        let keys: Vec<String> = merged
            .iter()
            .map(|r| {
                serde_json::from_str::<serde_json::Value>(r.get()).expect("JSON")["key"].to_string()
            })
            .collect();
        assert_eq!(keys, [r#""a""#, r#""b""#, r#""c""#, r#""d""#]);
        assert_eq!(
            serde_json::to_string(&merged).expect("JSON"),
            r#"[{"from":"a","key":"a"},{"from":"b","key":"b"},{"from":"a","key":"c"},{"from":"b","key":"d"}]"#
        );
    }

    /// A letter's key is read from its first field when it comes first, as this service
    /// writes it, and from the whole letter otherwise: the same key either way.
    #[test]
    fn a_letters_key_is_its_key_field_wherever_it_stands() {
        let d = DeadInfo {
            key: "order-\"1\"\u{e9}".into(),
            version: 7,
            fire_at: crate::units::UtcMicros(1),
            attempts: 1,
            last_status: None,
            last_error: None,
            callback: None,
            meta: Vec::new(),
            payload: b"[1,2,3]".to_vec(),
            body_bytes: 7,
        };
        let ours = serde_json::value::to_raw_value(&DeadBody::new(&d)).expect("JSON");
        assert!(ours.get().starts_with(r#"{"key":"#), "{}", ours.get());
        assert_eq!(letter_key(&ours), Ok(d.key.clone()));
        for (text, key) in [
            (r#"{"version":1,"key":"k\u0031"}"#, Some("k1")),
            (r#"{"key" : "spaced"}"#, Some("spaced")),
            (r#"{"key":7}"#, None),
            (r#"{"version":1}"#, None),
        ] {
            let raw = RawValue::from_string(text.to_string()).expect("JSON");
            assert_eq!(letter_key(&raw).ok().as_deref(), key, "{text}");
        }
    }

    /// A letter's estimate covers its JSON, so that a page's buffer is not grown.
    #[test]
    fn a_letters_estimate_covers_its_json() {
        for (payload, error) in [
            (
                &br#"{"order":"A-1","items":[1,2,3]}"#[..],
                Some("refused: \"x\"\n".repeat(20)),
            ),
            (b"", None),
            (br#""\u00e9\n""#, Some(String::new())),
        ] {
            let mut d = DeadInfo {
                key: "order-1".repeat(20),
                version: u64::MAX,
                fire_at: crate::units::UtcMicros(u64::MAX),
                attempts: u32::MAX,
                last_status: Some(503),
                last_error: error,
                callback: Some("https://hooks.example.com/a?b=c&d=\"e\"".into()),
                meta: Vec::new(),
                payload: payload.to_vec(),
                body_bytes: 0,
            };
            d.body_bytes = d.payload.len()
                + d.last_error.as_ref().map_or(0, String::len)
                + d.callback.as_ref().map_or(0, String::len);
            let json = serde_json::to_vec(&DeadBody::new(&d)).expect("JSON");
            assert!(
                json.len() <= DeadBody::bytes(&d),
                "{} > {}",
                json.len(),
                DeadBody::bytes(&d)
            );
        }
    }

    #[test]
    fn a_peer_page_that_is_not_a_page_fails_the_list_naming_the_peer() {
        crate::runtime::cooperate::on_executor(async {
            let ok = peer_page(
                "10.0.0.2:7480",
                StatusCode::OK,
                br#"{"dead":[{"key":"k1","x":1}]}"#,
            )
            .await
            .expect("a page");
            assert_eq!(ok.len(), 1);
            assert_eq!(ok[0].0, "k1");
            assert_eq!(ok[0].1.get(), r#"{"key":"k1","x":1}"#);
            for (status, body) in [
                (StatusCode::SERVICE_UNAVAILABLE, &br#"{"dead":[]}"#[..]),
                (StatusCode::OK, b"not json"),
                (StatusCode::OK, br#"{"dead":[{"nokey":1}]}"#),
                (StatusCode::OK, br#"{"dead":[{"key":7}]}"#),
                (StatusCode::OK, br#"{"other":[]}"#),
                (StatusCode::OK, br#"{"dead":[{"key":"a"}"#),
                (StatusCode::OK, br#"{"dead":[{"key":"a"},]}"#),
                (StatusCode::OK, br#"{"dead":[{"key":"a"}]}x"#),
                (StatusCode::OK, br#"{"dead":[{"key":"a"}],"more":1}"#),
                (StatusCode::OK, br#"{"dead":[{"key":"a"} {"key":"b"}]}"#),
                (StatusCode::OK, b""),
            ] {
                match peer_page("10.0.0.2:7480", status, body).await {
                    Err(ApiError::PeerUnavailable(why)) => {
                        assert!(why.contains("10.0.0.2:7480"), "{why}")
                    }
                    other => panic!("{status} {:?}: {other:?}", String::from_utf8_lossy(body)),
                }
            }
        });
    }

    /// Prints what a peer's page of 500 letters, each with a payload of 32,000 numbers
    /// (64 KB), took to read whole in one step (as it was read before), against the longest
    /// letter read now.
    ///
    /// `cargo test --release --lib peer_page_figure -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn peer_page_figure() {
        use std::time::{Duration, Instant};
        #[derive(serde::Deserialize)]
        struct Page {
            dead: Vec<Box<RawValue>>,
        }
        #[derive(serde::Deserialize)]
        struct Keyed {
            key: String,
        }
        let payload = vec!["1"; 32_000].join(",");
        let letters: Vec<String> = (0..500)
            .map(|i| format!(r#"{{"key":"order-{i:06}","version":1,"payload":[{payload}]}}"#))
            .collect();
        let body = format!(r#"{{"dead":[{}]}}"#, letters.join(","));
        for round in 0..3 {
            let t = Instant::now();
            let page: Page = serde_json::from_slice(body.as_bytes()).expect("a page");
            let keyed: Vec<(String, Box<RawValue>)> = page
                .dead
                .into_iter()
                .map(|raw| {
                    let k: Keyed = serde_json::from_str(raw.get()).expect("a key");
                    (k.key, raw)
                })
                .collect();
            let whole = t.elapsed();
            let mut scan =
                super::super::array::ArrayScan::new(body.as_bytes(), "dead").expect("a page");
            let (mut longest, mut steps) = (Duration::ZERO, 0);
            let mut read = Vec::new();
            loop {
                let t = Instant::now();
                let done = scan
                    .step(
                        || true,
                        |raw| {
                            read.push((letter_key(&raw)?, raw));
                            Ok(())
                        },
                    )
                    .expect("a page");
                longest = longest.max(t.elapsed());
                steps += 1;
                if done {
                    break;
                }
            }
            assert_eq!(read.len(), keyed.len());
            println!(
                "round {round}: {:.1} MB, {} letters: whole in one step {:.1} ms; \
                 a letter a step, {steps} steps, longest {:.0} µs",
                body.len() as f64 / 1e6,
                read.len(),
                whole.as_secs_f64() * 1e3,
                longest.as_secs_f64() * 1e6
            );
        }
    }
}
