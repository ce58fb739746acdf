"""What the sync and the async client share: building each call, reading its answer, and the
retry policy."""

from __future__ import annotations

import datetime
import email.utils
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union
from urllib.parse import quote

import httpx

from ._errors import ApiError, TransportError
from ._types import (BatchItem, BatchResult, Callback, CatchUp, DeadLetter, Debounce, DeliveryRetry, Dst, PendingTimer, QueueDepth,
                     QueueMessage, Schedule, SchedulePage, Scheduled, SettleResult, from_json)


@dataclass(frozen=True)
class RetryPolicy:
    """How calls that are safe to repeat are retried. The wait before attempt n+1 is a uniform
    draw from [0, min(max_delay, base_delay * 2**(n-1))] seconds ("full jitter"), raised to the
    answer's Retry-After when that is longer. No wait outlasts the call's timeout: a call whose
    next wait would pass it raises the last error at once."""

    max_attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 5.0
    attempt_timeout: Optional[float] = 10.0
    """Bounds each attempt, so that a server that stopped answering is tried again."""
    on_retry: Optional[Callable[[int, Exception, float], None]] = None
    """Called before each wait with the attempt that failed (1 for the first), its error and the wait."""

    def backoff(self, attempt: int, retry_after: Optional[float]) -> float:
        ceiling = min(self.max_delay, self.base_delay * (2 ** min(attempt - 1, 32)))
        wait = _jitter.uniform(0, ceiling) if ceiling > 0 else 0.0
        return max(wait, retry_after or 0.0)


NO_RETRY = RetryPolicy(max_attempts=1)
_jitter = random.Random()


@dataclass(frozen=True)
class Call:
    """One call: what to send, whether it may be repeated, and how its answer is read."""

    method: str
    path: str
    read: Callable[[httpx.Response], Any]
    params: Optional[Dict[str, str]] = None
    body: Any = None
    safe: bool = False
    metrics: bool = False
    reads_errors: bool = False
    """read() is given every answer, not only a 2xx (it raises what it does not read)."""
    waits: float = 0.0
    """Seconds the server may hold the answer on purpose (a receive's wait_ms), added to each
    attempt's bound."""


def seg(s: str) -> str:
    """One path segment (a tenant, a key), escaped as the server decodes it."""
    return quote(s, safe="")


def retriable(exc: Exception) -> bool:
    """Whether a failed attempt may be made again: the server did not take it (503, 429
    rate_limited, 408) or the transport failed. quota_exceeded is not: a quota frees itself only
    when the tenant's timers fire or are cancelled, which no wait brings about."""
    if isinstance(exc, ApiError):
        return exc.status in (503, 408) or (exc.status == 429 and exc.code == "rate_limited")
    return isinstance(exc, TransportError)


def error_from(r: httpx.Response) -> ApiError:
    retry_after = parse_retry_after(r.headers.get("retry-after"))
    try:
        e = r.json()["error"]
        return ApiError(r.status_code, str(e["code"]), str(e["message"]), retry_after,
                        e.get("version"), e.get("fire_at_us"))
    except (ValueError, KeyError, TypeError):
        return ApiError(r.status_code, "", r.text.strip() or r.reason_phrase, retry_after)


def parse_retry_after(v: Optional[str]) -> Optional[float]:
    if not v:
        return None
    v = v.strip()
    if v.isdigit():
        return float(v)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


def answer(call: Call, r: httpx.Response) -> Any:
    if not call.reads_errors and not 200 <= r.status_code < 300:
        raise error_from(r)
    return call.read(r)


def attempt_timeout(policy: RetryPolicy, deadline: Optional[float], waits: float = 0.0) -> Optional[float]:
    """The time one attempt may take: the policy's bound (plus what the server may wait on
    purpose), cut to what is left of the call's."""
    left = None if deadline is None else max(0.001, deadline - time.monotonic())
    bound = None if policy.attempt_timeout is None else policy.attempt_timeout + waits
    bounds = [b for b in (bound, left) if b is not None]
    return min(bounds) if bounds else None


def next_wait(policy: RetryPolicy, call: Call, attempt: int, exc: Exception, deadline: Optional[float]) -> Optional[float]:
    """The wait before the next attempt, or None when the call must raise exc now."""
    attempts = policy.max_attempts if call.safe else 1
    if attempt >= attempts or not retriable(exc):
        return None
    wait = policy.backoff(attempt, exc.retry_after if isinstance(exc, ApiError) else None)
    if deadline is not None and time.monotonic() + wait >= deadline:
        return None
    if policy.on_retry is not None:
        policy.on_retry(attempt, exc, wait)
    return wait


def rfc3339(name: str, at: Union[datetime.datetime, str]) -> str:
    """An aware datetime as RFC 3339 (a string is sent as it is); a naive one is refused."""
    if isinstance(at, datetime.datetime):
        if at.tzinfo is None:
            raise ValueError(f"{name} needs a time zone (a naive datetime is ambiguous)")
        return at.isoformat()
    return at


def delivery_fields(body: Dict[str, Any], payload: Any, callback: Union[str, Callback, None],
                    retry: Optional[DeliveryRetry]) -> Dict[str, Any]:
    """What a timer and a schedule's occurrences carry, added to body."""
    if payload is not None:
        body["payload"] = payload
    if callback is not None:
        body["callback"] = {"url": callback.url if isinstance(callback, Callback) else callback}
    if retry is not None:
        body["retry"] = retry.to_json()
    return body


def timer_body(
    delay_ms: Optional[int] = None,
    fire_at: Union[datetime.datetime, str, None] = None,
    fire_at_ms: Optional[int] = None,
    payload: Any = None,
    callback: Union[str, Callback, None] = None,
    retry: Optional[DeliveryRetry] = None,
    if_: Optional[str] = None,
    if_version: Optional[int] = None,
    debounce: Optional[Debounce] = None,
) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if debounce is not None:
        body["debounce"] = debounce.to_json()
    if if_ is not None:
        body["if"] = if_
    if if_version is not None:
        body["if_version"] = int(if_version)
    if delay_ms is not None:
        body["delay_ms"] = int(delay_ms)
    if fire_at is not None:
        body["fire_at"] = rfc3339("fire_at", fire_at)
    if fire_at_ms is not None:
        body["fire_at_ms"] = int(fire_at_ms)
    return delivery_fields(body, payload, callback, retry)


# The calls, one per route (docs/API.md), shared by Client and AsyncClient.


def put_call(tenant: str, key: str, body: Dict[str, Any]) -> Call:
    def read(r: httpx.Response) -> Scheduled:
        return from_json(Scheduled, {**r.json(), "created": r.status_code == 201})

    return Call("PUT", f"/v1/timers/{seg(tenant)}/{seg(key)}", read, body=body, safe=True)


def get_call(tenant: str, key: str) -> Call:
    return Call("GET", f"/v1/timers/{seg(tenant)}/{seg(key)}", lambda r: from_json(PendingTimer, r.json()), safe=True)


def cancel_call(tenant: str, key: str, if_version: Optional[int] = None) -> Call:
    params = {} if if_version is None else {"if_version": str(int(if_version))}
    return Call("DELETE", f"/v1/timers/{seg(tenant)}/{seg(key)}", lambda r: None, params=params, safe=True)


def batch_call(tenant: str, items: Sequence[BatchItem]) -> Call:
    timers = []
    for i in items:
        timers.append({"key": i.key, **timer_body(i.delay_ms, i.fire_at, i.fire_at_ms, i.payload, i.callback, i.retry,
                                                   i.if_, i.if_version, i.debounce)})

    def read(r: httpx.Response) -> List[BatchResult]:
        return [from_json(BatchResult, x) for x in r.json()["results"]]

    return Call("POST", f"/v1/timers/{seg(tenant)}", read, body={"timers": timers}, safe=True)


def list_call(tenant: str, prefix: Optional[str], after: Optional[str], limit: Optional[int],
              payloads: bool) -> Call:
    from ._types import TimerPage

    params = {}
    if prefix:
        params["prefix"] = prefix
    if after is not None:
        params["after"] = after
    if limit is not None:
        params["limit"] = str(limit)
    if payloads:
        params["payloads"] = "true"
    return Call("GET", f"/v1/timers/{seg(tenant)}", lambda r: from_json(TimerPage, r.json()), params=params, safe=True)


def cancel_prefix_call(tenant: str, prefix: Optional[str], all_: bool) -> Call:
    """A bulk cancel; never retried (a second one would be a second action)."""
    params = {}
    if prefix:
        params["prefix"] = prefix
    if all_:
        params["all"] = "true"
    return Call("DELETE", f"/v1/timers/{seg(tenant)}", lambda r: r.json()["id"], params=params)


def action_call(tenant: str, action_id: str) -> Call:
    from ._types import Action

    return Call("GET", f"/v1/actions/{seg(tenant)}/{seg(action_id)}", lambda r: from_json(Action, r.json()), safe=True)


def dead_letters_call(tenant: str, limit: Optional[int], after: Optional[str]) -> Call:
    params = {}
    if limit is not None:
        params["limit"] = str(limit)
    if after is not None:
        params["after"] = after

    def read(r: httpx.Response) -> List[DeadLetter]:
        return [from_json(DeadLetter, x) for x in r.json()["dead"]]

    return Call("GET", f"/v1/dead/{seg(tenant)}", read, params=params, safe=True)


def history_call(tenant: str, key: Optional[str], limit: Optional[int], after: Optional[str]) -> Call:
    from ._types import HistoryPage

    params = {}
    if key is not None:
        params["key"] = key
    if limit is not None:
        params["limit"] = str(limit)
    if after is not None:
        params["after"] = after
    return Call("GET", f"/v1/history/{seg(tenant)}", lambda r: from_json(HistoryPage, r.json()), params=params, safe=True)


def redrive_call(tenant: str, key: str) -> Call:
    # Never retried: an attempt whose answer was lost may have re-driven it.
    return Call("POST", f"/v1/dead/{seg(tenant)}/{seg(key)}/retry", lambda r: from_json(Scheduled, r.json()))


def discard_call(tenant: str, key: str) -> Call:
    return Call("DELETE", f"/v1/dead/{seg(tenant)}/{seg(key)}", lambda r: None, safe=True)


def metrics_call() -> Call:
    return Call("GET", "/metrics", lambda r: r.text, safe=True, metrics=True)


def cluster_call() -> Call:
    from ._types import ClusterStatus

    return Call("GET", "/cluster", lambda r: from_json(ClusterStatus, r.json()), safe=True, metrics=True)


def health_call() -> Call:
    from ._types import Health

    def read(r: httpx.Response) -> Health:
        # A server that cannot take writes answers 503 with its health: an answer, not an error.
        try:
            body = r.json()
        except ValueError:
            body = None
        if r.status_code in (200, 503) and isinstance(body, dict) and "status" in body:
            return from_json(Health, body)
        raise error_from(r)

    return Call("GET", "/healthz", read, reads_errors=True)


def schedule_body(cron: Optional[str], every_ms: Optional[int], time_zone: Optional[str],
                  start_at: Union[datetime.datetime, str, None], end_at: Union[datetime.datetime, str, None],
                  max_occurrences: Optional[int], catch_up: Optional[CatchUp], dst: Optional[Dst], payload: Any,
                  callback: Union[str, Callback, None], retry: Optional[DeliveryRetry]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if cron is not None:
        body["cron"] = cron
    if every_ms is not None:
        body["every_ms"] = int(every_ms)
    if time_zone is not None:
        body["time_zone"] = time_zone
    for name, at in (("start_at", start_at), ("end_at", end_at)):
        if at is not None:
            body[name] = rfc3339(name, at)
    if max_occurrences is not None:
        body["max_occurrences"] = int(max_occurrences)
    if catch_up is not None:
        body["catch_up"] = catch_up.to_json()
    if dst is not None:
        body["dst"] = dst.to_json()
    return delivery_fields(body, payload, callback, retry)


def _schedule(r: httpx.Response) -> Schedule:
    return from_json(Schedule, {**r.json(), "created": r.status_code == 201})


def _schedule_path(tenant: str, key: str, action: str = "") -> str:
    return f"/v1/schedules/{seg(tenant)}/{seg(key)}{action}"


def put_schedule_call(tenant: str, key: str, body: Dict[str, Any]) -> Call:
    # An upsert: a repeat puts the same definition again.
    return Call("PUT", _schedule_path(tenant, key), _schedule, body=body, safe=True)


def get_schedule_call(tenant: str, key: str, next_: Optional[int]) -> Call:
    params = {} if next_ is None else {"next": str(int(next_))}
    return Call("GET", _schedule_path(tenant, key), _schedule, params=params, safe=True)


def delete_schedule_call(tenant: str, key: str) -> Call:
    return Call("DELETE", _schedule_path(tenant, key), lambda r: None, safe=True)


def pause_schedule_call(tenant: str, key: str, pause: bool) -> Call:
    # Pausing a paused schedule (resuming a running one) changes nothing: safe to repeat.
    return Call("POST", _schedule_path(tenant, key, "/pause" if pause else "/resume"), _schedule, safe=True)


def schedules_call(tenant: str, limit: Optional[int], after: Optional[str]) -> Call:
    params = {}
    if limit is not None:
        params["limit"] = str(int(limit))
    if after is not None:
        params["after"] = after
    return Call("GET", f"/v1/schedules/{seg(tenant)}", lambda r: from_json(SchedulePage, r.json()), params=params, safe=True)


def queue_call(tenant: str) -> Call:
    return Call("GET", f"/v1/queues/{seg(tenant)}", lambda r: from_json(QueueDepth, r.json()), safe=True)


def receive_call(tenant: str, max_: Optional[int], wait_ms: Optional[int], visibility_ms: Optional[int]) -> Call:
    """Never retried: an attempt whose answer was lost leased its messages, which come back
    only when those leases end."""
    body: Dict[str, Any] = {}
    if max_ is not None:
        body["max"] = int(max_)
    if wait_ms is not None:
        body["wait_ms"] = int(wait_ms)
    if visibility_ms is not None:
        body["visibility_ms"] = int(visibility_ms)

    def read(r: httpx.Response) -> List[QueueMessage]:
        return [from_json(QueueMessage, m) for m in r.json()["messages"]]

    return Call("POST", f"/v1/queues/{seg(tenant)}/receive", read, body=body, waits=(wait_ms or 0) / 1000)


def settle_call(tenant: str, verb: str, receipts: Sequence[str], **fields: Optional[int]) -> Call:
    """ack, nack or extend: a repeat answers each receipt already settled 409 lease_expired in
    its result (not an error), so they are retried."""
    body: Dict[str, Any] = {"receipts": list(receipts)}
    body.update({k: int(v) for k, v in fields.items() if v is not None})

    def read(r: httpx.Response) -> List[SettleResult]:
        return [from_json(SettleResult, x) for x in r.json()["results"]]

    return Call("POST", f"/v1/queues/{seg(tenant)}/{verb}", read, body=body, safe=True)


def transport_error(e: Exception) -> TransportError:
    err = TransportError(f"{type(e).__name__}: {e}")
    err.__cause__ = e
    return err
