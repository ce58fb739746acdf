"""A pull consumer's loop, blocking (threads) and asyncio: receive, run the handlers, extend
the leases of those still running, acknowledge or nack, stop cleanly."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Sequence

from ._core import RetryPolicy, retriable
from ._errors import ApiError
from ._types import QueueMessage, SettleResult

if TYPE_CHECKING:
    from ._client import AsyncClient, Client

ErrorHook = Optional[Callable[[Exception], None]]
_TICK = 0.02  # the settler's period: acks wait at most this long to be sent in a batch
_BATCH = 1000  # receipts per ack or extend, the server's most


class _Leases:
    """The running handlers' leases and the receipts handled and waiting for their ack,
    shared by the loop, the handlers and the settler."""

    def __init__(self, visibility_ms: int):
        self.visibility = visibility_ms / 1000
        self.lock = threading.Lock()
        self.ends: Dict[str, float] = {}
        self.acks: List[str] = []

    def hold(self, receipt: str, ends: float) -> None:
        with self.lock:
            self.ends[receipt] = ends

    def done(self, receipt: str, ok: bool) -> None:
        with self.lock:
            self.ends.pop(receipt, None)
            if ok:
                self.acks.append(receipt)

    def take_acks(self) -> List[str]:
        with self.lock:
            batch, self.acks = self.acks[:_BATCH], self.acks[_BATCH:]
            return batch

    def due(self) -> List[str]:
        """The leases with half their visibility or less left."""
        now = time.monotonic()
        with self.lock:
            return [r for r, end in self.ends.items() if end - now <= self.visibility / 2][:_BATCH]

    def extended(self, results: Sequence[SettleResult], at: float) -> None:
        with self.lock:
            for r in results:
                if r.receipt not in self.ends:
                    continue
                if r.status == 204:
                    self.ends[r.receipt] = at + self.visibility
                elif r.status in (404, 409):  # lost: the ack will say so too
                    del self.ends[r.receipt]


class _Options:
    def __init__(self, concurrency: int, prefetch: int, visibility_ms: int, wait_ms: int, nack_delay_ms: int, on_error: ErrorHook):
        if concurrency < 1 or prefetch < 0:
            raise ValueError("concurrency must be at least 1, prefetch at least 0")
        if visibility_ms < 1:
            raise ValueError("visibility_ms must be at least 1")
        self.concurrency = concurrency
        # At most `held` messages are leased at once, running or waiting for a handler; a
        # receive is made once `low` of them are free, so that with a prefetch a receive
        # brings a batch rather than the one message a finished handler frees.
        self.held = min(concurrency + prefetch, _BATCH)
        self.low = max(1, min(prefetch // 2, self.held))
        self.visibility_ms = visibility_ms
        self.wait_ms = max(0, min(wait_ms, 20_000))
        self.nack_delay_ms = max(0, nack_delay_ms)
        self.on_error = on_error

    def report(self, e: Exception) -> None:
        if self.on_error is not None:
            self.on_error(e)

    def lease_start(self, sent: float) -> float:
        """When a receive's leases began, at the earliest: between its request and its answer,
        reckoned from a second before the answer (from the request when that came sooner), so
        that an extend comes early rather than late."""
        return max(sent, time.monotonic() - 1.0)

    def backoff(self, retry: Any, failures: int, e: Exception) -> float:
        policy = retry if retry.max_delay > 0 else RetryPolicy()
        return policy.backoff(min(failures, 30), e.retry_after if isinstance(e, ApiError) else None)

    def check(self, what: str, results: Sequence[SettleResult]) -> None:
        for r in results:
            if not r.ok:
                self.report(ApiError(r.status, r.error.code if r.error else "", f"{what} {r.receipt}: "
                                     + (r.error.message if r.error else "")))


def _in_daemon(call: Callable[[], Any]) -> "concurrent.futures.Future[Any]":
    """call() in a daemon thread: a receive abandoned by a stop keeps no exiting interpreter
    waiting for its long poll."""
    f: "concurrent.futures.Future[Any]" = concurrent.futures.Future()

    def work() -> None:
        try:
            f.set_result(call())
        except BaseException as e:  # noqa: BLE001 - handed to the loop
            f.set_exception(e)

    threading.Thread(target=work, name="punctual-receive", daemon=True).start()
    return f


def consume(client: "Client", tenant: str, handler: Callable[[QueueMessage], Any], o: _Options,
            stop: Optional[threading.Event]) -> None:
    stop = stop or threading.Event()
    leases = _Leases(o.visibility_ms)
    slots = threading.Semaphore(o.held)
    handlers = concurrent.futures.ThreadPoolExecutor(o.concurrency, thread_name_prefix="punctual-handler")
    settling = threading.Event()

    def settle(verb: str, receipts: List[str], **kw: int) -> List[SettleResult]:
        try:
            results = getattr(client, verb)(tenant, receipts, **kw)
        except Exception as e:  # noqa: BLE001 - reported; the messages come back when their leases end
            o.report(e)
            return []
        o.check(verb, results)
        return results

    def give_back(f: "concurrent.futures.Future[List[QueueMessage]]") -> None:
        if not f.cancelled() and f.exception() is None and f.result():
            settle("nack", [m.receipt for m in f.result()], delay_ms=0)

    def run(m: QueueMessage) -> None:
        try:
            if stop.is_set():  # prefetched, not begun: given back
                leases.done(m.receipt, False)
                settle("nack", [m.receipt], delay_ms=0)
                return
            handler(m)
        except Exception as e:  # noqa: BLE001 - a handler's failure nacks its message
            leases.done(m.receipt, False)
            o.report(e)
            settle("nack", [m.receipt], delay_ms=o.nack_delay_ms)
        else:
            leases.done(m.receipt, True)
        finally:
            slots.release()

    def settler() -> None:
        while not settling.wait(_TICK):
            due = leases.due()
            if due:
                at = time.monotonic()
                leases.extended(settle("extend", due, visibility_ms=o.visibility_ms), at)
            while True:
                acks = leases.take_acks()
                if not acks:
                    break
                settle("ack", acks)
        while True:
            acks = leases.take_acks()
            if not acks:
                return
            settle("ack", acks)

    settler_thread = threading.Thread(target=settler, name="punctual-settler", daemon=True)
    settler_thread.start()
    failures = 0
    error: Optional[Exception] = None
    free = 0
    try:
        while not stop.is_set():
            while free < o.held and slots.acquire(blocking=False):
                free += 1
            if free < o.low:
                if slots.acquire(timeout=0.05):
                    free += 1
                continue
            sent = time.monotonic()
            f = _in_daemon(lambda: client.receive(tenant, max=free, wait_ms=o.wait_ms, visibility_ms=o.visibility_ms))
            while not stop.is_set():
                try:
                    f.result(timeout=0.05)
                    break
                except concurrent.futures.TimeoutError:
                    continue
                except Exception:  # noqa: BLE001 - read below
                    break
            if stop.is_set():  # what the receive brings is given back
                f.add_done_callback(give_back)
                break
            e = f.exception()
            if e is not None:
                if not isinstance(e, Exception) or not retriable(e):
                    error = e if isinstance(e, Exception) else RuntimeError(e)
                    break
                failures += 1
                o.report(e)
                stop.wait(o.backoff(client.retry, failures, e))
                continue
            failures = 0
            messages = f.result()
            free -= len(messages)
            began = o.lease_start(sent)
            for m in messages:
                leases.hold(m.receipt, began + o.visibility_ms / 1000)
                handlers.submit(run, m)
    finally:
        handlers.shutdown(wait=True)
        settling.set()
        settler_thread.join()
    if error is not None:
        raise error


async def consume_async(client: "AsyncClient", tenant: str, handler: Callable[[QueueMessage], Awaitable[Any]], o: _Options,
                        stop: Optional[asyncio.Event]) -> None:
    stop = stop or asyncio.Event()
    leases = _Leases(o.visibility_ms)
    slots = asyncio.Semaphore(o.held)
    gate = asyncio.Semaphore(o.concurrency)
    running: set = set()
    settling = asyncio.Event()

    async def settle(verb: str, receipts: List[str], **kw: int) -> List[SettleResult]:
        try:
            results = await getattr(client, verb)(tenant, receipts, **kw)
        except Exception as e:  # noqa: BLE001 - reported; the messages come back when their leases end
            o.report(e)
            return []
        o.check(verb, results)
        return results

    async def run(m: QueueMessage) -> None:
        try:
            async with gate:
                if stop.is_set():  # prefetched, not begun: given back
                    leases.done(m.receipt, False)
                    await settle("nack", [m.receipt], delay_ms=0)
                    return
                await handler(m)
        except Exception as e:  # noqa: BLE001 - a handler's failure nacks its message
            leases.done(m.receipt, False)
            o.report(e)
            await settle("nack", [m.receipt], delay_ms=o.nack_delay_ms)
        else:
            leases.done(m.receipt, True)
        finally:
            slots.release()

    async def ack_all() -> None:
        while True:
            acks = leases.take_acks()
            if not acks:
                return
            await settle("ack", acks)

    async def settler() -> None:
        while not settling.is_set():
            try:
                await asyncio.wait_for(settling.wait(), _TICK)
            except asyncio.TimeoutError:
                pass
            due = leases.due()
            if due:
                at = time.monotonic()
                leases.extended(await settle("extend", due, visibility_ms=o.visibility_ms), at)
            await ack_all()
        await ack_all()

    async def stopped() -> None:
        await stop.wait()

    settler_task = asyncio.ensure_future(settler())
    stop_task = asyncio.ensure_future(stopped())
    failures = 0
    error: Optional[Exception] = None
    free = 0
    try:
        while not stop.is_set():
            while free < o.held and not slots.locked():
                await slots.acquire()
                free += 1
            if free < o.low:
                acquire = asyncio.ensure_future(slots.acquire())
                await asyncio.wait({acquire, stop_task}, return_when=asyncio.FIRST_COMPLETED)
                if not acquire.done():
                    acquire.cancel()
                    break
                free += 1
                continue
            sent = time.monotonic()
            receive = asyncio.ensure_future(client.receive(tenant, max=free, wait_ms=o.wait_ms, visibility_ms=o.visibility_ms))
            await asyncio.wait({receive, stop_task}, return_when=asyncio.FIRST_COMPLETED)
            if not receive.done():  # stopped: the receive is abandoned, its leases end on their own
                receive.cancel()
                break
            e = receive.exception()
            if e is not None:
                if not isinstance(e, Exception) or not retriable(e):
                    error = e if isinstance(e, Exception) else RuntimeError(e)
                    break
                failures += 1
                o.report(e)
                try:
                    await asyncio.wait_for(stop.wait(), o.backoff(client.retry, failures, e))
                except asyncio.TimeoutError:
                    pass
                continue
            failures = 0
            messages = receive.result()
            if stop.is_set():
                if messages:
                    await settle("nack", [m.receipt for m in messages], delay_ms=0)
                break
            free -= len(messages)
            began = o.lease_start(sent)
            for m in messages:
                leases.hold(m.receipt, began + o.visibility_ms / 1000)
                t = asyncio.ensure_future(run(m))
                running.add(t)
                t.add_done_callback(running.discard)
    finally:
        stop_task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        settling.set()
        await settler_task
    if error is not None:
        raise error
