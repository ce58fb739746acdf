//! An answer of another node, `{"<field>":[…]}` as [`super::respond::json_array_of`] writes
//! it, read an element at a time with a look at the task's slice after each: a peer's page
//! of dead letters with their bodies is tens of megabytes, and a sub-batch's results about a
//! megabyte, each one step on the shard that reads it when parsed whole. Whitespace around
//! the elements is let pass; anything else is not such an answer.

use crate::runtime::cooperate::Slice;
use serde_json::value::RawValue;

/// Hands each element of `body`'s array `field` to `each`, in order, a slice at a time; why
/// `body` is not such an answer, or what `each` said of an element.
pub async fn read_array(
    body: &[u8],
    field: &str,
    mut each: impl FnMut(Box<RawValue>) -> Result<(), String>,
) -> Result<(), String> {
    let mut scan = ArrayScan::new(body, field)?;
    let mut slice = Slice::begin();
    while !scan.step(|| slice.is_over(), &mut each)? {
        slice.next().await;
    }
    Ok(())
}

/// The array of an answer, split into its elements.
pub struct ArrayScan<'a> {
    /// What is left after the last element (or the opening), or `None` once it has ended.
    rest: Option<&'a [u8]>,
}

impl<'a> ArrayScan<'a> {
    /// The elements of `body`'s array `field`: `body` must open with `{"<field>":[`.
    pub fn new(body: &'a [u8], field: &str) -> Result<Self, String> {
        let not_it = || format!("not an object of `{field}`");
        let rest = body.trim_ascii();
        let rest = rest
            .strip_prefix(b"{\"")
            .and_then(|r| r.strip_prefix(field.as_bytes()))
            .and_then(|r| r.strip_prefix(b"\":["))
            .ok_or_else(not_it)?;
        let empty = rest.trim_ascii_start().strip_prefix(b"]");
        if empty.is_some_and(|end| end.trim_ascii_start() == b"}") {
            return Ok(ArrayScan { rest: None });
        }
        Ok(ArrayScan { rest: Some(rest) })
    }

    /// Hands elements to `each` until the array ends (`true`) or `over` says the slice is
    /// used up, asked after each element (`false`).
    pub fn step(
        &mut self,
        over: impl Fn() -> bool,
        mut each: impl FnMut(Box<RawValue>) -> Result<(), String>,
    ) -> Result<bool, String> {
        let not_it = || "not an array of JSON values, then `]}`".to_string();
        while let Some(rest) = self.rest {
            let mut values =
                serde_json::Deserializer::from_slice(rest).into_iter::<Box<RawValue>>();
            let value = match values.next() {
                Some(Ok(value)) => value,
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err(not_it()),
            };
            let after = rest.get(values.byte_offset()..).unwrap_or_default();
            each(value)?;
            match after.trim_ascii_start() {
                [b',', more @ ..] => self.rest = Some(more),
                [b']', end @ ..] if end.trim_ascii_start() == b"}" => self.rest = None,
                _ => return Err(not_it()),
            }
            if self.rest.is_some() && over() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
#[path = "array_tests.rs"]
mod tests;
