//! Request bodies: parsing and validation of the JSON the API accepts, as pure functions of
//! the bytes and the server's clock (so they can be property-tested without a socket).
//!
//! A payload is kept as the JSON text the client sent (`RawValue`), so it comes back byte for
//! byte and its size is measured as sent. A batch body is split into its items by `scan.rs`;
//! the items are parsed here one by one, so that one bad item fails alone.

use super::error::ApiError;
use crate::engine::{Condition, Terms, MAX_PAYLOAD};
use crate::units::{UtcMicros, TEN_YEARS_US};
use serde::de::{Deserializer, IgnoredAny};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Number;
use std::borrow::Cow;

/// Most timers in one batch (docs/API.md).
pub const MAX_BATCH_ITEMS: usize = 10_000;

/// One validated registration: when it fires, the payload's JSON text (empty for none), and
/// the callback and retry fields as given (checked against the tenant's settings later).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration<'a> {
    pub deadline: UtcMicros,
    pub payload: &'a [u8],
    pub callback: Option<String>,
    pub retry: Option<RetryBody>,
    /// `"if"`, `"if_version"` (and later fields that ask more than an upsert).
    pub terms: Terms,
}

/// `"callback": {"url": "https://…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallbackBody {
    pub url: String,
}

/// `"retry": {"max_attempts", "base_delay_ms", "max_delay_ms"}`, each optional (the tenant's
/// defaults fill the gaps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryBody {
    #[serde(default, deserialize_with = "present_whole")]
    pub max_attempts: Option<u64>,
    #[serde(default, deserialize_with = "present_whole")]
    pub base_delay_ms: Option<u64>,
    #[serde(default, deserialize_with = "present_whole")]
    pub max_delay_ms: Option<u64>,
}

/// A whole number, written as JSON may write one: `1000`, or `1000.0` or `1e3` (JSON Schema's
/// `integer`, which the document gives these fields, counts them all); a fraction, a negative
/// number or one past `u64` is refused (`invalid_field`).
fn present_whole<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let n = Number::deserialize(d)?;
    match whole_u64(&n) {
        Some(u) => Ok(Some(u)),
        None => Err(serde::de::Error::custom(format_args!(
            "invalid value: {n}, expected a whole number from 0"
        ))),
    }
}

/// `n` as a whole number from 0, however JSON wrote it (`1000`, `1000.0`, `1e3`); `None` for a
/// fraction, a negative number or one past `u64`.
fn whole_u64(n: &Number) -> Option<u64> {
    if let Some(u) = n.as_u64() {
        return Some(u);
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && (0.0..u64::MAX as f64).contains(&f) => Some(f as u64),
        _ => None,
    }
}

/// An optional field's value when it is given: `null` is not one (only a payload may be
/// `null`), so `"retry": null` is refused as `invalid_field`, as the document's types say,
/// not taken for a field left out.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBody<'a> {
    #[serde(default, deserialize_with = "present")]
    fire_at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    fire_at_ms: Option<Number>,
    #[serde(default, deserialize_with = "present")]
    delay_ms: Option<Number>,
    #[serde(default, borrow)]
    payload: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present")]
    callback: Option<CallbackBody>,
    #[serde(default, deserialize_with = "present")]
    retry: Option<RetryBody>,
    #[serde(default, borrow, rename = "if", deserialize_with = "present")]
    cond: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    if_version: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    debounce: Option<&'a RawValue>,
}

/// The most bytes of JSON one batch item may take: its payload at most [`MAX_PAYLOAD`], and
/// room to spare for its key, callback, retry policy and deadline. An item past it is refused
/// before it is parsed.
pub const MAX_ITEM_BYTES: usize = 4 * MAX_PAYLOAD;

/// The refusal of `what` (an item), longer than [`MAX_ITEM_BYTES`].
pub fn item_too_large(what: &str) -> ApiError {
    ApiError::PayloadTooLarge(format!(
        "{what} is longer than {MAX_ITEM_BYTES} bytes of JSON, more than any valid item needs (its payload may take {MAX_PAYLOAD})"
    ))
}

/// An item's key, when it cannot be read whole.
#[derive(Deserialize)]
struct KeyOnly<'a> {
    #[serde(default, borrow)]
    key: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemBody<'a> {
    key: String,
    #[serde(default, deserialize_with = "present")]
    fire_at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    fire_at_ms: Option<Number>,
    #[serde(default, deserialize_with = "present")]
    delay_ms: Option<Number>,
    #[serde(default, borrow)]
    payload: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present")]
    callback: Option<CallbackBody>,
    #[serde(default, deserialize_with = "present")]
    retry: Option<RetryBody>,
    #[serde(default, borrow, rename = "if", deserialize_with = "present")]
    cond: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    if_version: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    debounce: Option<&'a RawValue>,
}

/// The error the API gives for serde's `e`: syntax for `malformed_json`, the wrong shape or
/// type for `invalid_field`; its message is `message` (serde's, without its position).
pub(super) fn json_error_at(e: &serde_json::Error, message: String) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => ApiError::InvalidField(message),
        Category::Syntax | Category::Eof | Category::Io => ApiError::MalformedJson(message),
    }
}

fn json_error(e: serde_json::Error) -> ApiError {
    json_error_at(&e, e.to_string())
}

/// The refusal of `what`, well-formed JSON but not an object.
pub(super) fn not_an_object(what: &str) -> ApiError {
    ApiError::InvalidField(format!("{what} must be a JSON object"))
}

/// serde also reads a struct from a JSON array; the API takes objects only.
fn expect_object(bytes: &[u8], what: &str) -> Result<(), ApiError> {
    if bytes.trim_ascii_start().first() == Some(&b'{') {
        return Ok(());
    }
    match serde_json::from_slice::<IgnoredAny>(bytes) {
        Ok(_) => Err(not_an_object(what)),
        Err(e) => Err(json_error(e)),
    }
}

/// Parses the body of `PUT /v1/timers/{tenant}/{key}`.
pub fn parse_put(body: &[u8], now: UtcMicros) -> Result<Registration<'_>, ApiError> {
    expect_object(body, "the body")?;
    let b: PutBody = serde_json::from_slice(body).map_err(json_error)?;
    let terms = terms_of(b.cond, b.if_version, b.debounce)?;
    let deadline = resolve_deadline(b.fire_at.as_deref(), b.fire_at_ms, b.delay_ms, now)?;
    Ok(Registration {
        deadline,
        payload: payload_bytes(b.payload)?,
        callback: b.callback.map(|c| c.url),
        retry: b.retry,
        terms,
    })
}

/// Parses one batch item. The key (when one could be read) comes back even on error.
pub fn parse_item(
    item: &RawValue,
    now: UtcMicros,
) -> Result<(String, Registration<'_>), (Option<String>, ApiError)> {
    if item.get().len() > MAX_ITEM_BYTES {
        return Err((None, item_too_large("the item")));
    }
    let parsed = expect_object(item.get().as_bytes(), "a batch item")
        .and_then(|()| serde_json::from_str::<ItemBody>(item.get()).map_err(json_error));
    let b = match parsed {
        Ok(b) => b,
        Err(e) => {
            // The key alone, every other field skipped: no tree of the item is built.
            let key = serde_json::from_str::<KeyOnly>(item.get())
                .ok()
                .and_then(|k| k.key)
                .map(Cow::into_owned);
            return Err((key, e));
        }
    };
    let reg = terms_of(b.cond, b.if_version, b.debounce).and_then(|terms| {
        let deadline = resolve_deadline(b.fire_at.as_deref(), b.fire_at_ms, b.delay_ms, now)?;
        Ok(Registration {
            deadline,
            payload: payload_bytes(b.payload)?,
            callback: b.callback.clone().map(|c| c.url),
            retry: b.retry,
            terms,
        })
    });
    match reg {
        Ok(r) => Ok((b.key, r)),
        Err(e) => Err((Some(b.key), e)),
    }
}

/// `"debounce": {"max_wait_ms": N}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DebounceBody<'a> {
    #[serde(borrow)]
    max_wait_ms: &'a RawValue,
}

/// The terms of a write: `"if": "absent"` or `"if_version": V` (a whole number from 1), not
/// both, and `"debounce": {"max_wait_ms": N}` (a whole number from 0 to 10 years). Each
/// refusal is `invalid_field` and names the field.
fn terms_of(
    cond: Option<&RawValue>,
    if_version: Option<&RawValue>,
    debounce: Option<&RawValue>,
) -> Result<Terms, ApiError> {
    let max_wait_us = debounce.map(max_wait_of).transpose()?;
    let cond = match (cond, if_version) {
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(ApiError::InvalidField(
                "give at most one of \"if\" and \"if_version\"".into(),
            ))
        }
        (Some(c), None) => match serde_json::from_str::<&str>(c.get()) {
            Ok("absent") => Some(Condition::Absent),
            _ => {
                return Err(ApiError::InvalidField(format!(
                    "\"if\" must be \"absent\", not {}",
                    c.get()
                )))
            }
        },
        (None, Some(v)) => Some(Condition::Version(if_version_of(v.get())?)),
    };
    Ok(Terms { cond, max_wait_us })
}

/// `debounce`'s `max_wait_ms`, in µs.
fn max_wait_of(debounce: &RawValue) -> Result<u64, ApiError> {
    let bad = || {
        ApiError::InvalidField(format!(
            "\"debounce\" must be {{\"max_wait_ms\": N}}, N a whole number of milliseconds from 0 to 10 years (315,360,000,000), not {}",
            debounce.get()
        ))
    };
    let b: DebounceBody = serde_json::from_str(debounce.get()).map_err(|_| bad())?;
    let ms = serde_json::from_str::<Number>(b.max_wait_ms.get()).ok();
    match ms.as_ref().and_then(whole_u64) {
        Some(ms) if ms <= TEN_YEARS_US / 1_000 => Ok(ms * 1_000),
        _ => Err(bad()),
    }
}

/// A version a condition names (`if_version` in a body or a query): a whole number from 1
/// (versions are positive), written as JSON may write one (`7`, `7.0`: JSON Schema's
/// `integer`), else `invalid_field` naming it.
pub fn if_version_of(text: &str) -> Result<u64, ApiError> {
    let number = serde_json::from_str::<Number>(text.trim()).ok();
    match number.as_ref().and_then(whole_u64) {
        Some(v) if v > 0 => Ok(v),
        _ => Err(ApiError::InvalidField(format!(
            "\"if_version\" must be a version: a whole number from 1, not {text}"
        ))),
    }
}

fn payload_bytes(p: Option<&RawValue>) -> Result<&[u8], ApiError> {
    let bytes = p.map(|p| p.get().as_bytes()).unwrap_or_default();
    if bytes.len() > MAX_PAYLOAD {
        return Err(ApiError::PayloadTooLarge(format!(
            "payload is {} bytes of JSON; the limit is {MAX_PAYLOAD}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Turns the one deadline field given into an absolute UTC instant, checking its range:
/// `fire_at`/`fire_at_ms` from the epoch to now + 10 years, `delay_ms` from 0 to 10 years.
pub fn resolve_deadline(
    fire_at: Option<&str>,
    fire_at_ms: Option<Number>,
    delay_ms: Option<Number>,
    now: UtcMicros,
) -> Result<UtcMicros, ApiError> {
    let latest = i128::from(now.0) + i128::from(TEN_YEARS_US);
    let in_range = |us: i128, what: &str| {
        if (0..=latest).contains(&us) {
            Ok(UtcMicros(us as u64))
        } else {
            Err(ApiError::DeadlineOutOfRange(format!(
                "{what} must lie between the Unix epoch and now + 10 years (3,650 days)"
            )))
        }
    };
    match (fire_at, fire_at_ms, delay_ms) {
        (Some(s), None, None) => {
            let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .map_err(|e| {
                    ApiError::InvalidDeadline(format!(
                        "fire_at {s:?} is not an RFC 3339 date-time ({e}); \
                         for example \"2030-01-31T10:15:00.000Z\""
                    ))
                })?;
            // div_euclid floors, so an instant just before the epoch stays negative.
            in_range(t.unix_timestamp_nanos().div_euclid(1_000), "fire_at")
        }
        (None, Some(n), None) => {
            in_range(whole(&n, "fire_at_ms")?.saturating_mul(1_000), "fire_at_ms")
        }
        (None, None, Some(n)) => {
            let ms = whole(&n, "delay_ms")?;
            if !(0..=i128::from(TEN_YEARS_US / 1_000)).contains(&ms) {
                return Err(ApiError::DeadlineOutOfRange(
                    "delay_ms must lie between 0 and 10 years (315,360,000,000 ms)".into(),
                ));
            }
            Ok(now.saturating_add_micros(ms as u64 * 1_000))
        }
        (None, None, None) => Err(ApiError::InvalidDeadline(
            "a deadline is required: one of \"fire_at\", \"fire_at_ms\" or \"delay_ms\"".into(),
        )),
        _ => Err(ApiError::InvalidDeadline(
            "give exactly one of \"fire_at\", \"fire_at_ms\" and \"delay_ms\"".into(),
        )),
    }
}

/// A JSON number as a whole number (integral floats such as `1e3` count; huge ones saturate).
fn whole(n: &Number, field: &str) -> Result<i128, ApiError> {
    if let Some(i) = n.as_i64() {
        return Ok(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Ok(i128::from(u));
    }
    match n.as_f64() {
        Some(f) if f.is_finite() && f.fract() == 0.0 => Ok(f as i128),
        _ => Err(ApiError::InvalidDeadline(format!(
            "{field} must be a whole number of milliseconds, not {n}"
        ))),
    }
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
