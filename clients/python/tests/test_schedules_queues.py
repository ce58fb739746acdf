"""Recurring schedules and pull queues against the real server."""

import asyncio
import datetime
import time

import pytest

import punctual
from punctual import ApiError, CatchUp, Dst, RetryPolicy
from conftest import ACME_TOKEN, PULL_TOKEN


def test_schedule_put_get_pause_resume_delete_round_trip(open_server):
    with punctual.Client(open_server.url) as c:
        s = c.put_schedule("cron", "nightly", cron="30 2 * * *", time_zone="Asia/Kolkata",
                           catch_up=CatchUp(policy="latest", window_ms=3_600_000), dst=Dst(gap="shift", overlap="first"),
                           payload={"job": "reconcile"})
        assert s.created and s.tenant == "cron" and s.key == "nightly" and not s.paused and s.sequence == 0
        assert s.definition["cron"] == "30 2 * * *" and s.definition["catch_up"] == {"policy": "latest", "window_ms": 3_600_000}
        got = c.get_schedule("cron", "nightly", next=3)
        assert got.version == s.version and len(got.next) == 3
        now = datetime.datetime.now(datetime.timezone.utc)
        for o in got.next:
            local = datetime.datetime.fromisoformat(o.local)
            assert local == o.at and local.strftime("%H:%M") == "02:30" and o.at > now
            assert local.utcoffset() == datetime.timedelta(hours=5, minutes=30)
        assert [o.occurrence_us for o in got.next] == sorted(o.occurrence_us for o in got.next)
        assert len(c.get_schedule("cron", "nightly").next) == 5  # the server's default

        paused = c.pause_schedule("cron", "nightly")
        assert paused.paused and paused.version != got.version
        assert c.get_schedule("cron", "nightly").paused
        resumed = c.resume_schedule("cron", "nightly")
        assert not resumed.paused and c.get_schedule("cron", "nightly").paused is False

        replaced = c.put_schedule("cron", "nightly", every_ms=60_000, payload="p")
        assert not replaced.created and replaced.definition == {"every_ms": 60_000, "payload": "p"}
        c.put_schedule("cron", "other", every_ms=3_600_000)
        page = c.schedules("cron", limit=1)
        assert [x.key for x in page.schedules] == ["nightly"] and page.next == "nightly"
        rest = c.schedules("cron", after=page.next)
        assert [x.key for x in rest.schedules] == ["other"] and rest.next is None

        c.delete_schedule("cron", "nightly")
        with pytest.raises(ApiError) as e:
            c.get_schedule("cron", "nightly")
        assert e.value.not_found
        with pytest.raises(ApiError) as e:
            c.delete_schedule("cron", "nightly")
        assert e.value.not_found and e.value.status == 404


@pytest.mark.parametrize("kw,field", [
    ({"cron": "0 0 30 2 *"}, "cron"),
    ({"cron": "* * * * *", "time_zone": "Mars/Olympus"}, "time_zone"),
    ({"cron": "* * * * *", "every_ms": 60_000}, ""),
    ({"every_ms": 10}, "every_ms"),
])
def test_a_schedule_that_cannot_fire_is_invalid_field_and_not_retried(open_server, kw, field):
    seen = []
    policy = RetryPolicy(on_retry=lambda *a: seen.append(a))
    with punctual.Client(open_server.url, retry=policy) as c, pytest.raises(ApiError) as e:
        c.put_schedule("cron", "bad", **kw)
    assert e.value.status == 400 and e.value.code == "invalid_field" and e.value.message.startswith(field)
    assert seen == []


def test_a_naive_start_at_is_refused_before_sending(open_server):
    with punctual.Client(open_server.url) as c, pytest.raises(ValueError):
        c.put_schedule("cron", "naive", every_ms=60_000, start_at=datetime.datetime(2030, 1, 1))


def receive_one(c, tenant, **kw):
    end = time.monotonic() + 10
    while time.monotonic() < end:
        got = c.receive(tenant, wait_ms=1000, **kw)
        if got:
            return got
    raise AssertionError("no message within 10 s")


def test_queue_receive_ack_round_trip(tenants_server):
    with punctual.Client(tenants_server.url, token=PULL_TOKEN) as c:
        put = c.put("pull", "order-1", delay_ms=1, payload={"order": 1})
        [m] = receive_one(c, "pull", max=10, visibility_ms=30_000)
        assert (m.key, m.version, m.receive_count, m.payload) == ("order-1", put.version, 1, {"order": 1})
        assert m.fire_at_us == put.fire_at_us and m.fired_at_us >= m.fire_at_us and m.receipt
        depth = c.queue("pull")
        assert (depth.tenant, depth.in_flight, depth.depth, depth.max_receives) == ("pull", 1, 0, 3)
        [ext] = c.extend("pull", [m.receipt], visibility_ms=60_000)
        assert ext.ok and ext.receipt == m.receipt
        [ok, forged] = c.ack("pull", [m.receipt, "not-a-receipt"])
        assert ok.ok and ok.status == 204 and ok.error is None
        assert forged.status == 404 and forged.error.code == "unknown_receipt" and not forged.ok
        [again] = c.ack("pull", [m.receipt])
        assert again.status == 409 and again.error.code == "lease_expired"
        assert c.queue("pull").in_flight == 0 and c.receive("pull") == []
        with pytest.raises(ApiError) as e:
            c.get("pull", "order-1")
        assert e.value.not_found


def test_queue_nack_gives_the_message_back(tenants_server):
    with punctual.Client(tenants_server.url, token=PULL_TOKEN) as c:
        c.put("pull", "order-2", delay_ms=1, payload=2)
        [m] = receive_one(c, "pull")
        [n] = c.nack("pull", [m.receipt], delay_ms=0)
        assert n.ok
        [again] = receive_one(c, "pull")
        assert again.key == "order-2" and again.receive_count == 2 and again.receipt != m.receipt
        assert [r.status for r in c.ack("pull", [again.receipt])] == [204]


def test_queue_routes_of_a_tenant_without_a_queue_are_not_found(tenants_server):
    with punctual.Client(tenants_server.url, token=ACME_TOKEN) as c, pytest.raises(ApiError) as e:
        c.queue("acme")
    assert e.value.not_found


def test_a_long_poll_outlasts_the_attempt_timeout_and_the_async_client_has_every_call(tenants_server, open_server):
    """wait_ms is added to each attempt's bound: a receive that waits longer than
    RetryPolicy.attempt_timeout for a message is not cut off."""
    async def main():
        policy = RetryPolicy(attempt_timeout=0.3)
        async with punctual.AsyncClient(tenants_server.url, token=PULL_TOKEN, retry=policy) as c:
            start = time.monotonic()
            assert await c.receive("pull", wait_ms=1000) == []
            assert time.monotonic() - start >= 0.9
        async with punctual.AsyncClient(open_server.url) as c:
            s = await c.put_schedule("async", "every-hour", every_ms=3_600_000)
            assert s.created and len((await c.get_schedule("async", "every-hour", next=1)).next) == 1
            assert (await c.pause_schedule("async", "every-hour")).paused
            assert not (await c.resume_schedule("async", "every-hour")).paused
            assert [x.key for x in (await c.schedules("async")).schedules] == ["every-hour"]
            await c.delete_schedule("async", "every-hour")

    asyncio.run(main())
