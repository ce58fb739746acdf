//! A consumer of punctual's fired stream that closes unpaid orders, idempotently.
//!
//! ```text
//! cargo run --example close_unpaid_orders -- [REDIS_URL] [TENANT] [CONSUMER]
//! ```
//!
//! It reads `punctual:fired:{<tenant>}` with the consumer group `order-closer` (`XREADGROUP`),
//! reclaims entries that another consumer took and never acknowledged for 30 s
//! (`XAUTOCLAIM`), closes the order each entry names, and acknowledges it (`XACK`).
//!
//! Delivery is at least once: after a crash of punctual, a lost Redis connection, or a crash
//! of a consumer between its work and its `XACK`, an entry can be seen twice. Each entry
//! carries (key, version), which names one scheduling exactly once, so the consumer
//! de-duplicates on it:
//!
//! 1. skip the entry if `done:{tenant}:<key>:<version>` exists (already handled);
//! 2. do the work idempotently (close the order only if it is still unpaid);
//! 3. record `done:…` (with a TTL longer than any redelivery), then `XACK`.
//!
//! A crash after 2 and before 3 repeats step 2 on redelivery, which is harmless because the
//! work is idempotent. The "orders" here are hashes `example:order:<key>` with a `status`
//! field; a real application would update its own database the same way.

use redis::{Connection, Value};
use std::time::Duration;

const GROUP: &str = "order-closer";
/// Entries idle this long in another consumer's pending list are taken over.
const CLAIM_IDLE_MS: u64 = 30_000;
/// How long a (key, version) is remembered as done.
const DONE_TTL_S: u64 = 7 * 86_400;

struct Fired {
    id: String,
    key: String,
    version: String,
}

fn main() -> redis::RedisResult<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let tenant = args.next().unwrap_or_else(|| "shop".into());
    let consumer = args
        .next()
        .unwrap_or_else(|| format!("closer-{}", std::process::id()));
    let stream = format!("punctual:fired:{{{tenant}}}");
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;

    // The group starts at the beginning of the stream; it may exist already.
    let created: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query(&mut con);
    if let Err(e) = created {
        if e.code() != Some("BUSYGROUP") {
            return Err(e);
        }
    }
    println!("consuming {stream} as {GROUP}/{consumer}");
    loop {
        // Stalled entries first: a consumer that died holding them never acknowledged them.
        let claimed: Value = redis::cmd("XAUTOCLAIM")
            .arg(&stream)
            .arg(GROUP)
            .arg(&consumer)
            .arg(CLAIM_IDLE_MS)
            .arg("0-0")
            .arg("COUNT")
            .arg(100)
            .query(&mut con)?;
        for f in claimed_entries(&claimed) {
            handle(&mut con, &tenant, &stream, &f)?;
        }
        let read: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg(&consumer)
            .arg("COUNT")
            .arg(100)
            .arg("BLOCK")
            .arg(Duration::from_secs(5).as_millis() as u64)
            .arg("STREAMS")
            .arg(&stream)
            .arg(">")
            .query(&mut con)?;
        for f in read_entries(&read) {
            handle(&mut con, &tenant, &stream, &f)?;
        }
    }
}

/// Steps 1–3 of the module doc for one entry.
fn handle(con: &mut Connection, tenant: &str, stream: &str, f: &Fired) -> redis::RedisResult<()> {
    let done = format!("done:{{{tenant}}}:{}:{}", f.key, f.version);
    let seen: bool = redis::cmd("EXISTS").arg(&done).query(con)?;
    if seen {
        println!("{} v{}: duplicate, skipped", f.key, f.version);
    } else {
        let order = format!("example:order:{}", f.key);
        let status: Option<String> = redis::cmd("HGET").arg(&order).arg("status").query(con)?;
        if status.as_deref() != Some("paid") {
            let _: () = redis::cmd("HSET")
                .arg(&order)
                .arg("status")
                .arg("closed")
                .query(con)?;
            println!("{} v{}: closed (was {status:?})", f.key, f.version);
        } else {
            println!("{} v{}: paid, left open", f.key, f.version);
        }
        let _: () = redis::cmd("SET")
            .arg(&done)
            .arg(1)
            .arg("EX")
            .arg(DONE_TTL_S)
            .query(con)?;
    }
    let _: () = redis::cmd("XACK")
        .arg(stream)
        .arg(GROUP)
        .arg(&f.id)
        .query(con)?;
    Ok(())
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// One `[id, [field, value, …]]` entry.
fn entry(v: &Value) -> Option<Fired> {
    let Value::Array(parts) = v else { return None };
    let [id, Value::Array(fields)] = &parts[..] else {
        return None;
    };
    let mut f = Fired {
        id: text(id)?,
        key: String::new(),
        version: String::new(),
    };
    for kv in fields.chunks_exact(2) {
        match text(&kv[0]).as_deref() {
            Some("key") => f.key = text(&kv[1])?,
            Some("version") => f.version = text(&kv[1])?,
            _ => {}
        }
    }
    Some(f)
}

/// XREADGROUP's `[[stream, [entry, …]], …]` (nil when BLOCK timed out).
fn read_entries(v: &Value) -> Vec<Fired> {
    let Value::Array(streams) = v else {
        return Vec::new();
    };
    streams
        .iter()
        .filter_map(|s| match s {
            Value::Array(pair) if pair.len() == 2 => Some(&pair[1]),
            _ => None,
        })
        .flat_map(|entries| match entries {
            Value::Array(es) => es.iter().filter_map(entry).collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// XAUTOCLAIM's `[next-id, [entry, …], [deleted ids]]`.
fn claimed_entries(v: &Value) -> Vec<Fired> {
    match v {
        Value::Array(parts) => match parts.get(1) {
            Some(Value::Array(es)) => es.iter().filter_map(entry).collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}
