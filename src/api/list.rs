//! `GET /v1/timers/{tenant}?prefix=P&after=KEY&limit=N[&payloads=true]`: the tenant's pending
//! timers whose key starts with `P`, by key, a page at a time, paged as the dead-letter list
//! is (`after` the last key of the page before, `limit` at most): 200
//! `{"timers": [{"key", "fire_at_us", "version"[, "payload"]}], "next": "KEY"}`, `next` left
//! out on the last page. On a node among others, every live node is asked for the same page
//! at once and the pages merged by key, as the dead-letter list is (`webhooks.rs`): each
//! node's first `limit` are all it can give to the first `limit` of the whole.

use super::error::ApiError;
use super::forward;
use super::forward::{Peers, COVERED};
use super::respond::{self, Resp};
use super::segment::decoded;
use super::state::App;
use super::unread::RequestBody;
use crate::engine::{Handle, ListQuery, TimerPage};
use crate::error::{validate_name, NameKind, MAX_NAME_LEN};
use crate::partition::{PartitionSet, PARTITIONS};
use bytes::Bytes;
use hyper::header::{HeaderValue, AUTHORIZATION};
use hyper::{Method, Request, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::rc::Rc;
use std::sync::Arc;

/// Timers listed when the request names no limit, and the most it may name.
const DEFAULT_LIMIT: usize = 1_000;
const MAX_LIMIT: usize = 10_000;
/// The most a page with payloads may list: 1,000 payloads of 64 KiB are 64 MiB already.
const MAX_LIMIT_WITH_PAYLOADS: usize = 1_000;

/// One listed timer, as the page shows it (and as a peer's page is read back).
#[derive(Serialize, Deserialize)]
pub(super) struct Row {
    pub(super) key: String,
    fire_at_us: u64,
    pub(super) version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload: Option<Box<RawValue>>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct Page {
    pub(super) timers: Vec<Row>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) next: Option<String>,
}

/// What every other live node answered to the same `GET`, each asked by a task of its own
/// on this shard, so that the asks go out together.
pub(super) type Asks = Vec<glommio::Task<Result<forward::Answer, forward::ForwardError>>>;

impl App {
    /// Asks every other live node for the same `GET` as `req` (a gathered list: the timers by
    /// prefix, the dead letters), at once; none on a lone node, or for a request that came
    /// forwarded (it is answered from this node's partitions alone).
    pub(super) fn ask_others(&self, req: &Request<RequestBody>) -> (Vec<Arc<str>>, Asks) {
        let others = forward::view(self.shared.node.as_ref(), req.headers())
            .map(|v| v.others())
            .unwrap_or_default();
        let auth = req.headers().get(AUTHORIZATION).cloned();
        let path = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
        let asks = ask(&self.peers, &others, &path, auth.as_ref());
        (others, asks)
    }

    /// `GET /v1/timers/{tenant}` (admission checked by the caller). A forwarded one's answer
    /// says which partitions it listed whole ([`COVERED`]).
    pub(super) async fn list_timers(
        &self,
        tenant: &str,
        req: Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        let query = list_query(tenant, req.uri().query())?;
        let (others, asks) = self.ask_others(&req);
        let forwarded = req.headers().contains_key(forward::FORWARDED);
        let (page, covered) = gather_page(&self.handle, query, &others, asks).await?;
        let mut resp = respond::json_of(StatusCode::OK, &page);
        if forwarded {
            let ranges = crate::nodes::report::ranges(&covered.members());
            if let Ok(v) = HeaderValue::from_str(&ranges) {
                resp.headers_mut().insert(COVERED, v);
            }
        }
        Ok(resp)
    }
}

/// Asks each of `others` for `GET path`, at once, each by a task of its own.
pub(super) fn ask(
    peers: &Rc<Peers>,
    others: &[Arc<str>],
    path: &str,
    auth: Option<&HeaderValue>,
) -> Asks {
    others
        .iter()
        .map(|peer| {
            let (peers, peer, path, auth) =
                (peers.clone(), peer.clone(), path.to_owned(), auth.cloned());
            glommio::spawn_local(async move {
                let out = forward::Outgoing {
                    method: Method::GET,
                    path: &path,
                    auth: auth.as_ref(),
                    body: Bytes::new(),
                };
                peers.forward(&peer, out).await
            })
        })
        .collect()
}

/// This node's page of `query` merged by key with what `others` answered to `asks`, and
/// the partitions listed whole, this node's and the others' together. A node that gives
/// no page fails it (`503 peer_unavailable`).
pub(super) async fn gather_page(
    handle: &Handle,
    query: ListQuery,
    others: &[Arc<str>],
    asks: Asks,
) -> Result<(Page, PartitionSet), ApiError> {
    let limit = query.limit;
    let mine = handle.list_timers_async(query).await?;
    let mut covered = mine.covered;
    let mut page = Page {
        timers: rows(&mine),
        next: mine.next,
    };
    for (peer, ask) in others.iter().zip(asks) {
        let answer = ask.await?;
        let unusable = |why: String| {
            ApiError::PeerUnavailable(format!(
                "the node {peer} did not give its timers ({why}); the list needs every node's"
            ))
        };
        if answer.status != StatusCode::OK {
            return Err(unusable(format!("it answered {}", answer.status)));
        }
        let theirs: Page =
            serde_json::from_slice(&answer.body).map_err(|e| unusable(e.to_string()))?;
        if let Some(set) = answer.header(COVERED).and_then(covered_of) {
            covered = covered.union(&set);
        }
        let more = page.next.is_some() || theirs.next.is_some();
        page.timers.extend(theirs.timers);
        page.timers.sort_by(|a, b| a.key.cmp(&b.key));
        page.timers.dedup_by(|a, b| a.key == b.key);
        page.next = (more || page.timers.len() > limit)
            .then(|| {
                page.timers
                    .get(limit.min(page.timers.len()).saturating_sub(1))
            })
            .flatten()
            .map(|r| r.key.clone());
        page.timers.truncate(limit);
    }
    Ok((page, covered))
}

/// A [`COVERED`] header's partitions; `None` when it is not ranges of partitions.
pub(super) fn covered_of(v: &HeaderValue) -> Option<PartitionSet> {
    let mut set = PartitionSet::default();
    for range in v.to_str().ok()?.split(',').filter(|r| !r.is_empty()) {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let (first, last) = (first.parse::<u32>().ok()?, last.parse::<u32>().ok()?);
        if first > last || last >= PARTITIONS {
            return None;
        }
        for p in first..=last {
            set.insert(p);
        }
    }
    Some(set)
}

fn rows(page: &TimerPage) -> Vec<Row> {
    page.timers
        .iter()
        .map(|t| Row {
            key: t.key.clone(),
            fire_at_us: t.fire_at_us,
            version: t.version,
            payload: (!t.payload.is_empty()).then(|| respond::payload(&t.payload).to_owned()),
        })
        .collect()
}

/// A `prefix=` parameter's value, percent-decoded: what can begin a key (a listing's, a
/// bulk cancel's), else a refusal that names `prefix`.
pub(super) fn prefix_of(v: &str) -> Result<String, ApiError> {
    let v = decoded(v);
    let bad = v.len() > MAX_NAME_LEN
        || v.chars()
            .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')));
    if bad {
        return Err(ApiError::InvalidField(format!(
            "prefix {v:?} cannot begin a key: keys are 1 to {MAX_NAME_LEN} bytes of [A-Za-z0-9._:-]"
        )));
    }
    Ok(v.into_owned())
}

/// `prefix`, `after`, `limit` and `payloads` of a listing; each refusal names its parameter.
fn list_query(tenant: &str, query: Option<&str>) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery {
        tenant: tenant.to_string(),
        prefix: String::new(),
        after: None,
        limit: DEFAULT_LIMIT,
        payloads: false,
    };
    let mut limit = None;
    let known = ["prefix", "after", "limit", "payloads"];
    for (name, v) in super::query::pairs(query, &known)? {
        match name {
            "prefix" => q.prefix = prefix_of(v)?,
            "after" => {
                let v = decoded(v);
                validate_name(NameKind::Key, &v)
                    .map_err(|e| ApiError::InvalidField(format!("after: {e}")))?;
                q.after = Some(v.into_owned());
            }
            "limit" => {
                let n = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::InvalidField(format!(
                            "limit must be a whole number from 1 to {MAX_LIMIT}, not {v:?}"
                        ))
                    })?;
                limit = Some(n);
            }
            // `payloads`, the last that `pairs` lets through.
            _ => {
                q.payloads = match v {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(ApiError::InvalidField(format!(
                            "payloads must be true or false, not {v:?}"
                        )))
                    }
                };
            }
        }
    }
    let most = if q.payloads {
        MAX_LIMIT_WITH_PAYLOADS
    } else {
        MAX_LIMIT
    };
    q.limit = limit.unwrap_or(DEFAULT_LIMIT).min(most);
    if limit.is_some_and(|n| n > most) {
        return Err(ApiError::InvalidField(format!(
            "limit must be 1 to {most} with payloads=true"
        )));
    }
    Ok(q)
}

#[cfg(test)]
#[path = "list_tests.rs"]
mod tests;
