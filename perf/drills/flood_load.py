"""The flood drill's load: the flood and bulk tenants' worker processes (`flood.py --worker
...`), the verification of every acknowledged timer (`flood.py --verify ...`), and the
counting of answers."""

import http.client
import json
import random
import threading
import time
from collections import Counter

from common import Conn, env_int

BULK_BATCH = env_int("BULK_BATCH", 1000)
FLOOD_BATCH = env_int("FLOOD_BATCH", 200)
FLOOD_ALONE = 0.2                 # the first 20% of the run: flood alone, so it meets its quota
                                  # before the bulk tenants fill the shards (then both go on)
FAR_DELAY_MS = 3_600_000          # flood and bulk timers: due in an hour, so they stay pending
BULK_TENANTS = ["bulk0", "bulk1", "bulk2", "bulk3"]
KEY_LEN = 24                      # every key is exactly this long (it enters the memory bound)
PAYLOAD = '"' + "x" * 62 + '"'    # every payload: 64 bytes of JSON text
CLIENT_TIMEOUT_S = 30             # a request slower than this counts as a failure


def key_of(prefix, seq):
    k = f"{prefix}-{seq:0{KEY_LEN - len(prefix) - 1}d}"
    assert len(k) == KEY_LEN
    return k


class Client(Conn):
    """One keep-alive connection. `call` answers (status, headers, body bytes), or raises
    OSError / http.client.HTTPException on a transport failure (then reconnects next time)."""

    def __init__(self, port):
        super().__init__(port, CLIENT_TIMEOUT_S)

    def call(self, method, path, body=None):
        return self.exchange(method, path, body)


class Tally:
    """Counts outcomes as (who, what, level, status, code, retry_after_ok) -> n.
    level is "req" for a whole request's answer, "item" for one item of a batch."""

    def __init__(self):
        self.c = Counter()
        self.lock = threading.Lock()

    def add(self, who, what, level, status, code, ra_ok, n=1):
        with self.lock:
            self.c[(who, what, level, status, code, ra_ok)] += n

    def answer(self, who, what, status, headers, body):
        """Counts a whole answer; the parsed JSON body of a 2xx, else None."""
        if 200 <= status < 300:
            self.add(who, what, "req", status, "", None)
            try:
                return json.loads(body) if body else {}
            except ValueError:
                self.add(who, what, "req", status, "<2xx body not JSON>", None)
                return None
        code = "<no JSON error code>"
        try:
            code = json.loads(body)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            pass
        ra = headers.get("Retry-After") if headers is not None else None
        ra_ok = ra is not None and ra.strip().isdigit() and int(ra) >= 1
        self.add(who, what, "req", status, code, ra_ok)
        return None


def put_body(delay_ms, extra=""):
    return f'{{"delay_ms":{delay_ms},"payload":{PAYLOAD}{extra}}}'


def batch_body(keys, delay_ms):
    items = ",".join(f'{{"key":"{k}","delay_ms":{delay_ms},"payload":{PAYLOAD}}}' for k in keys)
    return '{"timers":[' + items + "]}"


def flood_thread(port, prefix, bulk_at, end_at, tally, acked, failures):
    """One connection of the flood. acked: (tenant, key) -> [version, fire_at_us, ambiguous];
    `ambiguous` marks a replacement whose outcome is unknown (a 503 store_unavailable or a
    transport error: it may or may not have been applied, so any later version is fine)."""
    cl = Client(port)
    rnd = random.Random(prefix)
    seq = 0
    mine_flood = []          # flood keys this thread got acknowledged, for replacements
    bulk = BULK_TENANTS[int(prefix[-2:]) % len(BULK_TENANTS)]

    def new_keys(n):
        nonlocal seq
        ks = [key_of(prefix, seq + i) for i in range(n)]
        seq += n
        return ks

    while time.monotonic() < end_at:
        r = rnd.random()
        who, what = "flood", "?"
        if time.monotonic() < bulk_at and 0.35 <= r < 0.45:
            r -= 0.1            # flood alone first: its single PUT instead of a bulk one
        elif time.monotonic() < bulk_at and r >= 0.55:
            r = 0.5             # and its batch instead of a bulk batch
        try:
            if r < 0.10 and mine_flood:
                # Replace one of flood's own pending timers: must never be refused for quota
                # or capacity, even when flood is at its quota and the shard is full.
                what = "PUT-replace"
                k = rnd.choice(mine_flood)
                try:
                    st, h, b = cl.call("PUT", f"/v1/timers/flood/{k}", put_body(FAR_DELAY_MS))
                except (OSError, http.client.HTTPException):
                    acked[("flood", k)][2] = True     # may or may not have been applied
                    raise
                j = tally.answer(who, what, st, h, b)
                if j is not None:
                    acked[("flood", k)] = [j["version"], j["fire_at_us"], False]
                elif st == 503:
                    acked[("flood", k)][2] = True
            elif r < 0.45:
                # One new timer: flood's (to pass its quota) or a bulk tenant's (to fill shards).
                tenant = "flood" if r < 0.35 else bulk
                who, what = ("flood" if tenant == "flood" else "bulk"), "PUT"
                (k,) = new_keys(1)
                st, h, b = cl.call("PUT", f"/v1/timers/{tenant}/{k}", put_body(FAR_DELAY_MS))
                j = tally.answer(who, what, st, h, b)
                if j is not None:
                    acked[(tenant, k)] = [j["version"], j["fire_at_us"], False]
                    if tenant == "flood":
                        mine_flood.append(k)
            else:
                # A batch of new timers: FLOOD_BATCH for flood, BULK_BATCH for a bulk tenant.
                tenant, n = ("flood", FLOOD_BATCH) if r < 0.55 else (bulk, BULK_BATCH)
                who, what = ("flood" if tenant == "flood" else "bulk"), "POST"
                ks = new_keys(n)
                st, h, b = cl.call("POST", f"/v1/timers/{tenant}", batch_body(ks, FAR_DELAY_MS))
                j = tally.answer(who, what, st, h, b)
                if j is not None:
                    res = j.get("results", [])
                    if len(res) != len(ks):
                        tally.add(who, what, "item", -1, "<result count != item count>", None)
                    items = Counter()
                    for k, it in zip(ks, res):
                        s = it.get("status")
                        if s in (200, 201) and it.get("key") == k:
                            acked[(tenant, k)] = [it["version"], it["fire_at_us"], False]
                            if tenant == "flood":
                                mine_flood.append(k)
                            items[(s, "")] += 1
                        else:
                            code = (it.get("error") or {}).get("code", "<no code>")
                            items[(s, code)] += 1
                    for (s, code), n_ in items.items():
                        tally.add(who, what, "item", s, code, None, n_)
        except (OSError, http.client.HTTPException) as e:
            failures.append(f"{prefix} {who} {what}: {type(e).__name__}: {e}")
            tally.add(who, what, "req", 0, "<" + type(e).__name__ + ">", None)
        except (ValueError, KeyError, TypeError) as e:
            # A 2xx whose body is not what docs/API.md describes.
            failures.append(f"{prefix} {who} {what}: unexpected answer: {type(e).__name__}: {e}")
            tally.add(who, what, "req", 0, "<unexpected 2xx body>", None)
    cl.close()


def worker_main(args):
    tally = Tally()
    acked = {}
    failures = []
    # Every process starts at the same wall-clock instant.
    time.sleep(max(0.0, args.start_at - time.time()))
    t0 = time.monotonic()
    end_at = t0 + args.seconds
    bulk_at = t0 + args.seconds * FLOOD_ALONE
    threads = [threading.Thread(target=flood_thread,
                                args=(args.port, f"w{args.index}{t:02d}", bulk_at, end_at, tally, acked, failures))
               for t in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(args.out, "w") as f:
        json.dump({"tally": [list(k) + [n] for k, n in tally.c.items()],
                   "acked": [[t, k, v[0], v[1], v[2]] for (t, k), v in acked.items()],
                   "failures": failures[:50], "n_failures": len(failures)}, f)


def verify_main(args):
    """GETs every key in args.keys (a JSON list of [tenant, key, version, fire_at_us,
    ambiguous]) and writes what does not match."""
    with open(args.keys) as f:
        todo = json.load(f)
    bad, errors = [], Counter()
    lock = threading.Lock()
    ok = [0]

    def run(part):
        cl = Client(args.port)
        for tenant, key, version, fire_at, amb in part:
            for attempt in range(5):
                try:
                    st, _, b = cl.call("GET", f"/v1/timers/{tenant}/{key}")
                except (OSError, http.client.HTTPException) as e:
                    with lock:
                        errors[type(e).__name__] += 1
                    time.sleep(0.2)
                    continue
                if st == 503:           # overloaded or still recovering: not an answer yet
                    with lock:
                        errors["503"] += 1
                    time.sleep(0.2)
                    continue
                break
            else:
                with lock:
                    bad.append([tenant, key, "no answer after 5 tries"])
                continue
            if st == 200:
                j = json.loads(b)
                good = (j["version"] >= version) if amb else (j["version"] == version and j["fire_at_us"] == fire_at)
                if good:
                    with lock:
                        ok[0] += 1
                    continue
                why = f"pending with version {j['version']} fire_at_us {j['fire_at_us']}, acknowledged {version} {fire_at}"
            else:
                why = f"GET answered {st}: {b[:120]!r}"
            with lock:
                bad.append([tenant, key, why])
        cl.close()

    n = args.threads
    threads = [threading.Thread(target=run, args=(todo[i::n],)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(args.out, "w") as f:
        json.dump({"ok": ok[0], "bad": bad, "errors": dict(errors)}, f)
