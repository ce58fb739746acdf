//! The parameters of a query string, for the routes that take some (the timer list, a bulk
//! cancel, the dead-letter list): `name=value` pairs split on `&`, empty pairs skipped.
//!
//! Invariant: each name the route knows, at most once; anything else is `400 invalid_field`
//! naming it. A name given twice is refused as a body's repeated field is: which of two
//! prefixes a bulk cancel should cancel, or which of two limits a page should hold, is not for
//! the server to guess, and taking the last would cancel or list what the caller may not have
//! meant.
//!
//! Cost: one pass over the query, each name compared with the route's few.

use super::error::ApiError;

/// The `(name, value)` pairs of `query`, in order, each name one of `known` and none twice.
/// A value is as sent (still percent-encoded).
pub fn pairs<'q>(
    query: Option<&'q str>,
    known: &[&str],
) -> Result<Vec<(&'q str, &'q str)>, ApiError> {
    let mut seen = vec![false; known.len()];
    let mut out = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let found = pair
            .split_once('=')
            .and_then(|(name, v)| Some((known.iter().position(|k| *k == name)?, name, v)));
        let Some((i, name, v)) = found else {
            return Err(ApiError::InvalidField(format!(
                "unknown query parameter {pair:?}; expected {}",
                listed(known)
            )));
        };
        if std::mem::replace(&mut seen[i], true) {
            return Err(ApiError::InvalidField(format!(
                "query parameter {name} given twice; give it once"
            )));
        }
        out.push((name, v));
    }
    Ok(out)
}

/// `a, b and c`.
fn listed(names: &[&str]) -> String {
    match names.split_last() {
        None => "none".to_string(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
#[path = "query_tests.rs"]
mod tests;
