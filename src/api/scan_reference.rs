//! serde_json's own reading of a batch body, which the scan (`scan.rs`) is held to by its
//! tests and by the fuzz target `api_body`: a struct with one field, `timers`, read by
//! serde's derive from the whole body at once. Not part of the service: the tests and the
//! fuzz target include it by path, beside their own `ApiError` and `MAX_BATCH_ITEMS`.

use super::{ApiError, MAX_BATCH_ITEMS};
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody<'a> {
    #[serde(borrow)]
    timers: Items<'a>,
}

/// The batch's items, or how many there were when there were too many (not kept).
struct Items<'a>(Result<Vec<&'a RawValue>, usize>);

impl<'de: 'a, 'a> Deserialize<'de> for Items<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Items<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of timers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items<'a>, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = seq.next_element::<&'de RawValue>()? {
                    items.push(v);
                }
                Ok(Items(if items.len() > MAX_BATCH_ITEMS {
                    Err(items.len())
                } else {
                    Ok(items)
                }))
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

/// serde's error as the API words it: syntax for `malformed_json`, the wrong shape or type
/// for `invalid_field`.
fn json_error(e: serde_json::Error) -> ApiError {
    match e.classify() {
        serde_json::error::Category::Data => ApiError::InvalidField(e.to_string()),
        _ => ApiError::MalformedJson(e.to_string()),
    }
}

/// The batch's items, or its refusal, as serde reads the whole body.
pub fn parse_batch(body: &[u8]) -> Result<Vec<&RawValue>, ApiError> {
    let first = body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return match serde_json::from_slice::<IgnoredAny>(body) {
            Ok(_) => Err(ApiError::InvalidField(
                "the body must be a JSON object".into(),
            )),
            Err(e) => Err(json_error(e)),
        };
    }
    let b: BatchBody = serde_json::from_slice(body).map_err(json_error)?;
    match b.timers.0 {
        Ok(items) if items.is_empty() => Err(ApiError::EmptyBatch),
        Ok(items) => Ok(items),
        Err(count) => Err(ApiError::TooManyItems {
            count,
            limit: MAX_BATCH_ITEMS,
        }),
    }
}
