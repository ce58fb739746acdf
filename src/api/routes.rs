//! Routing and the single-timer handlers. A request is matched to a route, checked in the
//! documented order (method, tenant and key names, the tenant's admission: known, bearer
//! token, request rate (`tenants.rs`), then the body), and
//! answered (on a node among others, a keyed request for another node's partition is
//! forwarded to it once admitted: `forward.rs`); the engine is reached through the `_async`
//! handle calls, whose replies come back through the owning shard's ring without blocking
//! this shard's other connections.

use super::batch;
use super::body::{if_version_of, parse_put, Registration};
use super::error::ApiError;
use super::forward::{self, Here};
use super::metrics::{RequestLabels, ScrapeRefused, WAITING_SCRAPES};
use super::respond::{self, Resp};
use super::segment::decoded;
use super::split::Owners;
use super::state::App;
use super::unread::{self, RequestBody};
use crate::engine::{Cancelled, Scheduled};
use crate::error::{validate_name, NameKind};
use bytes::Bytes;
use hyper::header::AUTHORIZATION;
use hyper::{Method, Request, StatusCode};
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// A route, with its tenant and key segments percent-decoded ([`decoded`]).
enum Route<'a> {
    Timer(Cow<'a, str>, Cow<'a, str>),
    Batch(Cow<'a, str>),
    /// `/v1/actions/{tenant}/{id}`.
    Action(Cow<'a, str>, Cow<'a, str>),
    /// `/v1/dead/{tenant}[/{key}[/retry]]`.
    Dead(Cow<'a, str>, Option<Cow<'a, str>>, bool),
    /// `/v1/schedules/{tenant}[/{key}[/{action}]]`.
    Schedule(Cow<'a, str>, Option<Cow<'a, str>>, Option<&'a str>),
    /// `/v1/history/{tenant}`.
    History(Cow<'a, str>),
    /// `/v1/queues/{tenant}[/{receive|ack|nack|extend}]`.
    Queue(Cow<'a, str>, Option<&'a str>),
    Metrics,
    Healthz,
    Cluster,
    NotFound,
}

fn route(path: &str) -> Route<'_> {
    let mut it = path.strip_prefix('/').unwrap_or(path).split('/');
    match (it.next(), it.next(), it.next(), it.next(), it.next()) {
        (Some("metrics"), None, ..) => Route::Metrics,
        (Some("healthz"), None, ..) => Route::Healthz,
        (Some("cluster"), None, ..) => Route::Cluster,
        (Some("v1"), Some("timers"), Some(t), None, _) if !t.is_empty() => Route::Batch(decoded(t)),
        (Some("v1"), Some("actions"), Some(t), Some(id), None) => action_route(t, id),
        (Some("v1"), Some("queues"), Some(t), None, _) if !t.is_empty() => {
            Route::Queue(decoded(t), None)
        }
        (Some("v1"), Some("queues"), Some(t), Some("receive"), None) if !t.is_empty() => {
            Route::Queue(decoded(t), Some("receive"))
        }
        (Some("v1"), Some("queues"), Some(t), Some("ack"), None) if !t.is_empty() => {
            Route::Queue(decoded(t), Some("ack"))
        }
        (Some("v1"), Some("queues"), Some(t), Some("nack"), None) if !t.is_empty() => {
            Route::Queue(decoded(t), Some("nack"))
        }
        (Some("v1"), Some("queues"), Some(t), Some("extend"), None) if !t.is_empty() => {
            Route::Queue(decoded(t), Some("extend"))
        }
        (Some("v1"), Some("history"), Some(t), None, _) if !t.is_empty() => {
            Route::History(decoded(t))
        }
        (Some("v1"), Some("dead"), Some(t), None, _) => dead_route(t, None, false),
        (Some("v1"), Some("dead"), Some(t), Some(k), None) => dead_route(t, Some(k), false),
        (Some("v1"), Some("dead"), Some(t), Some(k), Some("retry")) if it.next().is_none() => {
            dead_route(t, Some(k), true)
        }
        (Some("v1"), Some("schedules"), Some(t), None, _) => schedule_route(t, None, None, true),
        (Some("v1"), Some("schedules"), Some(t), Some(k), None) => {
            schedule_route(t, Some(k), None, true)
        }
        (Some("v1"), Some("schedules"), Some(t), Some(k), Some("pause")) => {
            schedule_route(t, Some(k), Some("pause"), it.next().is_none())
        }
        (Some("v1"), Some("schedules"), Some(t), Some(k), Some("resume")) => {
            schedule_route(t, Some(k), Some("resume"), it.next().is_none())
        }
        (Some("v1"), Some("timers"), Some(t), Some(k), None) if !t.is_empty() && !k.is_empty() => {
            Route::Timer(decoded(t), decoded(k))
        }
        _ => Route::NotFound,
    }
}

/// `/v1/actions/{tenant}/{id}`, with no empty segment.
fn action_route<'a>(tenant: &'a str, id: &'a str) -> Route<'a> {
    if tenant.is_empty() || id.is_empty() {
        return Route::NotFound;
    }
    Route::Action(decoded(tenant), decoded(id))
}

/// `/v1/schedules/{tenant}[/{key}[/pause|/resume]]`, with no empty segment and nothing after
/// the action (`ends`).
fn schedule_route<'a>(
    tenant: &'a str,
    key: Option<&'a str>,
    action: Option<&'static str>,
    ends: bool,
) -> Route<'a> {
    if !ends || tenant.is_empty() || key.is_some_and(str::is_empty) {
        return Route::NotFound;
    }
    Route::Schedule(decoded(tenant), key.map(decoded), action)
}

/// `/v1/dead/{tenant}[/{key}[/retry]]`, with no empty segment.
fn dead_route<'a>(tenant: &'a str, key: Option<&'a str>, retry: bool) -> Route<'a> {
    if tenant.is_empty() || key.is_some_and(str::is_empty) {
        return Route::NotFound;
    }
    Route::Dead(decoded(tenant), key.map(decoded), retry)
}

impl App {
    /// Answers one request; never fails (errors become JSON error responses). What its
    /// handler left unread of the body is read and discarded, or the answer says
    /// `Connection: close` (`unread.rs`).
    pub async fn serve(&self, req: Request<unread::Source>) -> Resp {
        let start = Instant::now();
        let (parts, body) = req.into_parts();
        let (body, left) = RequestBody::new(body);
        let (name, limit, result) = self.answer(Request::from_parts(parts, body)).await;
        let give_up = result.as_ref().is_err_and(|e| {
            matches!(
                e,
                ApiError::RequestTimeout(_) | ApiError::BodyTooLarge { .. }
            )
        });
        let mut resp = result.unwrap_or_else(|e| respond::error(&e));
        let timeout = Duration::from_millis(self.shared.config.body_timeout_ms);
        if !unread::drained(left.take(), limit, timeout, give_up).await {
            respond::closing(&mut resp);
        }
        if let Some(m) = self.shared.metrics.get() {
            let labels = RequestLabels {
                shard: self.shard as u32,
                route: name,
                status: resp.status().as_u16(),
            };
            m.observe(labels, start.elapsed());
        }
        resp
    }

    /// The route's name (for metrics), its body limit, and its answer; `req` is dropped by
    /// the time it returns.
    async fn answer(
        &self,
        req: Request<RequestBody>,
    ) -> (&'static str, usize, Result<Resp, ApiError>) {
        let path = req.uri().path().to_owned();
        let limit = self.shared.config.max_body_bytes;
        // Pages for a browser, not an operation of the API (`docs/openapi.yaml` has none).
        if super::console::is_console(&path) {
            return ("console", limit, Ok(super::console::serve(&req, &path)));
        }
        match route(&path) {
            Route::Timer(t, k) => {
                let name = match *req.method() {
                    Method::PUT => "put_timer",
                    Method::GET => "get_timer",
                    Method::DELETE => "delete_timer",
                    _ => "other",
                };
                (name, limit, self.timer(&t, &k, req).await)
            }
            Route::Batch(t) if req.method() == Method::GET => {
                ("list_timers", limit, self.list(&t, req).await)
            }
            Route::Batch(t) if req.method() == Method::DELETE => {
                ("bulk_cancel", limit, self.bulk(&t, &req).await)
            }
            Route::Action(t, id) => ("get_action", limit, self.action(&t, &id, &req)),
            Route::Batch(t) => {
                let limit = self.shared.config.max_batch_body_bytes;
                ("post_batch", limit, self.batch(&t, req).await)
            }
            Route::Dead(t, k, retry) => {
                let name = match (&k, retry) {
                    (None, _) => "list_dead",
                    (Some(_), true) => "redrive_dead",
                    (Some(_), false) => "discard_dead",
                };
                (name, limit, self.dead(&t, k.as_deref(), retry, req).await)
            }
            Route::Schedule(t, k, a) => {
                let name = match (&k, a, req.method().clone()) {
                    (None, ..) => "list_schedules",
                    (Some(_), Some(_), _) => "schedule_action",
                    (Some(_), None, Method::PUT) => "put_schedule",
                    (Some(_), None, Method::DELETE) => "delete_schedule",
                    (Some(_), None, _) => "get_schedule",
                };
                let answer = self.schedules(&t, k.as_deref(), a, req).await;
                (name, limit, answer)
            }
            Route::Queue(t, action) => {
                let name = match action {
                    None => "get_queue",
                    Some("receive") => "queue_receive",
                    Some("ack") => "queue_ack",
                    Some("nack") => "queue_nack",
                    Some("extend") => "queue_extend",
                    Some(_) => "other",
                };
                (name, limit, self.queue(&t, action, req).await)
            }
            Route::History(t) => ("get_history", limit, self.history(&t, &req)),
            Route::Metrics => ("metrics", limit, self.metrics(&req).await),
            Route::Healthz => ("healthz", limit, self.healthz(&req)),
            Route::Cluster => ("cluster", limit, self.cluster(&req).await),
            Route::NotFound => (
                "other",
                limit,
                Err(ApiError::NotFound(format!("no route for {path:?}"))),
            ),
        }
    }

    /// A keyed request (tenant and key checked, admission passed) goes on to the node that
    /// owns its partition when that is another node and the request did not come forwarded
    /// (`forward.rs`): its answer, relayed. Otherwise it is answered here.
    pub(super) async fn route_keyed(
        &self,
        tenant: &str,
        key: &str,
        req: Request<RequestBody>,
    ) -> Result<Here, ApiError> {
        let view = forward::view(self.shared.node.as_ref(), req.headers());
        let Some(peer) = forward::peer_of(view.as_deref(), tenant, key) else {
            return Ok(Here::Local(req));
        };
        let method = req.method().clone();
        let path = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
        let auth = req.headers().get(AUTHORIZATION).cloned();
        let body = self
            .read_body(req, self.shared.config.max_body_bytes)
            .await?;
        let out = forward::Outgoing {
            method,
            path: &path,
            auth: auth.as_ref(),
            body,
        };
        let answer = self.peers.forward(&peer, out).await?;
        Ok(Here::Forwarded(answer.into_resp()))
    }

    pub(super) fn check(&self, tenant: &str, req: &Request<RequestBody>) -> Result<(), ApiError> {
        validate_name(NameKind::Tenant, tenant)?;
        let auth = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
        self.shared.tenants.admit(tenant, auth)
    }

    /// `check` for a request that only reads (a `GET`): with `metrics_token` set, that token
    /// opens it too, for every known tenant (docs/SECURITY.md). Any other method is `check`.
    pub(super) fn check_read(
        &self,
        tenant: &str,
        req: &Request<RequestBody>,
    ) -> Result<(), ApiError> {
        if req.method() != Method::GET {
            return self.check(tenant, req);
        }
        validate_name(NameKind::Tenant, tenant)?;
        let auth = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
        let reader = self.shared.config.metrics_token.as_deref();
        self.shared.tenants.admit_read(tenant, auth, reader)
    }

    async fn timer(
        &self,
        tenant: &str,
        key: &str,
        req: Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        // `delay_ms` counts from the request's arrival, not from the end of a slow body.
        let arrival = self.handle.now();
        let method = req.method().clone();
        if !matches!(method, Method::PUT | Method::GET | Method::DELETE) {
            return Err(ApiError::MethodNotAllowed {
                method: method.to_string(),
                allow: "PUT, GET, DELETE",
            });
        }
        self.check_read(tenant, &req)?;
        validate_name(NameKind::Key, key)?;
        let req = match self.route_keyed(tenant, key, req).await? {
            Here::Local(req) => req,
            Here::Forwarded(resp) => return Ok(resp),
        };
        // `DELETE ?if_version=V`. A write takes no parameter it does not know: a misspelt
        // `?if_verison=5` read as nothing would cancel without its condition, and a PUT's
        // `?if_version=5` would replace without one. A GET's query is ignored.
        let if_version = match method {
            Method::DELETE => if_version_in(req.uri().query())?,
            Method::PUT => no_query(req.uri().query())?,
            _ => None,
        };
        match method {
            Method::PUT => {
                let limit = self.shared.config.max_body_bytes;
                let body = self.read_body(req, limit).await?;
                let reg = parse_put(&body, arrival)?;
                let s = self.schedule(tenant, key, &reg).await?;
                let status = if s.replaced {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                };
                Ok(respond::json_of(
                    status,
                    &respond::ScheduledBody::new(tenant, key, &s),
                ))
            }
            Method::GET => match self.handle.get_async(tenant, key).await? {
                Some(info) => Ok(respond::json_of(
                    StatusCode::OK,
                    &super::webhooks::timer_body(tenant, key, &info),
                )),
                None => Err(not_pending(tenant, key)),
            },
            _ => {
                let cancelled = match if_version {
                    Some(v) => self.handle.cancel_if_async(tenant, key, v).await?,
                    None => self.handle.cancel_async(tenant, key).await?,
                };
                match cancelled {
                    Cancelled::Cancelled { .. } => Ok(respond::empty(StatusCode::NO_CONTENT)),
                    Cancelled::NotFound => Err(not_pending(tenant, key)),
                }
            }
        }
    }

    /// `GET /v1/timers/{tenant}`: the tenant's pending timers by key prefix (`list.rs`).
    async fn list(&self, tenant: &str, req: Request<RequestBody>) -> Result<Resp, ApiError> {
        self.check_read(tenant, &req)?;
        self.list_timers(tenant, req).await
    }

    /// `DELETE /v1/timers/{tenant}?prefix=`: a bulk cancel (`bulk.rs`).
    async fn bulk(&self, tenant: &str, req: &Request<RequestBody>) -> Result<Resp, ApiError> {
        self.check(tenant, req)?;
        self.bulk_cancel(tenant, req).await
    }

    async fn batch(&self, tenant: &str, req: Request<RequestBody>) -> Result<Resp, ApiError> {
        if req.method() != Method::POST {
            return Err(ApiError::MethodNotAllowed {
                method: req.method().to_string(),
                allow: "GET, POST, DELETE",
            });
        }
        let arrival = self.handle.now();
        self.check(tenant, &req)?;
        let limit = self.shared.config.max_batch_body_bytes;
        let owners = Owners {
            view: forward::view(self.shared.node.as_ref(), req.headers()),
            auth: req.headers().get(AUTHORIZATION).cloned(),
        };
        let body = self.read_body(req, limit).await?;
        let out = batch::run(self, tenant, &body, arrival, &owners).await?;
        drop(body);
        Ok(match batch::encode(out).await {
            Ok(bytes) => respond::json(StatusCode::OK, bytes),
            Err(e) => respond::error(&ApiError::Internal(format!(
                "cannot encode the response: {e}"
            ))),
        })
    }

    /// An operator's `GET` (`/metrics`, `/cluster`): with `metrics_token` set, it needs that
    /// token.
    pub(super) fn operator_get(
        &self,
        req: &Request<RequestBody>,
        route: &'static str,
    ) -> Result<(), ApiError> {
        get_only(req)?;
        if let Some(token) = &self.shared.config.metrics_token {
            let auth = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
            if !super::tenants::bearer_matches(auth, token) {
                return Err(ApiError::MetricsUnauthorized(route));
            }
        }
        Ok(())
    }

    async fn metrics(&self, req: &Request<RequestBody>) -> Result<Resp, ApiError> {
        self.operator_get(req, "/metrics")?;
        let text = match self.shared.metrics.get() {
            Some(m) => m.scrape().await.map_err(|why| match why {
                ScrapeRefused::Busy => ApiError::Overloaded(format!(
                    "{WAITING_SCRAPES} scrapes of /metrics are waiting already; retry"
                )),
                ScrapeRefused::Gone => {
                    ApiError::Internal("the metrics render thread is not running".into())
                }
            })?,
            None => String::new(),
        };
        Ok(respond::with_body(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            text,
        ))
    }

    /// On a node that shares a Redis Cluster: the partitions its shards have loaded and act
    /// on.
    fn owned(&self) -> Option<u64> {
        self.shared.node.as_ref()?;
        Some(self.handle.partitions_loaded())
    }

    /// On a node among others: the partitions it has held for over 5 s without loading them,
    /// as ranges; `None` when there are none.
    fn load_overdue(&self) -> Option<String> {
        let node = self.shared.node.as_ref()?;
        let overdue = node.loading.overdue(
            std::time::Instant::now(),
            crate::nodes::holdings::LOAD_OVERDUE,
        );
        (!overdue.is_empty()).then(|| crate::nodes::report::ranges(&overdue))
    }

    fn healthz(&self, req: &Request<RequestBody>) -> Result<Resp, ApiError> {
        get_only(req)?;
        let store = self.handle.store_kind();
        let (status, health) = if self.shared.is_draining() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                respond::Health {
                    status: "draining",
                    reason: Some("the server is shutting down".into()),
                    shards: None,
                    store: None,
                    partitions: None,
                    partitions_not_loaded: None,
                },
            )
        } else if !self.handle.failed_shards().is_empty() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                respond::Health {
                    status: "unavailable",
                    reason: Some(format!(
                        "shards {:?} panicked and answer nothing; restart the process",
                        self.handle.failed_shards()
                    )),
                    shards: None,
                    store: Some(store),
                    partitions: self.owned(),
                    partitions_not_loaded: None,
                },
            )
        } else if !self.handle.store_healthy() {
            let states = self.handle.store_states();
            (
                StatusCode::SERVICE_UNAVAILABLE,
                respond::Health {
                    status: "unavailable",
                    reason: Some(format!(
                        "the {store} store is not ready on every shard: {states:?}"
                    )),
                    shards: None,
                    store: Some(store),
                    partitions: self.owned(),
                    partitions_not_loaded: None,
                },
            )
        } else if let Some(overdue) = self.load_overdue() {
            // Still 200: the node serves its other partitions, and a restart would not load
            // these sooner; the status and the ranges are for the alert.
            (
                StatusCode::OK,
                respond::Health {
                    status: "degraded",
                    reason: Some(
                        "partitions held for over 5 s are not loaded: their timers do not fire"
                            .into(),
                    ),
                    shards: Some(self.handle.shards()),
                    store: Some(store),
                    partitions: self.owned(),
                    partitions_not_loaded: Some(overdue),
                },
            )
        } else {
            (
                StatusCode::OK,
                respond::Health {
                    status: "ok",
                    reason: None,
                    shards: Some(self.handle.shards()),
                    store: Some(store),
                    partitions: self.owned(),
                    partitions_not_loaded: None,
                },
            )
        };
        Ok(respond::json_of(status, &health))
    }

    /// Schedules one registration (with its callback's delivery metadata, checked against
    /// the tenant's allow-list). The tenant's quota is the shard's to enforce: a new key past
    /// it is refused there (`quota_exceeded`), a replacement never is.
    pub async fn schedule(
        &self,
        tenant: &str,
        key: &str,
        reg: &Registration<'_>,
    ) -> Result<Scheduled, ApiError> {
        let meta = self.meta_for(tenant, reg)?;
        self.handle
            .schedule_guarded(
                tenant,
                key,
                reg.deadline,
                reg.payload,
                &meta,
                None,
                reg.terms,
            )
            .await
            .map_err(ApiError::from)
    }

    /// Reads the whole body, refusing one over `limit` bytes (413) or slower than the body
    /// timeout (408).
    pub(super) async fn read_body(
        &self,
        req: Request<RequestBody>,
        limit: usize,
    ) -> Result<Bytes, ApiError> {
        let (parts, body) = req.into_parts();
        let timeout_ms = self.shared.config.body_timeout_ms;
        super::gather::read_whole(&parts.headers, body, limit, timeout_ms).await
    }
}

/// A DELETE's `if_version=V`, if given; any other parameter, or this one twice, is refused
/// (`query::pairs`).
fn if_version_in(query: Option<&str>) -> Result<Option<u64>, ApiError> {
    let pairs = super::query::pairs(query, &["if_version"])?;
    pairs.first().map(|(_, v)| if_version_of(v)).transpose()
}

/// A PUT's query: none. Its conditions and terms are fields of its body.
fn no_query(query: Option<&str>) -> Result<Option<u64>, ApiError> {
    super::query::pairs(query, &[]).map_err(|e| match e {
        ApiError::InvalidField(m) => ApiError::InvalidField(format!(
            "{m}: a PUT takes its conditions and terms (if, if_version, debounce) in its body"
        )),
        other => other,
    })?;
    Ok(None)
}

fn not_pending(tenant: &str, key: &str) -> ApiError {
    ApiError::NotFound(format!(
        "no timer is pending for tenant {tenant:?} and key {key:?} (unknown, fired or cancelled)"
    ))
}

pub(super) fn get_only(req: &Request<RequestBody>) -> Result<(), ApiError> {
    if req.method() == Method::GET {
        Ok(())
    } else {
        Err(ApiError::MethodNotAllowed {
            method: req.method().to_string(),
            allow: "GET",
        })
    }
}
