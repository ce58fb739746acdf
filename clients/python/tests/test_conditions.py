"""Conditional writes: if_="absent", if_version on put, batch items and cancel."""

import pytest

import punctual
from punctual import ApiError, BatchItem


def test_conditional_writes_and_cancels(open_server):
    with punctual.Client(open_server.url) as c:
        first = c.put("shop", "cond", delay_ms=3_600_000, if_="absent")
        assert first.created
        with pytest.raises(ApiError) as e:
            c.put("shop", "cond", delay_ms=60_000, if_="absent")
        assert e.value.status == 409 and e.value.code == "exists" and e.value.conflict
        assert e.value.version == first.version and e.value.fire_at_us == first.fire_at_us
        with pytest.raises(ApiError) as e:
            c.put("shop", "cond", delay_ms=60_000, if_version=first.version + 1)
        assert e.value.code == "version_mismatch" and e.value.version == first.version
        second = c.put("shop", "cond", delay_ms=3_600_000, if_version=first.version)
        assert not second.created and second.version > first.version
        with pytest.raises(ApiError) as e:
            c.put("shop", "cond-none", delay_ms=1, if_version=7)
        assert e.value.not_found
        with pytest.raises(ApiError) as e:
            c.cancel("shop", "cond", if_version=first.version)
        assert e.value.conflict and e.value.version == second.version
        c.cancel("shop", "cond", if_version=second.version)
        results = c.batch("shop", [BatchItem("cond-b", delay_ms=3_600_000, if_="absent"),
                                   BatchItem("cond-b", delay_ms=3_600_000, if_="absent")])
        assert [r.status for r in results] == [201, 409]
        assert results[1].error.code == "exists" and results[1].error.version == results[0].version
        for k in ("cond-l1", "cond-l2", "cond-l3"):
            c.put("shop", k, delay_ms=3_600_000, payload=k)
        p = c.list("shop", prefix="cond-l", limit=2, payloads=True)
        assert [t.key for t in p.timers] == ["cond-l1", "cond-l2"] and p.next == "cond-l2"
        assert p.timers[0].payload == "cond-l1"
        p = c.list("shop", prefix="cond-l", after=p.next)
        assert [t.key for t in p.timers] == ["cond-l3"] and p.next is None
        d = c.put("shop", "cond-d", delay_ms=3_600_000, debounce=punctual.Debounce(60_000))
        got = c.get("shop", "cond-d")
        assert got.debounce.max_wait_ms == 60_000 and got.debounce.cap_us == got.debounce.first_at_us + 60_000_000
        assert d.fire_at_us == got.debounce.cap_us
