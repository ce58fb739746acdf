//! Errors the HTTP API answers with, and the one function that maps each to its status.
//!
//! Every error leaves the server as `{"error": {"code": "<snake_case>", "message": "…"}}`.
//! The codes are part of the contract (see the error table in docs/API.md); the messages say what
//! was wrong and how to fix it.

use crate::error::{Error as EngineError, NameKind};
use hyper::StatusCode;
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ApiError {
    #[error("the body is not valid JSON: {0}")]
    MalformedJson(String),
    #[error("{0}")]
    InvalidField(String),
    #[error("{0}")]
    InvalidDeadline(String),
    #[error("{0}")]
    DeadlineOutOfRange(String),
    #[error("{0}")]
    InvalidTenant(String),
    #[error("{0}")]
    InvalidKey(String),
    #[error("a batch needs at least one timer in \"timers\"")]
    EmptyBatch,
    #[error("tenant {0:?} needs \"Authorization: Bearer <token>\" with its token")]
    Unauthorized(String),
    #[error("tenant {0:?} is not configured on this server (add a [tenants.<name>] table, or set open_tenants = true)")]
    UnknownTenant(String),
    #[error("{0} needs \"Authorization: Bearer <token>\" with its token")]
    MetricsUnauthorized(&'static str),
    #[error("tenant {tenant:?} is over its request rate; retry after {retry_after_s} s")]
    RateLimited { tenant: String, retry_after_s: u64 },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    CallbackNotAllowed(String),
    #[error("{0}")]
    TimerPending(String),
    /// `"if": "absent"` met a pending timer: its version and deadline come with the error.
    #[error("{message}")]
    Exists {
        message: String,
        version: u64,
        fire_at_us: u64,
    },
    /// `if_version` met another version: the current one comes with the error.
    #[error("{message}")]
    VersionMismatch { message: String, version: u64 },
    #[error("{method} is not allowed here; allowed: {allow}")]
    MethodNotAllowed { method: String, allow: &'static str },
    #[error("the request body did not arrive within {0} ms")]
    RequestTimeout(u64),
    #[error("the body is larger than {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("a batch holds at most {limit} timers, not {count}")]
    TooManyItems { count: usize, limit: usize },
    #[error("tenant {tenant:?} has reached its quota of {limit} pending timers")]
    QuotaExceeded { tenant: String, limit: u64 },
    #[error("tenant {tenant:?} has {limit} receives waiting already (queue_max_waiting); retry, or wait less")]
    TooManyReceives { tenant: String, limit: u32 },
    /// A new recurring schedule past the tenant's `max_schedules`.
    #[error("tenant {tenant:?} has reached its quota of {limit} schedules (max_schedules); delete one first, or replace one under its key")]
    SchedulesExceeded { tenant: String, limit: u64 },
    #[error("{0}")]
    Overloaded(String),
    #[error("{0}")]
    CapacityExceeded(String),
    #[error("{message}")]
    StoreUnavailable { message: String, retry_after_s: u64 },
    #[error("the server is shutting down; retry on another instance or after restart")]
    ShuttingDown,
    /// The request was for a partition another node owns, and that node gave no answer
    /// (`forward::ForwardError`): not reached, too many forwards in flight to it, or past the
    /// deadline.
    #[error("{0}")]
    PeerUnavailable(String),
    #[error("{0}")]
    Internal(String),
    /// A route the store in use does not serve (recurring schedules and the pull queues on
    /// Redis).
    #[error("{0}")]
    NotImplemented(String),
}

impl ApiError {
    /// The single place where an error becomes an HTTP status.
    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            MalformedJson(_)
            | InvalidField(_)
            | InvalidDeadline(_)
            | DeadlineOutOfRange(_)
            | InvalidTenant(_)
            | InvalidKey(_)
            | EmptyBatch
            | CallbackNotAllowed(_) => StatusCode::BAD_REQUEST,
            TimerPending(_) | Exists { .. } | VersionMismatch { .. } => StatusCode::CONFLICT,
            Unauthorized(_) | UnknownTenant(_) | MetricsUnauthorized(_) => StatusCode::UNAUTHORIZED,
            NotFound(_) => StatusCode::NOT_FOUND,
            MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            BodyTooLarge { .. } | PayloadTooLarge(_) | TooManyItems { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            QuotaExceeded { .. }
            | SchedulesExceeded { .. }
            | RateLimited { .. }
            | TooManyReceives { .. } => StatusCode::TOO_MANY_REQUESTS,
            Overloaded(_)
            | CapacityExceeded(_)
            | StoreUnavailable { .. }
            | ShuttingDown
            | PeerUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
        }
    }

    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            MalformedJson(_) => "malformed_json",
            InvalidField(_) => "invalid_field",
            InvalidDeadline(_) => "invalid_deadline",
            DeadlineOutOfRange(_) => "deadline_out_of_range",
            InvalidTenant(_) => "invalid_tenant",
            InvalidKey(_) => "invalid_key",
            EmptyBatch => "empty_batch",
            Unauthorized(_) | MetricsUnauthorized(_) => "unauthorized",
            UnknownTenant(_) => "unknown_tenant",
            RateLimited { .. } => "rate_limited",
            NotFound(_) => "not_found",
            CallbackNotAllowed(_) => "callback_not_allowed",
            TimerPending(_) => "timer_pending",
            Exists { .. } => "exists",
            VersionMismatch { .. } => "version_mismatch",
            MethodNotAllowed { .. } => "method_not_allowed",
            RequestTimeout(_) => "request_timeout",
            BodyTooLarge { .. } => "body_too_large",
            PayloadTooLarge(_) => "payload_too_large",
            TooManyItems { .. } => "too_many_items",
            QuotaExceeded { .. } | SchedulesExceeded { .. } => "quota_exceeded",
            TooManyReceives { .. } => "too_many_receives",
            Overloaded(_) => "overloaded",
            CapacityExceeded(_) => "capacity_exceeded",
            StoreUnavailable { .. } => "store_unavailable",
            ShuttingDown => "shutting_down",
            PeerUnavailable(_) => "peer_unavailable",
            Internal(_) => "internal",
            NotImplemented(_) => "not_implemented",
        }
    }

    /// The pending timer's version and deadline a conflict reports beside its message
    /// (`exists`: both; `version_mismatch`: the version).
    pub fn conflict(&self) -> (Option<u64>, Option<u64>) {
        match self {
            ApiError::Exists {
                version,
                fire_at_us,
                ..
            } => (Some(*version), Some(*fire_at_us)),
            ApiError::VersionMismatch { version, .. } => (Some(*version), None),
            _ => (None, None),
        }
    }

    /// The full error body: `{"error": {"code", "message"}}`, and a conflict's `version` and
    /// `fire_at_us`.
    pub fn body(&self) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Body {
            error: ErrorBody,
        }
        let body = Body {
            error: ErrorBody::of(self),
        };
        // A struct of two strings always serialises; fall back to a fixed body all the same.
        serde_json::to_vec(&body)
            .unwrap_or_else(|_| b"{\"error\":{\"code\":\"internal\"}}".to_vec())
    }
}

/// `{"code", "message"}`: the inside of an error body; a conflict (`409 exists`,
/// `409 version_mismatch`) adds the pending timer's `version` and `fire_at_us`.
#[derive(Serialize)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fire_at_us: Option<u64>,
}

impl ErrorBody {
    pub fn of(e: &ApiError) -> Self {
        let (version, fire_at_us) = e.conflict();
        ErrorBody {
            code: e.code(),
            message: e.to_string(),
            version,
            fire_at_us,
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let msg = e.to_string();
        match e {
            EngineError::EmptyName(kind)
            | EngineError::NameTooLong { kind, .. }
            | EngineError::InvalidName { kind, .. } => match kind {
                NameKind::Tenant => ApiError::InvalidTenant(msg),
                NameKind::Key => ApiError::InvalidKey(msg),
            },
            EngineError::PayloadTooLarge { .. } => ApiError::PayloadTooLarge(msg),
            EngineError::DeadlineOutOfRange { .. } => ApiError::DeadlineOutOfRange(msg),
            EngineError::CapacityExceeded { .. } => ApiError::CapacityExceeded(msg),
            EngineError::RingFull { .. }
            | EngineError::RingShare { .. }
            | EngineError::StoreShare { .. } => ApiError::Overloaded(msg),
            EngineError::ShuttingDown => ApiError::ShuttingDown,
            EngineError::QuotaExceeded { tenant, limit } => {
                ApiError::QuotaExceeded { tenant, limit }
            }
            EngineError::StoreUnavailable { retry_after_s } => ApiError::StoreUnavailable {
                message: msg,
                retry_after_s,
            },
            // Not applied, as a store that cannot acknowledge: the same code and contract.
            EngineError::PartitionNotHeld { .. } => ApiError::StoreUnavailable {
                message: msg,
                retry_after_s: 1,
            },
            EngineError::DeadLetterNotFound { .. } => ApiError::NotFound(msg),
            EngineError::TimerPending { .. } => ApiError::TimerPending(msg),
            EngineError::Exists {
                version,
                fire_at_us,
            } => ApiError::Exists {
                message: msg,
                version,
                fire_at_us,
            },
            EngineError::VersionMismatch { current, .. } => ApiError::VersionMismatch {
                message: msg,
                version: current,
            },
            EngineError::NotPending { .. } => ApiError::NotFound(msg),
            EngineError::Config(_) | EngineError::ShardStart { .. } => ApiError::Internal(msg),
        }
    }
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
