//! `GET /cluster`: on a node among others on a Redis Cluster, the live nodes, the partitions
//! each holds the lease of and under which epochs, and this node's own view
//! (`nodes::report`). An operator's route, like `/metrics`: no tenant token, and
//! `metrics_token` when one is set.
//!
//! The handler runs on the shard that took the connection; the read of Redis does not: it
//! asks the node's status service (`nodes::status`) and waits asynchronously, at most
//! `status::ASK_TIMEOUT`, for a read that one request or a thousand share. Past it, or when
//! the read failed, the answer is `503 store_unavailable`. A node not in cluster mode answers
//! `404 not_found`, saying so.

use super::error::ApiError;
use super::respond::{self, Resp};
use super::state::App;
use super::unread::RequestBody;
use crate::nodes::report::Report;
use hyper::{Request, StatusCode};
use std::time::Instant;

impl App {
    pub(super) async fn cluster(&self, req: &Request<RequestBody>) -> Result<Resp, ApiError> {
        self.operator_get(req, "/cluster")?;
        let (Some(status), Some(holdings)) = (&self.shared.status, &self.shared.node) else {
            return Err(ApiError::NotFound(
                "this node is not in cluster mode: /cluster answers on nodes started with --redis redis+cluster://… and --advertise host:port".into(),
            ));
        };
        let snapshot = status.ask().await.map_err(|e| ApiError::StoreUnavailable {
            message: e.to_string(),
            retry_after_s: 1,
        })?;
        let report = Report::of(&snapshot, &status.me, holdings, Instant::now());
        Ok(respond::json_of(StatusCode::OK, &report))
    }
}
