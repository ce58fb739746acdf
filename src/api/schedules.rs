//! Recurring schedules over HTTP:
//!
//! | route | answer |
//! |---|---|
//! | `PUT /v1/schedules/{tenant}/{key}` | 201 created, 200 replaced: the schedule (below) |
//! | `GET /v1/schedules/{tenant}/{key}?next=N` | 200: the schedule and its next N occurrences (N ≤ 100, default 5); 404 |
//! | `DELETE /v1/schedules/{tenant}/{key}` | 204; 404. No occurrence due after the answer fires |
//! | `POST /v1/schedules/{tenant}/{key}/pause`, `…/resume` | 200: the schedule; 404 |
//! | `GET /v1/schedules/{tenant}?after=KEY&limit=N` | 200 `{"schedules": [...], "next": KEY}`, by key (N ≤ 1,000, default 100); on a node among others, every live node's (`schedule_gather.rs`) |
//!
//! A schedule is one pending timer whose payload is its record (`schedule::ScheduleRecord`:
//! the definition as sent, and its cursor), reached through the engine's schedule calls
//! (`engine/schedules.rs`). A write that depends on what is stored (a replacement keeps the
//! cursor; a pause or resume changes only the pause) reads the timer, then writes it on
//! condition of the version read, and reads again when the shard fired it in between (each
//! fire writes the record under a new version): no fire's cursor is ever written over.

use super::body::{CallbackBody, RetryBody};
use super::error::ApiError;
use super::forward::Here;
use super::respond::{self, Resp};
use super::schedule_gather::{merged, ListItem, ListView};
use super::schedule_quota::Entered;
use super::state::App;
use super::unread::RequestBody;
use crate::engine::{Cancelled, Condition, Scheduled, TimerInfo};
use crate::error::{validate_name, Error as EngineError, NameKind};
use crate::schedule::{
    CatchUpSpec, DstSpec, Limits, Schedule, ScheduleRecord, ScheduleSpec, SpecError,
};
use crate::sink::webhook::new_meta;
use crate::units::UtcMicros;
use hyper::header::{HeaderValue, AUTHORIZATION};
use hyper::{Method, Request, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Occurrences a `GET` previews unless `next=` says, and the most it may ask for.
const DEFAULT_NEXT: usize = 5;
const MAX_NEXT: usize = 100;
/// Schedules a listing holds unless `limit=` says, and the most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1_000;
/// Reads and conditional writes in a row before a write gives up (`503`, retry).
const TRIES: usize = 8;

/// A `PUT`'s body: the calculus's fields (`schedule::ScheduleSpec`) and the delivery's. Any
/// other field is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBody<'a> {
    cron: Option<String>,
    #[serde(default, deserialize_with = "crate::schedule::whole")]
    every_ms: Option<u64>,
    time_zone: Option<String>,
    start_at: Option<String>,
    end_at: Option<String>,
    #[serde(default, deserialize_with = "crate::schedule::whole")]
    max_occurrences: Option<u64>,
    catch_up: Option<CatchUpSpec>,
    dst: Option<DstSpec>,
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
    callback: Option<CallbackBody>,
    retry: Option<RetryBody>,
}

/// A schedule as the routes answer it.
#[derive(Serialize)]
struct ScheduleView<'a> {
    tenant: &'a str,
    key: &'a str,
    /// The version of the schedule's record: it changes with every write and every fire.
    version: u64,
    paused: bool,
    /// Occurrences fired so far.
    sequence: u64,
    definition: &'a RawValue,
    next: Vec<NextView>,
}

#[derive(Serialize)]
struct NextView {
    occurrence_us: u64,
    local: String,
}

/// What a write does to the stored schedule (`None`: there is none).
type Change<'a> =
    dyn Fn(Option<ScheduleRecord>, UtcMicros) -> Result<ScheduleRecord, ApiError> + 'a;

impl App {
    /// `/v1/schedules/{tenant}[/{key}[/{action}]]`.
    pub(super) async fn schedules(
        &self,
        tenant: &str,
        key: Option<&str>,
        action: Option<&str>,
        req: Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        let allow = match (key, action) {
            (None, _) => "GET",
            (Some(_), None) => "PUT, GET, DELETE",
            (Some(_), Some(_)) => "POST",
        };
        if !allow.split(", ").any(|m| m == req.method().as_str()) {
            return Err(ApiError::MethodNotAllowed {
                method: req.method().to_string(),
                allow,
            });
        }
        self.check_read(tenant, &req)?;
        let Some(key) = key else {
            return self.list_schedules(tenant, &req).await;
        };
        validate_name(NameKind::Key, key)?;
        let req = match self.route_keyed(tenant, key, req).await? {
            Here::Local(req) => req,
            Here::Forwarded(resp) => return Ok(resp),
        };
        // A write takes no query parameter: its terms are its body's, and a parameter read
        // as nothing (`?if_version=5`) would write without the condition it meant.
        if req.method() != Method::GET {
            super::query::pairs(req.uri().query(), &[]).map_err(|e| match e {
                ApiError::InvalidField(m) => ApiError::InvalidField(format!(
                    "{m}: a schedule's {} takes no query parameter",
                    req.method()
                )),
                other => other,
            })?;
        }
        let limits = Limits::default();
        let auth = req.headers().get(AUTHORIZATION).cloned();
        let auth = auth.as_ref();
        match (action, req.method().clone()) {
            (Some("pause" | "resume"), _) => {
                let paused = action == Some("pause");
                let change = |prior: Option<ScheduleRecord>,
                              _now: UtcMicros|
                 -> Result<ScheduleRecord, ApiError> {
                    match prior {
                        Some(mut r) => {
                            r.paused = paused;
                            Ok(r)
                        }
                        None => Err(no_schedule(tenant, key)),
                    }
                };
                let (_, view) = self
                    .write(tenant, key, &change, (None, auth), &limits)
                    .await?;
                Ok(view)
            }
            (Some(other), _) => Err(ApiError::NotFound(format!(
                "no route for schedule action {other:?}; say pause or resume"
            ))),
            (None, Method::PUT) => {
                let body = self
                    .read_body(req, self.shared.config.max_body_bytes)
                    .await?;
                let meta = self.checked_definition(tenant, &body, &limits)?;
                let text = std::str::from_utf8(&body)
                    .map_err(|e| ApiError::MalformedJson(e.to_string()))?;
                let change = |prior: Option<ScheduleRecord>,
                              now: UtcMicros|
                 -> Result<ScheduleRecord, ApiError> {
                    let (r, _) = ScheduleRecord::create(text, now, &limits).map_err(invalid)?;
                    Ok(match prior {
                        Some(p) => r.replacing(&p),
                        None => r,
                    })
                };
                let (s, view) = self
                    .write(tenant, key, &change, (Some(&meta), auth), &limits)
                    .await?;
                let status = if s.replaced {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                };
                Ok(with_status(view, status))
            }
            (None, Method::GET) => {
                let n = next_of(req.uri().query())?;
                let info = self.handle.get_schedule_async(tenant, key).await?;
                let info = info.ok_or_else(|| no_schedule(tenant, key))?;
                let (record, schedule) = stored(&info, &limits)?;
                Ok(view(tenant, key, &info, &record, &schedule, n))
            }
            (None, _) => match self.handle.cancel_schedule_async(tenant, key).await? {
                Cancelled::Cancelled { .. } => Ok(respond::empty(StatusCode::NO_CONTENT)),
                Cancelled::NotFound => Err(no_schedule(tenant, key)),
            },
        }
    }

    /// The definition checked as a whole (a `400` naming the field at fault), and the
    /// callback its occurrences are delivered to as delivery metadata (empty without one).
    fn checked_definition(
        &self,
        tenant: &str,
        body: &[u8],
        limits: &Limits,
    ) -> Result<Vec<u8>, ApiError> {
        let refused = |e: serde_json::Error| ApiError::InvalidField(format!("schedule: {e}"));
        no_null(&serde_json::from_slice(body).map_err(refused)?)?;
        let b: PutBody<'_> = serde_json::from_slice(body).map_err(refused)?;
        let spec = ScheduleSpec {
            cron: b.cron,
            every_ms: b.every_ms,
            time_zone: b.time_zone,
            start_at: b.start_at,
            end_at: b.end_at,
            max_occurrences: b.max_occurrences,
            catch_up: b.catch_up,
            dst: b.dst,
        };
        spec.compile(self.handle.now(), limits).map_err(invalid)?;
        if let Some(p) = b.payload {
            if p.get().len() > crate::engine::MAX_PAYLOAD {
                return Err(ApiError::PayloadTooLarge(format!(
                    "payload is {} bytes; the limit is {}",
                    p.get().len(),
                    crate::engine::MAX_PAYLOAD
                )));
            }
        }
        let w = &self.shared.webhooks;
        let url = w.callback_for(tenant, b.callback.as_ref().map(|c| c.url.as_str()))?;
        let Some(url) = url else {
            if b.retry.is_some() {
                return Err(ApiError::InvalidField(
                    "\"retry\" needs a \"callback\" (or a callback_url for the tenant)".into(),
                ));
            }
            return Ok(Vec::new());
        };
        let r = b.retry;
        let policy = w.retry_for(
            tenant,
            r.and_then(|r| r.max_attempts),
            r.and_then(|r| r.base_delay_ms),
            r.and_then(|r| r.max_delay_ms),
        )?;
        Ok(new_meta(url, policy, 0))
    }

    /// Reads the schedule, applies `change`, and writes the result on condition of what was
    /// read, armed where it stands now, with the callback metadata `meta` (`None`: the stored
    /// one); read again while a fire or another write came between. The answer is the
    /// schedule as written. `auth` is the request's, for the count a creation asks of the
    /// other nodes.
    async fn write(
        &self,
        tenant: &str,
        key: &str,
        change: &Change<'_>,
        (meta, auth): (Option<&[u8]>, Option<&HeaderValue>),
        limits: &Limits,
    ) -> Result<(Scheduled, Resp), ApiError> {
        for _ in 0..TRIES {
            let prior = self.handle.get_schedule_async(tenant, key).await?;
            // A stored record that does not read is replaced as if absent (a PUT), or not
            // found (a pause or resume).
            let (cond, old, old_meta) = match &prior {
                None => (Condition::Absent, None, Vec::new()),
                Some(info) => (
                    Condition::Version(info.version),
                    ScheduleRecord::decode(&info.payload),
                    info.meta.clone(),
                ),
            };
            let now = self.handle.now();
            let record = change(old, now)?;
            // A new schedule needs room under the tenant's quota, held until it is written.
            let _room = match prior {
                None => Some(self.room_for_schedule(tenant, auth).await?),
                Some(_) => None,
            };
            let schedule = record.schedule(limits).map_err(invalid)?;
            let Some(at) = record.armed_at(&schedule, now) else {
                return Err(ApiError::InvalidField(
                    "end_at, max_occurrences: the schedule has no occurrence left to fire".into(),
                ));
            };
            let meta = meta.unwrap_or(&old_meta);
            let bytes = record.encode();
            let put = self
                .handle
                .put_schedule_async(tenant, key, at, &bytes, meta, cond);
            match put.await {
                Ok(s) => {
                    let info = TimerInfo {
                        deadline: s.deadline,
                        version: s.version,
                        meta: Vec::new(),
                        payload: Vec::new(),
                    };
                    let v = view(tenant, key, &info, &record, &schedule, DEFAULT_NEXT);
                    return Ok((s, v));
                }
                Err(
                    EngineError::Exists { .. }
                    | EngineError::VersionMismatch { .. }
                    | EngineError::NotPending { .. },
                ) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::Overloaded(format!(
            "the schedule changed under {TRIES} writes in a row; retry"
        )))
    }

    /// Room for one more schedule of `tenant`'s under its `max_schedules` (its table's, else
    /// the top-level one), held and counted by other creations until the answer is dropped,
    /// after the write; `429` when the quota is reached (`schedule_quota.rs`).
    async fn room_for_schedule(
        &self,
        tenant: &str,
        auth: Option<&HeaderValue>,
    ) -> Result<Entered<'_>, ApiError> {
        let config = &self.shared.config;
        let limit = config
            .tenants
            .get(tenant)
            .and_then(|t| t.max_schedules)
            .unwrap_or(config.max_schedules);
        let (entered, others) = self.shared.creating.enter(tenant);
        let room = usize::try_from(limit.saturating_sub(others)).unwrap_or(usize::MAX);
        let mut held = match room {
            0 => 0,
            _ => self.handle.count_schedules_async(tenant, room).await?,
        };
        if held < room {
            // On a node among others, theirs too (`schedule_gather.rs`).
            held += self.count_on_peers(tenant, room - held, auth).await?;
        }
        if held >= room {
            return Err(ApiError::SchedulesExceeded {
                tenant: tenant.to_string(),
                limit,
            });
        }
        Ok(entered)
    }

    /// `GET /v1/schedules/{tenant}?after=KEY&limit=N`; on a node among others, every live
    /// node's page merged (`schedule_gather.rs`), unless the request came forwarded.
    async fn list_schedules(
        &self,
        tenant: &str,
        req: &Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        let (mut after, mut limit) = (None, DEFAULT_LIMIT);
        for (name, v) in super::query::pairs(req.uri().query(), &["after", "limit"])? {
            if name == "after" {
                let v = super::segment::decoded(v).into_owned();
                validate_name(NameKind::Key, &v)
                    .map_err(|e| ApiError::InvalidField(format!("after: {e}")))?;
                after = Some(v);
            } else {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::InvalidField(format!(
                            "limit must be a whole number from 1 to {MAX_LIMIT}, not {v:?}"
                        ))
                    })?;
            }
        }
        let (others, asks) = match req.headers().contains_key(super::forward::FORWARDED) {
            true => (Vec::new(), Vec::new()),
            false => {
                let path = req.uri().path_and_query().map_or("", |p| p.as_str());
                self.ask_peers(path, req.headers().get(AUTHORIZATION))
            }
        };
        let page = self
            .handle
            .list_schedules_async(tenant, after.as_deref(), limit)
            .await?;
        let schedules = page
            .timers
            .into_iter()
            .map(|t| {
                let r = ScheduleRecord::decode(&t.payload);
                ListItem {
                    key: t.key,
                    version: t.version,
                    paused: r.as_ref().is_some_and(|r| r.paused),
                    sequence: r.as_ref().map_or(0, |r| r.sequence),
                }
            })
            .collect();
        let mine = ListView {
            schedules,
            next: page.next,
        };
        let body = merged(mine, limit, &others, asks).await?;
        Ok(respond::json_of(StatusCode::OK, &body))
    }
}

/// The stored record and its schedule compiled; a record that does not read is the
/// server's fault.
fn stored(info: &TimerInfo, limits: &Limits) -> Result<(ScheduleRecord, Schedule), ApiError> {
    let r = ScheduleRecord::decode(&info.payload)
        .ok_or_else(|| ApiError::Internal("a stored schedule does not read".into()))?;
    let s = r
        .schedule(limits)
        .map_err(|e| ApiError::Internal(format!("a stored schedule no longer compiles: {e}")))?;
    Ok((r, s))
}

fn view(
    tenant: &str,
    key: &str,
    info: &TimerInfo,
    record: &ScheduleRecord,
    schedule: &Schedule,
    n: usize,
) -> Resp {
    let next = record
        .preview(schedule, n)
        .into_iter()
        .map(|o| NextView {
            occurrence_us: o.at.0,
            local: o.local(),
        })
        .collect();
    let body = ScheduleView {
        tenant,
        key,
        version: info.version,
        paused: record.paused,
        sequence: record.sequence,
        definition: &record.def,
        next,
    };
    respond::json_of(StatusCode::OK, &body)
}

fn with_status(mut resp: Resp, status: StatusCode) -> Resp {
    *resp.status_mut() = status;
    resp
}

/// `next=N` of a `GET`: 1 to 100, 5 when absent.
fn next_of(query: Option<&str>) -> Result<usize, ApiError> {
    let mut n = DEFAULT_NEXT;
    for (_, v) in super::query::pairs(query, &["next"])? {
        n = v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_NEXT).contains(n))
            .ok_or_else(|| {
                ApiError::InvalidField(format!(
                    "next must be a whole number from 1 to {MAX_NEXT}, not {v:?}"
                ))
            })?;
    }
    Ok(n)
}

/// A `PUT`'s body is an object, and `null` is the value of no field but `payload` (and of
/// nothing inside one, but inside the payload): a `null` taken for a field left out would
/// pass a mistake silently, as the timer's `PUT` refuses it (`body.rs`).
fn no_null(body: &serde_json::Value) -> Result<(), ApiError> {
    use serde_json::Value;
    fn inside(v: &Value, path: &str) -> Result<(), ApiError> {
        match v {
            Value::Null => Err(ApiError::InvalidField(format!(
                "{path}: null is not a value here; leave the field out for its default"
            ))),
            Value::Object(m) => m
                .iter()
                .try_for_each(|(k, v)| inside(v, &format!("{path}.{k}"))),
            Value::Array(a) => a.iter().try_for_each(|v| inside(v, path)),
            _ => Ok(()),
        }
    }
    let Value::Object(fields) = body else {
        return Err(ApiError::InvalidField(
            "schedule: the body must be a JSON object with \"cron\" or \"every_ms\"".into(),
        ));
    };
    fields
        .iter()
        .filter(|(k, _)| *k != "payload")
        .try_for_each(|(k, v)| inside(v, k))
}

fn invalid(e: SpecError) -> ApiError {
    ApiError::InvalidField(e.to_string())
}

fn no_schedule(tenant: &str, key: &str) -> ApiError {
    ApiError::NotFound(format!("no schedule for tenant {tenant:?} and key {key:?}"))
}

#[cfg(test)]
#[path = "schedules_tests.rs"]
mod tests;
