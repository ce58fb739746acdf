//! The baseline teams run today: a Redis sorted set polled every millisecond.

use crate::churn::{self, Answer, Client, Item};
use crate::redis_server::RedisServer;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The sorted-set baseline: members `tenant/key`, score the deadline in µs; the record
/// `version fire_at_us payload` in a hash.
const ZSET: &str = "zpoll:due";
const RECORDS: &str = "zpoll:records";

/// Fires what is due by Redis's clock: at most ARGV[1] members, each `ZREM`ed, `HDEL`ed and
/// `XADD`ed to `punctual:fired:{tenant}` with the same fields punctual writes. Returns how
/// many it took.
const POLL_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(due) do
  local rec = redis.call('HGET', KEYS[2], m)
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
  if rec then
    local slash = string.find(m, '/', 1, true)
    local s1 = string.find(rec, ' ', 1, true)
    local s2 = string.find(rec, ' ', s1 + 1, true)
    redis.call('XADD', 'punctual:fired:{' .. string.sub(m, 1, slash - 1) .. '}', '*',
      'key', string.sub(m, slash + 1),
      'version', string.sub(rec, 1, s1 - 1),
      'fire_at_us', string.sub(rec, s1 + 1, s2 - 1),
      'fired_at_us', now,
      'payload', string.sub(rec, s2 + 1))
  end
end
return #due
"#;

/// Members taken per script run; a full take runs the script again at once.
const POLL_LIMIT: i64 = 1_000;

/// The polling loop on its own thread and connection, every 1 ms until `stop`.
pub fn start_poller(redis: &RedisServer, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let mut con = redis.client().expect("poller's redis client");
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(POLL_SCRIPT)
        .query(&mut con)
        .expect("SCRIPT LOAD");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Acquire) {
            let took: i64 = redis::cmd("EVALSHA")
                .arg(&sha)
                .arg(2)
                .arg(ZSET)
                .arg(RECORDS)
                .arg(POLL_LIMIT)
                .query(&mut con)
                .unwrap_or_else(|e| panic!("poll script failed: {e}"));
            if took < POLL_LIMIT {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    })
}

/// One client connection of the sorted-set baseline; versions come from a shared counter.
pub struct Zset<'a> {
    con: redis::Connection,
    version: &'a AtomicU64,
}

impl<'a> Zset<'a> {
    pub fn connect(redis: &RedisServer, version: &'a AtomicU64) -> Zset<'a> {
        Zset {
            con: redis.client().expect("redis client"),
            version,
        }
    }

    /// `ZADD` + `HSET` for each item in one `MULTI`; `ZADD` answering 0 means it replaced.
    fn schedule(&mut self, tenant: &str, items: &[Item]) -> Vec<Answer> {
        let now = churn::now_us();
        let mut pipe = redis::pipe();
        pipe.atomic();
        let mut sent = Vec::with_capacity(items.len());
        for it in items {
            let version = self.version.fetch_add(1, Ordering::Relaxed) + 1;
            let fire_at_us = now + it.delay_ms * 1000;
            let member = format!("{tenant}/{}", it.key);
            pipe.cmd("ZADD").arg(ZSET).arg(fire_at_us).arg(&member);
            pipe.cmd("HSET")
                .arg(RECORDS)
                .arg(&member)
                .arg(format!("{version} {fire_at_us} {}", it.payload));
            sent.push((version, fire_at_us));
        }
        match pipe.query::<Vec<i64>>(&mut self.con) {
            Ok(replies) if replies.len() == 2 * items.len() => sent
                .iter()
                .zip(replies.chunks_exact(2))
                .map(|(&(version, fire_at_us), r)| Answer::Scheduled {
                    version,
                    fire_at_us,
                    replaced: r[0] == 0,
                })
                .collect(),
            Ok(replies) => vec![Answer::Unexpected(format!("replies {replies:?}")); items.len()],
            Err(e) => vec![Answer::Lost(e.to_string()); items.len()],
        }
    }
}

impl Client for Zset<'_> {
    fn register(&mut self, tenant: &str, items: &[Item]) -> Vec<Answer> {
        self.schedule(tenant, items)
    }

    fn cancel(&mut self, tenant: &str, key: &str) -> Answer {
        let member = format!("{tenant}/{key}");
        let result = redis::pipe()
            .atomic()
            .cmd("ZREM")
            .arg(ZSET)
            .arg(&member)
            .cmd("HDEL")
            .arg(RECORDS)
            .arg(&member)
            .query::<(i64, i64)>(&mut self.con);
        match result {
            Ok((1, _)) => Answer::Cancelled,
            Ok(_) => Answer::NotFound,
            Err(e) => Answer::Lost(e.to_string()),
        }
    }

    fn put(&mut self, tenant: &str, item: &Item) -> Answer {
        self.schedule(tenant, std::slice::from_ref(item))
            .pop()
            .unwrap_or_else(|| Answer::Unexpected("no answer".into()))
    }
}
