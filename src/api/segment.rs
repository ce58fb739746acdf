//! A tenant or key as the path (or a query value) carries it, percent-decoded (RFC 3986) for
//! the name checks that follow; shared by the routes and the dead-letter list's `after`.
//!
//! Invariant: decoding happens once, before the check, and what it decodes to is checked like
//! any name (`crate::error::validate_name`): a decoded `/`, a dot segment however spelled
//! (`%2e%2e`) and bytes that are not UTF-8 never become a name.
//!
//! Cost: one `memchr` for `%` per segment; a decode and a copy only when there is one.

use std::borrow::Cow;

/// A path segment or query value percent-decoded (RFC 3986), for the name checks that follow:
/// clients encode characters the names allow (`encodeURIComponent` encodes `:`). What it
/// decodes to is checked as sent would be, so a decoded `/` or a dot segment (`%2e%2e`) is
/// refused there; bytes that do not decode to UTF-8 are left encoded, and refused for their
/// `%`. Cost: one scan for `%` (`memchr`); a decode and a copy only when there is one.
pub fn decoded(segment: &str) -> Cow<'_, str> {
    if !segment.contains('%') {
        return Cow::Borrowed(segment);
    }
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .unwrap_or(Cow::Borrowed(segment))
}
