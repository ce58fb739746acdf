import datetime
import signal
import threading
import time

import pytest

import punctual
from punctual import ApiError, BatchItem, RetryPolicy
from conftest import QUOTA_TOKEN, SLOW_TOKEN, STD_TOKEN, ACME_TOKEN, start_redis, start_server


def recording(**kw):
    seen = []
    return seen, RetryPolicy(on_retry=lambda attempt, exc, wait: seen.append((exc, wait)), **kw)


def test_put_get_cancel_round_trip(open_server):
    with punctual.Client(open_server.url) as c:
        s = c.put("shop", "order:8812", delay_ms=900_000, payload={"order": 8812})
        assert s.created and s.tenant == "shop" and s.key == "order:8812"
        at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=123456) + datetime.timedelta(hours=1)
        r = c.put("shop", "order:8812", fire_at=at, payload={"order": 8812, "v": 2})
        assert not r.created and r.version > s.version and r.fire_at == at
        got = c.get("shop", "order:8812")
        assert got.version == r.version and got.payload == {"order": 8812, "v": 2} and got.fire_at == at
        ms = c.put("shop", "ms", fire_at_ms=1896084900000)
        assert ms.fire_at_us == 1896084900000000
        c.cancel("shop", "order:8812")
        with pytest.raises(ApiError) as e:
            c.cancel("shop", "order:8812")
        assert e.value.not_found and e.value.status == 404
        with pytest.raises(ApiError) as e:
            c.get("shop", "order:8812")
        assert e.value.code == "not_found" and e.value.message


@pytest.mark.parametrize("tenant,key,kw,code", [
    ("a b", "k", {"delay_ms": 1}, "invalid_tenant"),
    ("shop", "a/b", {"delay_ms": 1}, "invalid_key"),
    ("shop", "k", {}, "invalid_deadline"),
    ("shop", "k", {"delay_ms": 1, "fire_at_ms": 1}, "invalid_deadline"),
    ("shop", "k", {"delay_ms": 11 * 365 * 86_400_000}, "deadline_out_of_range"),
    ("shop", "k", {"delay_ms": 1, "payload": "x" * 70_000}, "payload_too_large"),
    ("shop", "k", {"delay_ms": 1, "callback": "http://elsewhere.example/"}, "callback_not_allowed"),
])
def test_bad_input_is_a_typed_error_and_not_retried(open_server, tenant, key, kw, code):
    seen, policy = recording()
    with punctual.Client(open_server.url, retry=policy) as c, pytest.raises(ApiError) as e:
        c.put(tenant, key, **kw)
    assert e.value.code == code and 400 <= e.value.status < 500
    assert seen == []


def test_batch_results_in_order_each_failing_alone(open_server):
    with punctual.Client(open_server.url) as c:
        items = [BatchItem("b1", delay_ms=3_600_000), BatchItem("b/2", delay_ms=1),
                 BatchItem("b3", fire_at_ms=1896084900000, payload="x"), BatchItem("b1", delay_ms=7_200_000)]
        res = c.batch("batch", items)
        assert [r.status for r in res] == [201, 400, 201, 200]
        assert [r.key for r in res] == ["b1", "b/2", "b3", "b1"]
        assert res[1].error.code == "invalid_key" and not res[1].ok and res[0].ok and res[0].version
        with pytest.raises(ApiError) as e:
            c.batch("batch", [])
        assert e.value.code == "empty_batch"
        assert c.get("batch", "b3").payload == "x"


def test_dead_letters_list_redrive_conflict_discard(open_server, receiver):
    status = {"now": 400}  # permanent: a dead letter at once
    delivered = []
    hook = receiver.mount("/dead", lambda h, body: (delivered.append(body), status["now"])[1])
    with punctual.Client(open_server.url) as c:
        for k in ("d1", "d2", "d3"):
            c.put("deadt", k, delay_ms=0, callback=hook, payload=k)
        end = time.monotonic() + 20
        while len(dead := c.dead_letters("deadt")) < 3 and time.monotonic() < end:
            time.sleep(0.05)
        assert [d.key for d in dead] == ["d1", "d2", "d3"]
        assert dead[0].last_status == 400 and dead[0].callback.url == hook and dead[0].payload == "d1"
        assert [d.key for d in c.dead_letters("deadt", limit=1, after="d1")] == ["d2"]

        c.put("deadt", "d1", delay_ms=3_600_000)
        with pytest.raises(ApiError) as e:
            c.redrive("deadt", "d1")
        assert e.value.status == 409 and e.value.code == "timer_pending"
        c.cancel("deadt", "d1")
        status["now"] = 204
        delivered.clear()
        s = c.redrive("deadt", "d1")
        assert s.version == dead[0].version
        end = time.monotonic() + 20
        while not delivered and time.monotonic() < end:
            time.sleep(0.02)
        assert delivered and b'"key":"d1"' in delivered[0]
        c.discard("deadt", "d2")
        with pytest.raises(ApiError) as e:
            c.discard("deadt", "d2")
        assert e.value.not_found


def test_health_metrics_cluster(open_server):
    with punctual.Client(open_server.url) as c:
        h = c.health()
        assert (h.status, h.store, h.shards) == ("ok", "journal", 2)
        m = c.metrics()
        assert m.rstrip().endswith("# EOF") and "punctual_" in m
        with pytest.raises(ApiError) as e:
            c.cluster()
        assert e.value.not_found


def test_tokens_and_unknown_tenants(tenants_server):
    url = tenants_server.url
    with punctual.Client(url) as anon, pytest.raises(ApiError) as e:
        anon.put("acme", "k", delay_ms=1000)
    assert e.value.code == "unauthorized" and e.value.status == 401
    with punctual.Client(url, token=STD_TOKEN) as wrong, pytest.raises(ApiError) as e:
        wrong.get("acme", "k")
    assert e.value.code == "unauthorized"
    with punctual.Client(url) as anon, pytest.raises(ApiError) as e:
        anon.put("nobody", "k", delay_ms=1000)
    assert e.value.code == "unknown_tenant"
    with punctual.Client(url, token=ACME_TOKEN) as c:
        c.put("acme", "k", delay_ms=3_600_000)
        c.cancel("acme", "k")


def test_quota_exceeded_carries_retry_after_and_is_not_retried(tenants_server):
    seen, policy = recording()
    with punctual.Client(tenants_server.url, token=QUOTA_TOKEN, retry=policy) as c:
        c.put("capped", "q1", delay_ms=3_600_000)
        c.put("capped", "q2", delay_ms=3_600_000)
        with pytest.raises(ApiError) as e:
            c.put("capped", "q3", delay_ms=3_600_000)
        assert (e.value.status, e.value.code) == (429, "quota_exceeded") and e.value.retry_after >= 1
        assert seen == []
        c.put("capped", "q1", delay_ms=7_200_000)  # a replacement past the quota


def test_rate_limited_waits_retry_after(tenants_server):
    with punctual.Client(tenants_server.url, token=SLOW_TOKEN, retry=punctual.NO_RETRY) as once:
        limited = None
        for _ in range(5):
            try:
                once.put("slow", "r", delay_ms=3_600_000)
            except ApiError as e:
                limited = e
                break
        assert limited and (limited.status, limited.code) == (429, "rate_limited") and limited.retry_after >= 1

    with punctual.Client(tenants_server.url, token=SLOW_TOKEN) as c:
        start = time.monotonic()
        with pytest.raises(ApiError) as e:
            c.put("slow", "r", delay_ms=3_600_000, timeout=0.3)
        assert e.value.code == "rate_limited" and time.monotonic() - start < 0.25

    seen, policy = recording()
    with punctual.Client(tenants_server.url, token=SLOW_TOKEN, retry=policy) as c:
        for _ in range(3):
            c.put("slow", "r", delay_ms=3_600_000)
    waits = [w for exc, w in seen if getattr(exc, "code", "") == "rate_limited"]
    assert waits and min(waits) >= 1


def test_store_unavailable_is_retried_after_retry_after():
    """The store stopped by SIGSTOP: punctual answers 503 store_unavailable with Retry-After
    after its 2-second bound; the PUT waits at least that long and succeeds once the store is
    continued."""
    redis = start_redis()
    try:
        s = start_server("", "--redis", redis.url)
        try:
            seen, policy = recording()
            with punctual.Client(s.url, retry=policy) as c:
                redis.signal(signal.SIGSTOP)
                threading.Timer(2.5, redis.signal, (signal.SIGCONT,)).start()
                # The attempt answered 503 may still have become durable: then the retry
                # replaced it (200), which is why a PUT is safe to retry.
                c.put("shop", "k", delay_ms=3_600_000, payload="after")
                assert c.get("shop", "k").payload == "after"
            first, wait = seen[0]
            assert isinstance(first, ApiError) and (first.status, first.code) == (503, "store_unavailable")
            assert first.retry_after >= 1 and wait >= first.retry_after
        finally:
            s.stop()
    finally:
        redis.stop()


def test_stopped_server_put_retries_until_continued(open_server):
    """A server stopped by SIGSTOP answers nothing: each attempt times out, the PUT is tried
    again and succeeds once the server is continued. The call's timeout bounds the retries; a
    re-drive is never retried."""
    seen, policy = recording(attempt_timeout=0.3, max_attempts=20)
    with punctual.Client(open_server.url, retry=policy) as c:
        open_server.signal(signal.SIGSTOP)
        threading.Timer(1.5, open_server.proc.send_signal, (signal.SIGCONT,)).start()
        start = time.monotonic()
        c.put("stall", "k", delay_ms=3_600_000, payload="after")
        assert time.monotonic() - start >= 1.4
        assert len(seen) >= 2 and isinstance(seen[0][0], punctual.TransportError)
        # Every attempt that timed out was sent: the pending timer is one of them.
        assert c.get("stall", "k").payload == "after"

        open_server.signal(signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.raises(punctual.TransportError):
                c.put("stall", "k", delay_ms=3_600_000, timeout=0.8)
            assert time.monotonic() - start < 1.5
            seen.clear()
            with pytest.raises(punctual.TransportError):
                c.redrive("stall", "nothing")
            assert seen == []
        finally:
            open_server.proc.send_signal(signal.SIGCONT)
