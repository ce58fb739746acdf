//! The calls behind `/v1/schedules`: a recurring schedule is one pending timer under an
//! internal key (`partition::schedule_key`: `@` and the schedule's key, a name no client can
//! give a timer), whose payload is the schedule's record (`schedule::ScheduleRecord`) and
//! whose metadata is the callback its occurrences are delivered to. These calls validate the
//! schedule's own key, as a timer's, and reach that timer; the shard that owns it fires it
//! (`shard::fate`, `Shard::recur`).

use super::handle::{answer, Handle};
use super::list::TimerPage;
use crate::error::{validate_name, Error, NameKind, Result};
use crate::op::{reply_channel, Cancelled, Condition, Guarded, ListQuery, Op, Scheduled, Terms};
use crate::op::{Reply, TimerInfo};
use crate::partition::{schedule_key, schedule_of, INTERNAL};
use crate::timer::PackedTimer;
use crate::units::UtcMicros;
use std::future::Future;

/// The most bytes a schedule's record may take: a timer's payload limit and room for the
/// definition's other fields.
pub const MAX_SCHEDULE_RECORD: usize = super::MAX_PAYLOAD + 16 * 1024;

impl Handle {
    /// Writes schedule `key`'s timer: `record` (its payload) due at `deadline`, with the
    /// callback metadata `meta`, only when the key is in state `cond` (absent, or the version
    /// read): `Exists`, `VersionMismatch` or `NotPending` otherwise, nothing changed.
    pub fn put_schedule_async(
        &self,
        tenant: &str,
        key: &str,
        deadline: UtcMicros,
        record: &[u8],
        meta: &[u8],
        cond: Condition,
    ) -> impl Future<Output = Result<Scheduled>> + Send + 'static {
        let (tx, rx) = reply_channel();
        let pushed = self
            .checked_deadline(deadline)
            .and_then(|()| pack(tenant, key, meta, record))
            .and_then(|timer| {
                let shard = self.shard_for(tenant, timer.key());
                let op = Op::Guarded(Box::new(Guarded {
                    timer,
                    deadline,
                    terms: Terms {
                        cond: Some(cond),
                        max_wait_us: None,
                    },
                    reply: tx,
                    slot: None,
                    home: crate::shard::on_thread() == Some(shard),
                }));
                self.push_to(shard, tenant, op)
            });
        answer(pushed, rx)
    }

    /// Schedule `key`'s timer, if it has one: its record, version and next deadline.
    pub fn get_schedule_async(
        &self,
        tenant: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<TimerInfo>>> + Send + 'static {
        self.schedule_call(tenant, key, |timer, reply| Op::Get { timer, reply })
    }

    /// Removes schedule `key`: its timer goes, so no occurrence fires after the answer.
    pub fn cancel_schedule_async(
        &self,
        tenant: &str,
        key: &str,
    ) -> impl Future<Output = Result<Cancelled>> + Send + 'static {
        self.schedule_call(tenant, key, |timer, reply| Op::Cancel { timer, reply })
    }

    /// Up to `limit` schedules of `tenant` with a key after `after`, by key, with their
    /// records; `next` is the schedule's key to go on after.
    pub fn list_schedules_async(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<TimerPage>> + Send + 'static {
        let listed = self.list_timers_async(ListQuery {
            tenant: tenant.to_string(),
            prefix: INTERNAL.to_string(),
            after: after.map(schedule_key),
            limit,
            payloads: true,
        });
        async move {
            let mut page = listed.await?;
            for t in &mut page.timers {
                t.key = schedule_of(&t.key).unwrap_or_default().to_string();
            }
            page.next = page
                .next
                .as_deref()
                .and_then(schedule_of)
                .map(str::to_string);
            Ok(page)
        }
    }

    /// How many schedules `tenant` holds, counted up to `limit` (the answer is at most
    /// `limit`): a listing of the schedules' own timers, without their records.
    pub fn count_schedules_async(
        &self,
        tenant: &str,
        limit: usize,
    ) -> impl Future<Output = Result<usize>> + Send + 'static {
        let listed = self.list_timers_async(ListQuery {
            tenant: tenant.to_string(),
            prefix: INTERNAL.to_string(),
            after: None,
            limit,
            payloads: false,
        });
        async move { Ok(listed.await?.timers.len().min(limit)) }
    }

    fn schedule_call<T: Send + 'static>(
        &self,
        tenant: &str,
        key: &str,
        make: impl FnOnce(PackedTimer, Reply<Result<T>>) -> Op,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        self.call_packed(tenant, pack(tenant, key, &[], &[]), make)
    }
}

/// Schedule `key`'s timer, its names checked as a timer's are.
fn pack(tenant: &str, key: &str, meta: &[u8], record: &[u8]) -> Result<PackedTimer> {
    validate_name(NameKind::Tenant, tenant)?;
    validate_name(NameKind::Key, key)?;
    let too_large = Error::PayloadTooLarge {
        len: record.len(),
        limit: MAX_SCHEDULE_RECORD,
    };
    if record.len() > MAX_SCHEDULE_RECORD {
        return Err(too_large);
    }
    PackedTimer::with_meta(tenant, &schedule_key(key), meta, record).ok_or(too_large)
}
