"""The history of fires against the real server: each fire's attempts and where it ended."""

import asyncio
import json
import threading
import time

import punctual


def test_history_shows_attempts_and_outcome_by_key(open_server, receiver):
    # A webhook answered 503 then 204 is delivered after two attempts; one refused with 400 is
    # a dead letter after one.
    answered = {}
    lock = threading.Lock()

    def hook(headers, body):
        key = json.loads(body)["key"]
        with lock:
            answered[key] = answered.get(key, 0) + 1
            n = answered[key]
        if key == "refused":
            return 400
        return 503 if n == 1 else 204

    url = receiver.mount("/history", hook)
    with punctual.Client(open_server.url) as c:
        versions = {k: c.put("histt", k, delay_ms=0, callback=url).version for k in ("refused", "late-ok")}

        def settled(key, outcome):
            # The outcome is written off the fire path: wait for it.
            end = time.monotonic() + 20
            while True:
                page = c.history("histt", key=key)
                if (len(page.entries) == 1 and page.entries[0].outcome == outcome) or time.monotonic() > end:
                    break
                time.sleep(0.05)
            assert [(e.key, e.outcome) for e in page.entries] == [(key, outcome)]
            return page.entries[0]

        ok = settled("late-ok", "delivered")
        assert ok.version == versions["late-ok"]
        assert ok.fired_at_us >= ok.fire_at_us and ok.lateness_us == ok.fired_at_us - ok.fire_at_us
        assert isinstance(ok.attempts[0], punctual.HistoryAttempt)
        assert [(a.status, a.error) for a in ok.attempts] == [(503, None), (204, None)]
        assert ok.attempts[0].at_us <= ok.attempts[1].at_us

        dead = settled("refused", "dead_lettered")
        assert dead.version == versions["refused"]
        assert [(a.status, a.error) for a in dead.attempts] == [(400, None)]

        # All the tenant's entries, one a page, through the cursor.
        first = c.history("histt", limit=1)
        assert len(first.entries) == 1 and first.next is not None
        second = c.history("histt", limit=1, after=first.next)
        assert {first.entries[0].key, second.entries[0].key} == {"refused", "late-ok"}
        if second.next is not None:  # a full last page may still name a cursor: nothing follows
            rest = c.history("histt", after=second.next)
            assert rest.entries == [] and rest.next is None

    async def read_async():
        async with punctual.AsyncClient(open_server.url) as a:
            return await a.history("histt", key="late-ok", limit=5)

    page = asyncio.run(read_async())
    assert [(e.key, e.outcome, len(e.attempts)) for e in page.entries] == [("late-ok", "delivered", 2)]
