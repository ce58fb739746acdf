"""Client (blocking, on httpx.Client) and AsyncClient (asyncio, on httpx.AsyncClient)."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from typing import Any, Awaitable, Callable, List, Optional, Sequence, Union

import httpx

from . import _consume, _core
from ._core import Call, RetryPolicy
from ._errors import ApiError
from ._types import (Action, BatchItem, BatchResult, Callback, CatchUp, ClusterStatus, DeadLetter, Debounce, DeliveryRetry, Dst, Health,
                     PendingTimer, QueueDepth, QueueMessage, Schedule, SchedulePage, Scheduled, SettleResult, TimerPage)

Deadline = Union[datetime.datetime, str, None]


class _Base:
    def __init__(self, base_url: str, token: Optional[str], metrics_token: Optional[str], retry: RetryPolicy, timeout: Optional[float]):
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._metrics_token = metrics_token
        self.retry = retry
        self.timeout = timeout

    def _request(self, call: Call) -> dict:
        headers = {}
        token = self._metrics_token if call.metrics else self._token
        if token:
            headers["authorization"] = f"Bearer {token}"
        return {"method": call.method, "url": self.base_url + call.path, "params": call.params or None,
                "json": call.body, "headers": headers}

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        t = self.timeout if timeout is None else timeout
        return None if t is None else time.monotonic() + t


class Client(_Base):
    """A blocking client of one punctual server; thread-safe, keeps its connections alive.

    Each call takes `timeout`: seconds for the whole call, retries included (the client's
    `timeout` when None). Use it as a context manager, or call close()."""

    def __init__(self, base_url: str, *, token: Optional[str] = None, metrics_token: Optional[str] = None,
                 retry: RetryPolicy = RetryPolicy(), timeout: Optional[float] = 30.0, http: Optional[httpx.Client] = None):
        super().__init__(base_url, token, metrics_token, retry, timeout)
        self._http = http or httpx.Client(limits=httpx.Limits(max_keepalive_connections=64))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: Call, timeout: Optional[float]) -> Any:
        deadline = self._deadline(timeout)
        attempt = 0
        while True:
            attempt += 1
            try:
                r = self._http.request(**self._request(call), timeout=_core.attempt_timeout(self.retry, deadline, call.waits))
                return _core.answer(call, r)
            except (ApiError, httpx.TransportError) as e:
                exc = e if isinstance(e, ApiError) else _core.transport_error(e)
                wait = _core.next_wait(self.retry, call, attempt, exc, deadline)
                if wait is None:
                    raise exc from (None if exc is e else e)
                time.sleep(wait)

    def put(self, tenant: str, key: str, *, delay_ms: Optional[int] = None, fire_at: Deadline = None,
            fire_at_ms: Optional[int] = None, payload: Any = None, callback: Union[str, Callback, None] = None,
            retry: Optional[DeliveryRetry] = None, if_: Optional[str] = None, if_version: Optional[int] = None,
            debounce: Optional[Debounce] = None, timeout: Optional[float] = None) -> Scheduled:
        """Schedules a timer under (tenant, key) with exactly one of delay_ms, fire_at (an aware
        datetime or RFC 3339) and fire_at_ms, replacing the one pending there (an upsert, so it
        is retried). `created` says whether one was pending. if_="absent" creates only, and
        if_version=V replaces only version V: otherwise ApiError with `conflict` (409) or
        not_found, and nothing changed. debounce holds a burst of writes to one deadline at most
        max_wait_ms after its first."""
        body = _core.timer_body(delay_ms, fire_at, fire_at_ms, payload, callback, retry, if_, if_version, debounce)
        return self._run(_core.put_call(tenant, key, body), timeout)

    def get(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> PendingTimer:
        """The timer pending under (tenant, key); ApiError not_found when none is."""
        return self._run(_core.get_call(tenant, key), timeout)

    def cancel(self, tenant: str, key: str, *, if_version: Optional[int] = None,
               timeout: Optional[float] = None) -> None:
        """Cancels the pending timer; ApiError not_found when nothing is pending (fired,
        cancelled, or removed by an earlier attempt of this call whose answer was lost). With
        if_version, only that version: another is ApiError version_mismatch (`conflict`)."""
        self._run(_core.cancel_call(tenant, key, if_version), timeout)

    def batch(self, tenant: str, items: Sequence[BatchItem], *, timeout: Optional[float] = None) -> List[BatchResult]:
        """Schedules up to 10,000 timers in order; each item fails alone (its result's error)."""
        return self._run(_core.batch_call(tenant, items), timeout)

    def list(self, tenant: str, *, prefix: Optional[str] = None, after: Optional[str] = None,
             limit: Optional[int] = None, payloads: bool = False, timeout: Optional[float] = None) -> TimerPage:
        """One page of the tenant's pending timers whose key starts with prefix, by key; the next
        page is after the page's `next` (None on the last page)."""
        return self._run(_core.list_call(tenant, prefix, after, limit, payloads), timeout)

    def cancel_prefix(self, tenant: str, *, prefix: Optional[str] = None, all: bool = False,
                      timeout: Optional[float] = None) -> str:
        """Starts a bulk cancel of the tenant's pending timers whose key starts with prefix (an
        empty prefix needs all=True: every pending timer of the tenant); returns the action's id
        at once, whose progress action() reads. Never retried."""
        return self._run(_core.cancel_prefix_call(tenant, prefix, all), timeout)

    def action(self, tenant: str, id: str, *, timeout: Optional[float] = None) -> Action:
        """A bulk cancel's progress; ApiError not_found for an unknown action (a restart forgets
        every action, and each tenant keeps its last 64)."""
        return self._run(_core.action_call(tenant, id), timeout)

    def dead_letters(self, tenant: str, *, limit: Optional[int] = None, after: Optional[str] = None,
                     timeout: Optional[float] = None) -> List[DeadLetter]:
        """One page of the tenant's dead letters by key; the next page is after the last key."""
        return self._run(_core.dead_letters_call(tenant, limit, after), timeout)

    def redrive(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> Scheduled:
        """Delivers the dead letter again now (never retried); 409 timer_pending while a timer
        is pending under the key."""
        return self._run(_core.redrive_call(tenant, key), timeout)

    def discard(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> None:
        """Removes the dead letter; ApiError not_found when there is none."""
        self._run(_core.discard_call(tenant, key), timeout)

    def health(self, *, timeout: Optional[float] = None) -> Health:
        """/healthz, not retried: a server that cannot take writes gives its Health too, with
        its status "unavailable" or "draining" and the reason."""
        return self._run(_core.health_call(), timeout)

    def metrics(self, *, timeout: Optional[float] = None) -> str:
        return self._run(_core.metrics_call(), timeout)

    def cluster(self, *, timeout: Optional[float] = None) -> ClusterStatus:
        return self._run(_core.cluster_call(), timeout)

    def put_schedule(self, tenant: str, key: str, *, cron: Optional[str] = None, every_ms: Optional[int] = None,
                     time_zone: Optional[str] = None, start_at: Deadline = None, end_at: Deadline = None,
                     max_occurrences: Optional[int] = None, catch_up: Optional[CatchUp] = None, dst: Optional[Dst] = None,
                     payload: Any = None, callback: Union[str, Callback, None] = None, retry: Optional[DeliveryRetry] = None,
                     timeout: Optional[float] = None) -> Schedule:
        """Creates or replaces the recurring schedule under (tenant, key): exactly one of cron
        (in time_zone, UTC by default) and every_ms. A replacement keeps its sequence, its pause
        and what it has spent; `created` says whether none was there. A definition that cannot
        fire is ApiError invalid_field, its message naming the field."""
        body = _core.schedule_body(cron, every_ms, time_zone, start_at, end_at, max_occurrences, catch_up, dst,
                                   payload, callback, retry)
        return self._run(_core.put_schedule_call(tenant, key, body), timeout)

    def get_schedule(self, tenant: str, key: str, *, next: Optional[int] = None,
                     timeout: Optional[float] = None) -> Schedule:
        """The schedule and its next occurrences (`next` of them, 1 to 100, default 5);
        ApiError not_found when there is none."""
        return self._run(_core.get_schedule_call(tenant, key, next), timeout)

    def delete_schedule(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> None:
        """Removes the schedule: no occurrence due after the answer fires; ApiError not_found
        when there is none (or an earlier attempt of this call removed it)."""
        self._run(_core.delete_schedule_call(tenant, key), timeout)

    def pause_schedule(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> Schedule:
        """Pauses the schedule: no occurrence due after the answer fires."""
        return self._run(_core.pause_schedule_call(tenant, key, True), timeout)

    def resume_schedule(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> Schedule:
        """Resumes the schedule: what it missed while paused fires under its catch-up policy."""
        return self._run(_core.pause_schedule_call(tenant, key, False), timeout)

    def schedules(self, tenant: str, *, limit: Optional[int] = None, after: Optional[str] = None,
                  timeout: Optional[float] = None) -> SchedulePage:
        """One page of the tenant's schedules by key; the next page is after the page's `next`."""
        return self._run(_core.schedules_call(tenant, limit, after), timeout)

    def queue(self, tenant: str, *, timeout: Optional[float] = None) -> QueueDepth:
        """The tenant's pull queue counted (exact, from each shard's index); ApiError
        not_found for a tenant without `queue = true`."""
        return self._run(_core.queue_call(tenant), timeout)

    def receive(self, tenant: str, *, max: Optional[int] = None, wait_ms: Optional[int] = None,
                visibility_ms: Optional[int] = None, timeout: Optional[float] = None) -> List[QueueMessage]:
        """Up to max ready messages (default 10), each leased for visibility_ms; with none
        ready, waits up to wait_ms for one, then answers an empty list. Never retried: a lost
        answer's messages come back when their leases end."""
        return self._run(_core.receive_call(tenant, max, wait_ms, visibility_ms), timeout)

    def ack(self, tenant: str, receipts: Sequence[str], *, timeout: Optional[float] = None) -> List[SettleResult]:
        """Removes the received messages for good: one result per receipt, in order (`.ok`;
        409 lease_expired, also for one an earlier attempt of this call acknowledged)."""
        return self._run(_core.settle_call(tenant, "ack", receipts), timeout)

    def nack(self, tenant: str, receipts: Sequence[str], *, delay_ms: Optional[int] = None,
             timeout: Optional[float] = None) -> List[SettleResult]:
        """Gives the messages back, ready after delay_ms; one on its last receive becomes a dead letter."""
        return self._run(_core.settle_call(tenant, "nack", receipts, delay_ms=delay_ms), timeout)

    def extend(self, tenant: str, receipts: Sequence[str], *, visibility_ms: int,
               timeout: Optional[float] = None) -> List[SettleResult]:
        """Each lease now ends visibility_ms from now; the receipts stay valid."""
        return self._run(_core.settle_call(tenant, "extend", receipts, visibility_ms=visibility_ms), timeout)

    def consume(self, tenant: str, handler: Callable[[QueueMessage], Any], *, concurrency: int = 1, prefetch: int = 0,
                visibility_ms: int = 30_000, wait_ms: int = 20_000, nack_delay_ms: int = 5_000,
                stop: Optional[threading.Event] = None, on_error: Optional[Callable[[Exception], None]] = None) -> None:
        """Receives the tenant's messages and calls handler on each, in up to `concurrency`
        threads at once, until `stop` is set: long-polled receives (wait_ms, at most 20 s) for as
        many messages as handlers are free (and `prefetch` more, held leased until a handler is
        free: a receive then waits until half of those are free, to bring a batch), each leased
        for visibility_ms and extended while it is held past half of it; a message whose handler returned is acknowledged (in
        batches), one whose handler raised is nacked to come back after nack_delay_ms. A receive
        that fails with 503, 429 rate_limited, 408 or no answer is not repeated: after a backoff
        (the client's retry policy, at least Retry-After) a new one follows, and what a lost
        answer leased comes back when its lease ends; any other ApiError stops the loop and is
        raised. On `stop` it receives no more (what a receive in flight brings is given back),
        lets the running handlers finish, acknowledges or nacks their messages and returns.
        on_error observes what the loop goes on after (a handler's exception, a failed settle)."""
        _consume.consume(self, tenant, handler, _consume._Options(concurrency, prefetch, visibility_ms, wait_ms, nack_delay_ms, on_error), stop)


class AsyncClient(_Base):
    """The same calls as Client, for asyncio; a call is also cancelled with its task (for
    example by asyncio.timeout)."""

    def __init__(self, base_url: str, *, token: Optional[str] = None, metrics_token: Optional[str] = None,
                 retry: RetryPolicy = RetryPolicy(), timeout: Optional[float] = 30.0, http: Optional[httpx.AsyncClient] = None):
        super().__init__(base_url, token, metrics_token, retry, timeout)
        self._http = http or httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=64))

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, call: Call, timeout: Optional[float]) -> Any:
        deadline = self._deadline(timeout)
        attempt = 0
        while True:
            attempt += 1
            try:
                r = await self._http.request(**self._request(call), timeout=_core.attempt_timeout(self.retry, deadline, call.waits))
                return _core.answer(call, r)
            except (ApiError, httpx.TransportError) as e:
                exc = e if isinstance(e, ApiError) else _core.transport_error(e)
                wait = _core.next_wait(self.retry, call, attempt, exc, deadline)
                if wait is None:
                    raise exc from (None if exc is e else e)
                await asyncio.sleep(wait)

    async def put(self, tenant: str, key: str, *, delay_ms: Optional[int] = None, fire_at: Deadline = None,
                  fire_at_ms: Optional[int] = None, payload: Any = None, callback: Union[str, Callback, None] = None,
                  retry: Optional[DeliveryRetry] = None, if_: Optional[str] = None,
                  if_version: Optional[int] = None, debounce: Optional[Debounce] = None,
                  timeout: Optional[float] = None) -> Scheduled:
        body = _core.timer_body(delay_ms, fire_at, fire_at_ms, payload, callback, retry, if_, if_version, debounce)
        return await self._run(_core.put_call(tenant, key, body), timeout)

    async def get(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> PendingTimer:
        return await self._run(_core.get_call(tenant, key), timeout)

    async def cancel(self, tenant: str, key: str, *, if_version: Optional[int] = None,
                     timeout: Optional[float] = None) -> None:
        await self._run(_core.cancel_call(tenant, key, if_version), timeout)

    async def batch(self, tenant: str, items: Sequence[BatchItem], *, timeout: Optional[float] = None) -> List[BatchResult]:
        return await self._run(_core.batch_call(tenant, items), timeout)

    async def list(self, tenant: str, *, prefix: Optional[str] = None, after: Optional[str] = None,
                   limit: Optional[int] = None, payloads: bool = False, timeout: Optional[float] = None) -> TimerPage:
        return await self._run(_core.list_call(tenant, prefix, after, limit, payloads), timeout)

    async def cancel_prefix(self, tenant: str, *, prefix: Optional[str] = None, all: bool = False,
                            timeout: Optional[float] = None) -> str:
        return await self._run(_core.cancel_prefix_call(tenant, prefix, all), timeout)

    async def action(self, tenant: str, id: str, *, timeout: Optional[float] = None) -> Action:
        return await self._run(_core.action_call(tenant, id), timeout)

    async def dead_letters(self, tenant: str, *, limit: Optional[int] = None, after: Optional[str] = None,
                           timeout: Optional[float] = None) -> List[DeadLetter]:
        return await self._run(_core.dead_letters_call(tenant, limit, after), timeout)

    async def redrive(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> Scheduled:
        return await self._run(_core.redrive_call(tenant, key), timeout)

    async def discard(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> None:
        await self._run(_core.discard_call(tenant, key), timeout)

    async def health(self, *, timeout: Optional[float] = None) -> Health:
        return await self._run(_core.health_call(), timeout)

    async def metrics(self, *, timeout: Optional[float] = None) -> str:
        return await self._run(_core.metrics_call(), timeout)

    async def cluster(self, *, timeout: Optional[float] = None) -> ClusterStatus:
        return await self._run(_core.cluster_call(), timeout)

    async def put_schedule(self, tenant: str, key: str, *, cron: Optional[str] = None, every_ms: Optional[int] = None,
                           time_zone: Optional[str] = None, start_at: Deadline = None, end_at: Deadline = None,
                           max_occurrences: Optional[int] = None, catch_up: Optional[CatchUp] = None,
                           dst: Optional[Dst] = None, payload: Any = None, callback: Union[str, Callback, None] = None,
                           retry: Optional[DeliveryRetry] = None, timeout: Optional[float] = None) -> Schedule:
        body = _core.schedule_body(cron, every_ms, time_zone, start_at, end_at, max_occurrences, catch_up, dst,
                                   payload, callback, retry)
        return await self._run(_core.put_schedule_call(tenant, key, body), timeout)

    async def get_schedule(self, tenant: str, key: str, *, next: Optional[int] = None,
                           timeout: Optional[float] = None) -> Schedule:
        return await self._run(_core.get_schedule_call(tenant, key, next), timeout)

    async def delete_schedule(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> None:
        await self._run(_core.delete_schedule_call(tenant, key), timeout)

    async def pause_schedule(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> Schedule:
        return await self._run(_core.pause_schedule_call(tenant, key, True), timeout)

    async def resume_schedule(self, tenant: str, key: str, *, timeout: Optional[float] = None) -> Schedule:
        return await self._run(_core.pause_schedule_call(tenant, key, False), timeout)

    async def schedules(self, tenant: str, *, limit: Optional[int] = None, after: Optional[str] = None,
                        timeout: Optional[float] = None) -> SchedulePage:
        return await self._run(_core.schedules_call(tenant, limit, after), timeout)

    async def queue(self, tenant: str, *, timeout: Optional[float] = None) -> QueueDepth:
        return await self._run(_core.queue_call(tenant), timeout)

    async def receive(self, tenant: str, *, max: Optional[int] = None, wait_ms: Optional[int] = None,
                      visibility_ms: Optional[int] = None, timeout: Optional[float] = None) -> List[QueueMessage]:
        return await self._run(_core.receive_call(tenant, max, wait_ms, visibility_ms), timeout)

    async def ack(self, tenant: str, receipts: Sequence[str], *, timeout: Optional[float] = None) -> List[SettleResult]:
        return await self._run(_core.settle_call(tenant, "ack", receipts), timeout)

    async def nack(self, tenant: str, receipts: Sequence[str], *, delay_ms: Optional[int] = None,
                   timeout: Optional[float] = None) -> List[SettleResult]:
        return await self._run(_core.settle_call(tenant, "nack", receipts, delay_ms=delay_ms), timeout)

    async def extend(self, tenant: str, receipts: Sequence[str], *, visibility_ms: int,
                     timeout: Optional[float] = None) -> List[SettleResult]:
        return await self._run(_core.settle_call(tenant, "extend", receipts, visibility_ms=visibility_ms), timeout)

    async def consume(self, tenant: str, handler: Callable[[QueueMessage], Awaitable[Any]], *, concurrency: int = 1, prefetch: int = 0,
                      visibility_ms: int = 30_000, wait_ms: int = 20_000, nack_delay_ms: int = 5_000,
                      stop: Optional[asyncio.Event] = None, on_error: Optional[Callable[[Exception], None]] = None) -> None:
        """Client.consume for a coroutine handler, up to `concurrency` tasks at once; on `stop`
        a receive in flight is cancelled (what it leased comes back when its leases end)."""
        await _consume.consume_async(self, tenant, handler, _consume._Options(concurrency, prefetch, visibility_ms, wait_ms, nack_delay_ms, on_error), stop)
