//! `POST /v1/timers/{tenant}`: up to 10,000 registrations, applied in order, one result each.
//!
//! Items are pushed onto their shards' rings in chunks of [`CHUNK`] without waiting, then the
//! chunk's answers are awaited in order; a chunk bounds how much of a ring one batch may fill.
//! Items for the same key go to the same ring, whose order is FIFO, so the later one replaces
//! the earlier. An item fails alone (400, 413, 429, 503); the batch answers 200.

use super::body::{parse_batch, parse_item};
use super::error::ApiError;
use super::routes::App;
use crate::engine::Scheduled;
use crate::error::{validate_name, NameKind};
use crate::quota::QuotaSlot;
use std::fmt::Write;
use std::future::Future;
use std::pin::Pin;

/// Items pushed before their answers are awaited.
const CHUNK: usize = 1024;

type Pending = Pin<Box<dyn Future<Output = crate::Result<Scheduled>> + Send>>;

enum Slot {
    /// Pushed; the answer is awaited with the chunk.
    Waiting {
        key: String,
        fut: Pending,
    },
    Done(String),
}

/// Runs the batch and renders `{"results": [...]}`.
pub async fn run(
    app: &App,
    tenant: &str,
    body: &[u8],
    now: crate::units::UtcMicros,
) -> Result<String, ApiError> {
    let items = parse_batch(body)?;
    let quota = app.handle.quota(tenant);
    let mut out = String::with_capacity(items.len() * 80 + 16);
    out.push_str("{\"results\":[");
    let mut slots: Vec<Slot> = Vec::with_capacity(CHUNK.min(items.len()));
    for (i, item) in items.iter().enumerate() {
        let slot = match parse_item(item, now) {
            Err((key, e)) => Slot::Done(item_error(key.as_deref(), &e)),
            Ok((key, reg)) => match validate_name(NameKind::Key, &key) {
                Err(e) => Slot::Done(item_error(Some(&key), &ApiError::from(e))),
                Ok(()) => {
                    // Items past the quota are refused in item order: take a slot here, and
                    // when none is left, let the earlier items settle first (replacements give
                    // theirs back). Without a slot the shard still takes the item if it
                    // replaces a pending timer, and refuses it otherwise.
                    let mut held = quota.and_then(QuotaSlot::reserve);
                    if quota.is_some() && held.is_none() && !slots.is_empty() {
                        finish_chunk(&mut slots, &mut out).await;
                        held = quota.and_then(QuotaSlot::reserve);
                    }
                    let fut = Box::pin(app.handle.schedule_holding(
                        tenant,
                        &key,
                        reg.deadline,
                        reg.payload,
                        held,
                    ));
                    Slot::Waiting { key, fut }
                }
            },
        };
        slots.push(slot);
        if slots.len() == CHUNK || i + 1 == items.len() {
            finish_chunk(&mut slots, &mut out).await;
        }
    }
    out.push_str("]}");
    Ok(out)
}

async fn finish_chunk(slots: &mut Vec<Slot>, out: &mut String) {
    for slot in slots.drain(..) {
        if !out.ends_with('[') {
            out.push(',');
        }
        match slot {
            Slot::Done(text) => out.push_str(&text),
            Slot::Waiting { key, fut } => {
                match fut.await {
                    Ok(s) => {
                        let status = if s.replaced { 200 } else { 201 };
                        // Keys are validated: nothing to escape.
                        let _ = write!(
                            out,
                            "{{\"key\":\"{key}\",\"status\":{status},\"fire_at_us\":{},\"version\":{}}}",
                            s.deadline.0, s.version
                        );
                    }
                    Err(e) => out.push_str(&item_error(Some(&key), &ApiError::from(e))),
                }
            }
        }
    }
}

fn item_error(key: Option<&str>, e: &ApiError) -> String {
    let v = serde_json::json!({
        "key": key,
        "status": e.status().as_u16(),
        "error": e.to_json_value(),
    });
    v.to_string()
}
