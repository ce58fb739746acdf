//! `GET /console` and its assets: the operator console, a page of plain HTML, CSS and
//! JavaScript compiled into the binary (`console/`). The page holds no power of its own: it
//! asks for a token and makes every request through the public API with it (`/metrics` for
//! the overview and the tenants, `/v1/dead/{tenant}` for dead letters, a tenant's timers,
//! schedules and queue under `/v1/`), so it can do nothing its token's
//! client cannot. Every answer here, an error included, carries headers that keep the page
//! from running inline script or style, from being framed, and from leaking its URL.

use super::error::ApiError;
use super::respond::{self, Resp};
use super::unread::RequestBody;
use hyper::header::{
    HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use hyper::{Method, Request, StatusCode};

/// Scripts, styles and requests from this origin only; nothing inline, no frames, no forms
/// posted anywhere.
pub const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The files under `/console/`, by name: content type and bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("console/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("console/console.js"),
    ),
    (
        "history.html",
        "text/html; charset=utf-8",
        include_bytes!("console/history.html"),
    ),
    (
        "history.js",
        "text/javascript; charset=utf-8",
        include_bytes!("console/history.js"),
    ),
    (
        "metrics.js",
        "text/javascript; charset=utf-8",
        include_bytes!("console/metrics.js"),
    ),
    (
        "tenants.js",
        "text/javascript; charset=utf-8",
        include_bytes!("console/tenants.js"),
    ),
    (
        "tenant.js",
        "text/javascript; charset=utf-8",
        include_bytes!("console/tenant.js"),
    ),
];

const INDEX: &[u8] = include_bytes!("console/index.html");

/// Whether `path` is the console's: `/console` or under `/console/`.
pub fn is_console(path: &str) -> bool {
    path == "/console" || path.starts_with("/console/")
}

/// The asset `path` names (`/console` and `/console/` are the page itself), or `None`.
pub fn asset(path: &str) -> Option<(&'static str, &'static [u8])> {
    let rest = path.strip_prefix("/console")?;
    match rest {
        "" | "/" => Some(("text/html; charset=utf-8", INDEX)),
        _ => {
            let name = rest.strip_prefix('/')?;
            ASSETS
                .iter()
                .find(|(n, ..)| *n == name)
                .map(|&(_, ty, bytes)| (ty, bytes))
        }
    }
}

/// Answers `path` (under `/console`): the asset, `404` for a name that is none, `405` for a
/// method other than GET; always with the console's headers.
pub fn serve(req: &Request<RequestBody>, path: &str) -> Resp {
    let answer = if req.method() == Method::GET {
        asset(path).ok_or_else(|| ApiError::NotFound(format!("no console asset at {path:?}")))
    } else {
        Err(ApiError::MethodNotAllowed {
            method: req.method().to_string(),
            allow: "GET",
        })
    };
    let mut resp = match answer {
        Ok((ty, bytes)) => respond::with_body(StatusCode::OK, ty, bytes),
        Err(e) => respond::error(&e),
    };
    let h = resp.headers_mut();
    let fixed: [(HeaderName, &'static str); 5] = [
        (CONTENT_SECURITY_POLICY, POLICY),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (REFERRER_POLICY, "no-referrer"),
        (X_FRAME_OPTIONS, "DENY"),
        (CACHE_CONTROL, "no-cache"),
    ];
    for (name, value) in fixed {
        h.insert(name, HeaderValue::from_static(value));
    }
    resp
}

#[cfg(test)]
#[path = "console_tests.rs"]
mod tests;
