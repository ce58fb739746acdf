"""The pull consumer's loop, blocking and asyncio, against the real server."""

import asyncio
import collections
import threading
import time

import httpx
import pytest

import punctual
from punctual import BatchItem

from conftest import queue_token


def client(server, tenant):
    return punctual.Client(server.url, token=queue_token(tenant))


def put_due(c, tenant, prefix, n):
    """n timers due at once, keyed prefix-0 … prefix-(n-1), in batches."""
    for start in range(0, n, 2000):
        results = c.batch(tenant, [BatchItem(f"{prefix}-{i}", delay_ms=0) for i in range(start, min(n, start + 2000))])
        assert all(r.ok for r in results)


def wait_for(what, within, cond):
    end = time.monotonic() + within
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {within} s")
        time.sleep(0.01)


class Loop:
    """c.consume in a thread of its own until stop()."""

    def __init__(self, c, tenant, handler, **kw):
        self.stop_event = threading.Event()
        self.error = None

        def run():
            try:
                c.consume(tenant, handler, stop=self.stop_event, **kw)
            except Exception as e:  # noqa: BLE001 - the test reads it
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "consume did not return within 30 s of its stop"
        assert self.error is None, self.error


def assert_empty(c, tenant):
    d = c.queue(tenant)
    assert (d.depth, d.in_flight) == (0, 0), d


N = 10_000


def test_two_loops_handle_10000_messages_exactly_once(tenants_server):
    with client(tenants_server, "work") as c:
        put_due(c, "work", "job", N)
        seen = collections.Counter()
        lock = threading.Lock()
        problems = []

        def handle(m):
            with lock:
                seen[(m.key, m.version)] += 1

        # Two workers, one handler each; a receive brings up to 100 messages, which Python's
        # cost per request makes worth it.
        loops = [Loop(c, "work", handle, prefetch=100, visibility_ms=60_000, on_error=problems.append) for _ in range(2)]
        wait_for("10,000 messages handled", 60, lambda: sum(seen.values()) >= N)
        for loop in loops:
            loop.stop()
        assert sum(seen.values()) == N and len(seen) == N
        assert sorted(k for k, _ in seen) == sorted(f"job-{i}" for i in range(N))
        assert set(seen.values()) == {1}
        assert problems == []
        assert_empty(c, "work")


def test_a_failed_handler_gets_its_message_again_after_the_nack_delay(tenants_server):
    with client(tenants_server, "flaky") as c:
        c.put("flaky", "once", delay_ms=0)
        calls = []

        def handle(m):
            calls.append((m.receive_count, time.monotonic()))
            if len(calls) == 1:
                raise RuntimeError("the first try fails")

        errors = []
        loop = Loop(c, "flaky", handle, concurrency=2, nack_delay_ms=300, on_error=errors.append)
        wait_for("the second handling", 20, lambda: len(calls) >= 2)
        loop.stop()
        assert [n for n, _ in calls] == [1, 2]
        assert calls[1][1] - calls[0][1] >= 0.3
        assert [str(e) for e in errors] == ["the first try fails"]
        assert_empty(c, "flaky")


def test_a_slow_handler_keeps_its_lease_and_the_other_loop_never_gets_it(tenants_server):
    with client(tenants_server, "lingering") as c:
        c.put("lingering", "long", delay_ms=0)
        handled = []
        errors = []

        def handle(m):
            handled.append(m.receive_count)
            time.sleep(3)  # three times the visibility

        loops = [Loop(c, "lingering", handle, visibility_ms=1000, wait_ms=200, on_error=errors.append) for _ in range(2)]
        wait_for("the handling", 20, lambda: handled)
        time.sleep(3.5)  # past its end, so that a second receive would have come
        for loop in loops:
            loop.stop()
        assert handled == [1] and errors == []
        assert_empty(c, "lingering")


def test_stop_returns_once_the_running_handlers_finish_and_are_acknowledged(tenants_server):
    with client(tenants_server, "stopping") as c:
        put_due(c, "stopping", "s", 3)
        release = threading.Event()
        started, finished = [], []

        def handle(m):
            started.append(m.key)
            release.wait(20)
            time.sleep(0.1)
            finished.append(m.key)

        loop = Loop(c, "stopping", handle, concurrency=3, visibility_ms=60_000)
        wait_for("three handlers running", 20, lambda: len(started) == 3)
        loop.stop_event.set()
        time.sleep(0.3)
        assert loop.thread.is_alive(), "consume returned while its handlers ran"
        c.put("stopping", "after-stop", delay_ms=0)
        release.set()
        loop.stop()
        assert len(finished) == 3
        wait_for("the message put after the stop, ready", 10, lambda: c.queue("stopping").ready == 1)
        d = c.queue("stopping")
        assert (d.in_flight, d.depth) == (0, 1), d


def test_stop_gives_back_the_prefetched_messages_not_begun(tenants_server):
    with client(tenants_server, "prefetched") as c:
        put_due(c, "prefetched", "p", 5)
        release = threading.Event()
        started = []

        def handle(m):
            started.append(m.key)
            release.wait(20)

        loop = Loop(c, "prefetched", handle, prefetch=10, visibility_ms=60_000)
        wait_for("all five received", 20, lambda: started and c.queue("prefetched").in_flight == 5)
        loop.stop_event.set()
        release.set()
        loop.stop()
        assert len(started) == 1
        d = c.queue("prefetched")
        assert (d.in_flight, d.ready) == (0, 4), d


def test_a_rate_limited_receive_is_followed_by_the_next_only_after_its_retry_after(tenants_server):
    log = []  # (when, "request" or the status, path, Retry-After)

    def on_request(request):
        log.append((time.monotonic(), "request", request.url.path, None))

    def on_response(response):
        log.append((time.monotonic(), response.status_code, response.request.url.path, response.headers.get("retry-after")))

    http = httpx.Client(event_hooks={"request": [on_request], "response": [on_response]})
    with punctual.Client(tenants_server.url, token=queue_token("throttled"), http=http) as c:
        put_due(c, "throttled", "r", 3)
        seen = collections.Counter()
        limited = []
        loop = Loop(c, "throttled", lambda m: seen.update([m.key]), visibility_ms=60_000, wait_ms=1000,
                    on_error=lambda e: limited.append(e) if getattr(e, "code", "") == "rate_limited" else None)
        wait_for("three messages handled and a receive refused", 30, lambda: len(seen) == 3 and limited)
        loop.stop()
        assert set(seen.values()) == {1}
    receives = [e for e in log if e[2].endswith("/receive")]
    refused = 0
    for i, (at, what, _, retry_after) in enumerate(receives):
        if what != 429:
            continue
        later = [e for e in receives[i + 1:] if e[1] == "request"]
        if later:
            refused += 1
            assert later[0][0] - at >= float(retry_after), (retry_after, later[0][0] - at)
    assert refused > 0, receives


def test_consume_raises_a_receive_that_cannot_succeed(tenants_server):
    with punctual.Client(tenants_server.url, token="acme-token-0123456789abcdef0123456789") as c:
        with pytest.raises(punctual.ApiError) as e:
            c.consume("acme", lambda m: None)
        assert e.value.not_found


def test_async_loops_handle_10000_messages_exactly_once(tenants_server):
    async def main():
        async with punctual.AsyncClient(tenants_server.url, token=queue_token("awork")) as c:
            with client(tenants_server, "awork") as sync:
                put_due(sync, "awork", "job", N)
            seen = collections.Counter()
            problems = []
            done = asyncio.Event()

            async def handle(m):
                seen[(m.key, m.version)] += 1
                if sum(seen.values()) >= N:
                    done.set()

            stop = asyncio.Event()
            loops = [asyncio.ensure_future(c.consume("awork", handle, prefetch=100, visibility_ms=60_000, stop=stop, on_error=problems.append))
                     for _ in range(2)]
            await asyncio.wait_for(done.wait(), 60)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*loops), 30)
            assert len(seen) == N and set(seen.values()) == {1} and problems == []
            assert (await c.queue("awork")).in_flight == 0 and (await c.queue("awork")).depth == 0

    asyncio.run(main())


def test_async_stop_waits_for_running_handlers_and_cancels_the_waiting_receive(tenants_server):
    async def main():
        async with punctual.AsyncClient(tenants_server.url, token=queue_token("astopping")) as c:
            await c.put("astopping", "a", delay_ms=0)
            release = asyncio.Event()
            started, finished = [], []

            async def handle(m):
                started.append(m.key)
                await release.wait()
                await asyncio.sleep(0.1)
                finished.append(m.key)

            stop = asyncio.Event()
            loop = asyncio.ensure_future(c.consume("astopping", handle, concurrency=2, visibility_ms=60_000, stop=stop))
            end = time.monotonic() + 20
            while not started:
                assert time.monotonic() < end, "no handling within 20 s"
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # the second slot's receive is waiting now
            stop.set()
            await asyncio.sleep(0.3)
            assert not loop.done(), "consume returned while its handler ran"
            release.set()
            await asyncio.wait_for(loop, 10)  # well within the receive's 20 s wait
            assert finished == ["a"]
            d = await c.queue("astopping")
            assert (d.in_flight, d.depth) == (0, 0), d

    asyncio.run(main())


def test_async_a_failed_handler_is_nacked_and_a_slow_one_extended(tenants_server):
    async def main():
        flaky = punctual.AsyncClient(tenants_server.url, token=queue_token("aflaky"))
        lingering = punctual.AsyncClient(tenants_server.url, token=queue_token("alingering"))
        async with flaky, lingering:
            await flaky.put("aflaky", "once", delay_ms=0)
            await lingering.put("alingering", "long", delay_ms=0)
            calls, slow, errors = [], [], []

            async def fail_once(m):
                calls.append((m.receive_count, time.monotonic()))
                if len(calls) == 1:
                    raise RuntimeError("the first try fails")

            async def take_long(m):
                slow.append(m.receive_count)
                await asyncio.sleep(3)  # three times the visibility

            stop = asyncio.Event()
            loops = [asyncio.ensure_future(flaky.consume("aflaky", fail_once, nack_delay_ms=300, stop=stop))]
            loops += [asyncio.ensure_future(lingering.consume("alingering", take_long, visibility_ms=1000, wait_ms=200, stop=stop,
                                                              on_error=errors.append)) for _ in range(2)]
            end = time.monotonic() + 20
            while len(calls) < 2 or not slow:
                assert time.monotonic() < end, (calls, slow)
                await asyncio.sleep(0.01)
            await asyncio.sleep(3.5)  # past the slow handler's end, so that a second receive would have come
            stop.set()
            await asyncio.wait_for(asyncio.gather(*loops), 30)
            assert [n for n, _ in calls] == [1, 2] and calls[1][1] - calls[0][1] >= 0.3
            assert slow == [1] and errors == []
            for c, tenant in ((flaky, "aflaky"), (lingering, "alingering")):
                d = await c.queue(tenant)
                assert (d.depth, d.in_flight) == (0, 0), d

    asyncio.run(main())
