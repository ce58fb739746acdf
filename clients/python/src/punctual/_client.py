"""Client (blocking, on httpx.Client) and AsyncClient (asyncio, on httpx.AsyncClient)."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any, List, Optional, Sequence, Union

import httpx

from . import _core
from ._core import Call, RetryPolicy
from ._errors import ApiError
from ._types import BatchItem, BatchResult, Callback, ClusterStatus, DeadLetter, Debounce, DeliveryRetry, Health, PendingTimer, Scheduled, TimerPage

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
                r = self._http.request(**self._request(call), timeout=_core.attempt_timeout(self.retry, deadline))
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
                r = await self._http.request(**self._request(call), timeout=_core.attempt_timeout(self.retry, deadline))
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


