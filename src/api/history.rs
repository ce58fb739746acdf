//! `GET /v1/history/{tenant}?key=K&after=CURSOR&limit=N`: the tenant's recent fires and what
//! became of their deliveries, newest first (`crate::history`; `docs/API.md`). Admitted as the
//! tenant's other routes are (its token); `501 not_implemented` where no history is kept (the
//! Redis store, or `history_retention_s = 0`).

use super::error::ApiError;
use super::respond::{self, Resp};
use super::routes::get_only;
use super::state::App;
use super::unread::RequestBody;
use crate::error::{validate_name, NameKind};
use crate::history::Entry;
use hyper::{Request, StatusCode};
use serde::Serialize;

/// Entries a page holds when the request names no limit, and the most it may name.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;

/// A history request's query, checked.
#[derive(Debug, PartialEq, Eq)]
pub struct HistoryQuery {
    pub key: Option<String>,
    pub after: Option<u64>,
    pub limit: usize,
}

impl HistoryQuery {
    pub fn parse(query: Option<&str>) -> Result<HistoryQuery, ApiError> {
        let mut q = HistoryQuery {
            key: None,
            after: None,
            limit: DEFAULT_LIMIT,
        };
        for (name, v) in super::query::pairs(query, &["key", "after", "limit"])? {
            match name {
                "limit" => {
                    q.limit = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            ApiError::InvalidField(format!("limit must be 1 to {MAX_LIMIT}"))
                        })?;
                }
                "after" => {
                    let cursor = v.parse::<u64>().ok().filter(|n| *n > 0);
                    q.after = Some(cursor.ok_or_else(|| {
                        ApiError::InvalidField(
                            "after must be the `next` of an earlier page of the history".into(),
                        )
                    })?);
                }
                _ => {
                    let key = super::segment::decoded(v);
                    validate_name(NameKind::Key, &key)?;
                    q.key = Some(key.into_owned());
                }
            }
        }
        Ok(q)
    }
}

#[derive(Serialize)]
struct HistoryBody<'a> {
    entries: &'a [Entry],
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

impl App {
    /// `GET /v1/history/{tenant}`.
    pub(super) fn history(
        &self,
        tenant: &str,
        req: &Request<RequestBody>,
    ) -> Result<Resp, ApiError> {
        get_only(req)?;
        self.check(tenant, req)?;
        let q = HistoryQuery::parse(req.uri().query())?;
        let Some(history) = self.handle.history() else {
            return Err(ApiError::NotImplemented(not_kept(
                self.handle.store_kind(),
                self.shared.config.history_retention_s,
            )));
        };
        let page = history.page(tenant, q.key.as_deref(), q.after, q.limit);
        let body = HistoryBody {
            entries: &page.entries,
            next: page.next.map(|n| n.to_string()),
        };
        Ok(respond::json_of(StatusCode::OK, &body))
    }
}

/// Why no history is kept here.
pub fn not_kept(store: &str, retention_s: u64) -> String {
    if retention_s == 0 {
        "the history of fires is off (history_retention_s = 0)".into()
    } else {
        format!("the {store} store keeps no history of fires; the journal and memory stores do")
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
