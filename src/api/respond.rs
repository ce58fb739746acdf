//! Building responses: JSON bodies with their headers, and the error body with the extra
//! headers some statuses carry (`Retry-After`, `WWW-Authenticate`, `Allow`).

use super::error::ApiError;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};

pub type Resp = Response<Full<Bytes>>;

pub fn with_body(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    with_body(status, "application/json", body)
}

pub fn empty(status: StatusCode) -> Resp {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    r
}

pub fn error(e: &ApiError) -> Resp {
    let mut r = json(e.status(), e.body());
    let h = r.headers_mut();
    match e {
        ApiError::Unauthorized(_) => {
            h.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        ApiError::MethodNotAllowed { allow, .. } => {
            h.insert(ALLOW, HeaderValue::from_static(allow));
        }
        ApiError::Overloaded(_) | ApiError::CapacityExceeded(_) | ApiError::ShuttingDown => {
            h.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        ApiError::StoreUnavailable { retry_after_s, .. } => {
            h.insert(RETRY_AFTER, HeaderValue::from((*retry_after_s).max(1)));
        }
        _ => {}
    }
    r
}

/// The JSON text of a payload as stored: the client's JSON, or `null` when none was given.
pub fn payload_text(p: &[u8]) -> &str {
    match std::str::from_utf8(p) {
        Ok(s) if !s.is_empty() => s,
        _ => "null",
    }
}
