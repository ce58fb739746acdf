import asyncio
import signal
import time

import pytest

import punctual
from punctual import ApiError, BatchItem, RetryPolicy


def test_async_client_drives_the_same_routes(open_server):
    async def main():
        async with punctual.AsyncClient(open_server.url) as c:
            s = await c.put("async", "k", delay_ms=3_600_000, payload=[1, 2])
            assert s.created
            got = await c.get("async", "k")
            assert got.payload == [1, 2] and got.version == s.version
            res = await c.batch("async", [BatchItem("a", delay_ms=3_600_000), BatchItem("b", delay_ms=3_600_000)])
            assert [r.status for r in res] == [201, 201]
            await c.cancel("async", "k")
            with pytest.raises(ApiError) as e:
                await c.get("async", "k")
            assert e.value.not_found
            assert (await c.health()).status == "ok"
            assert await c.dead_letters("async") == []
            # Many calls at once on one client.
            done = await asyncio.gather(*(c.put("async", f"g{i}", delay_ms=3_600_000) for i in range(50)))
            assert all(d.created for d in done)

    asyncio.run(main())


def test_async_call_is_cancelled_with_its_task(open_server):
    """A call waiting on a stopped server ends when its task is cancelled (asyncio.wait_for)."""

    async def main():
        policy = RetryPolicy(attempt_timeout=0.2, max_attempts=100)
        async with punctual.AsyncClient(open_server.url, retry=policy, timeout=None) as c:
            open_server.signal(signal.SIGSTOP)
            try:
                start = time.monotonic()
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(c.put("async", "stalled", delay_ms=1), 0.7)
                assert time.monotonic() - start < 1.2
            finally:
                open_server.proc.send_signal(signal.SIGCONT)

    asyncio.run(main())


def test_async_rate_limited_carries_retry_after_and_is_waited_out(tenants_server):
    """A tenant limited to one request a second: without retries the async PUT raises
    429 rate_limited with Retry-After; with them, each retry waits at least Retry-After and
    every PUT lands. The wait is asyncio's, so other tasks run meanwhile."""
    from conftest import SLOW_TOKEN

    async def main():
        async with punctual.AsyncClient(tenants_server.url, token=SLOW_TOKEN, retry=punctual.NO_RETRY) as once:
            limited = None
            for _ in range(5):
                try:
                    await once.put("slow", "ar", delay_ms=3_600_000)
                except ApiError as e:
                    limited = e
                    break
            assert limited and (limited.status, limited.code) == (429, "rate_limited") and limited.retry_after >= 1

        seen = []
        policy = RetryPolicy(on_retry=lambda attempt, exc, wait: seen.append((exc, wait)))
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        tick = asyncio.create_task(ticker())
        try:
            async with punctual.AsyncClient(tenants_server.url, token=SLOW_TOKEN, retry=policy) as c:
                for i in range(3):
                    await c.put("slow", f"ar{i}", delay_ms=3_600_000)
        finally:
            tick.cancel()
        waits = [w for exc, w in seen if getattr(exc, "code", "") == "rate_limited"]
        assert waits and min(waits) >= 1
        # The event loop ran while the client waited: the waits were not blocking sleeps.
        assert ticks >= 10

    asyncio.run(main())
