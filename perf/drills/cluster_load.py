"""The cluster drill's load: threads that send new timers, replacements and cancels to the
nodes a load balancer would pick, and what each key was told."""

import http.client
import json
import random
import threading
import time

from common import env_float, env_int, now

RATE = env_float("RATE", 300)
LOAD_THREADS = env_int("LOAD_THREADS", 6)
BATCH = env_int("BATCH", 10)
TENANTS = ["shop", "ledger", "coupons", "stock"]
DELAY_MS = (1000, 12000)
TOUCH_MIN_AHEAD_S = 2.0      # a replace or cancel only of a timer due at least this far ahead
CLIENT_TIMEOUT_S = 10


class Targets:
    """The nodes a load balancer sends to now."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ports = []
        # The port of a node paused now (SIGSTOP): what it is sent meanwhile is counted apart.
        self.paused = None

    def set(self, ports):
        with self.lock:
            self.ports = list(ports)

    def pick(self, rnd):
        with self.lock:
            return rnd.choice(self.ports) if self.ports else None


class KeyLog:
    """What one key was told, in order: ("put", version, fire_at_us, t_ack_us, status),
    ("del", None, None, t_ack_us, status), ("unsure", …)."""

    def __init__(self):
        self.ops = []
        self.pending = None      # (version, fire_at_us) as last acknowledged, or None

    def unsure(self):
        return any(o[0] == "unsure" for o in self.ops)


def load_thread(idx, targets, stop, keys, stats, seed):
    rnd = random.Random(f"{seed}-{idx}")
    period = BATCH / (RATE / LOAD_THREADS) / 2   # half the requests carry BATCH, half one
    conns = {}
    seq = 0
    nxt = now()
    mine = []          # (tenant, key) this thread created, for replaces and cancels

    def call(port, method, path, body):
        c = conns.get(port)
        try:
            if c is None:
                c = conns[port] = http.client.HTTPConnection("127.0.0.1", port,
                                                            timeout=CLIENT_TIMEOUT_S)
            t0 = now()
            to_paused = port == targets.paused
            c.request(method, path, body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if now() - t0 >= CLIENT_TIMEOUT_S:
                stats["hung requests"] += 1
            if to_paused:
                stats[f"sent to B while paused: {method} {r.status}"] += 1
            if r.will_close:
                c.close()
                conns.pop(port, None)
            return r.status, data
        except (OSError, http.client.HTTPException) as e:
            if isinstance(e, TimeoutError) or "timed out" in str(e):
                stats["hung requests"] += 1
            if c is not None:
                c.close()
            conns.pop(port, None)
            return None, type(e).__name__

    while not stop.is_set():
        d = nxt - now()
        if d > 0:
            time.sleep(d)
        elif d < -1:
            nxt = now()
        nxt += period
        port = targets.pick(rnd)
        if port is None:
            continue
        roll = rnd.random()
        wall_us = int(time.time() * 1e6)
        touchable = [k for k in mine[-400:]
                     if keys[k].pending and keys[k].pending[1] - wall_us > TOUCH_MIN_AHEAD_S * 1e6]
        if roll < 0.15 and touchable:
            tk = rnd.choice(touchable)
            tenant, key = tk
            delay = rnd.randint(*DELAY_MS)
            status, data = call(port, "PUT", f"/v1/timers/{tenant}/{key}",
                                json.dumps({"delay_ms": delay, "payload": {"k": key}}))
            record_put(keys[tk], status, data, stats, "replace")
            continue
        if roll < 0.25 and touchable:
            tk = rnd.choice(touchable)
            tenant, key = tk
            status, data = call(port, "DELETE", f"/v1/timers/{tenant}/{key}", None)
            kl = keys[tk]
            t_us = int(time.time() * 1e6)
            if status is None or status >= 500:
                stats[f"DELETE {status or data}"] += 1
                kl.ops.append(("unsure", None, None, t_us, status))
            elif status == 204:
                stats["DELETE 204"] += 1
                kl.ops.append(("del", None, None, t_us, status))
                kl.pending = None
            else:
                stats[f"DELETE {status} {nothing_pending_why(kl, t_us)}"] += 1
                kl.ops.append(("del", None, None, t_us, status))
                kl.pending = None
            continue
        tenant = rnd.choice(TENANTS)
        if roll < 0.6:
            names = [f"t{idx}-{seq + i}" for i in range(BATCH)]
            seq += BATCH
            items = [{"key": k, "delay_ms": rnd.randint(*DELAY_MS), "payload": {"k": k}}
                     for k in names]
            for k in names:
                keys[(tenant, k)] = KeyLog()
                mine.append((tenant, k))
            status, data = call(port, "POST", f"/v1/timers/{tenant}", json.dumps({"timers": items}))
            if status is None or status >= 500 or status < 200 or status >= 300:
                stats[f"POST {status or data}"] += 1
                t_us = int(time.time() * 1e6)
                for k in names:
                    keys[(tenant, k)].ops.append(("unsure" if status is None or status >= 500
                                                  else "refused", None, None, t_us, status))
                continue
            stats[f"POST {status}"] += 1
            results = json.loads(data).get("results", [])
            for k, it in zip(names, results):
                record_item(keys[(tenant, k)], it, stats)
        else:
            k = f"t{idx}-{seq}"
            seq += 1
            keys[(tenant, k)] = KeyLog()
            mine.append((tenant, k))
            status, data = call(port, "PUT", f"/v1/timers/{tenant}/{k}",
                                json.dumps({"delay_ms": rnd.randint(*DELAY_MS), "payload": {"k": k}}))
            record_put(keys[(tenant, k)], status, data, stats, "new")
    for c in conns.values():
        c.close()


def nothing_pending_why(kl, answered_us):
    """Why a re-PUT or DELETE of a key believed pending found nothing: lost, unless an earlier
    request on the key went unanswered or was answered 503 (it may have applied: a cancel, or
    a replace due sooner), or the answer came after the deadline (the request waited, for a
    paused node say, and the timer fired meanwhile)."""
    if kl.unsure():
        return "after an unsure answer"
    if kl.pending is None or kl.pending[1] <= answered_us:
        return "answered after the deadline"
    return "(found nothing pending: lost?)"


def record_put(kl, status, data, stats, what):
    t_us = int(time.time() * 1e6)
    if status in (200, 201):
        j = json.loads(data)
        if what == "replace" and status == 201:
            stats[f"replace answered 201 {nothing_pending_why(kl, t_us)}"] += 1
        stats[f"PUT {what} {status}"] += 1
        kl.ops.append(("put", j["version"], j["fire_at_us"], t_us, status))
        kl.pending = (j["version"], j["fire_at_us"])
        return
    stats[f"PUT {what} {status or data}"] += 1
    kl.ops.append(("unsure" if status is None or status >= 500 else "refused",
                   None, None, t_us, status))


def record_item(kl, it, stats):
    t_us = int(time.time() * 1e6)
    st = it.get("status")
    if st in (200, 201):
        stats[f"item {st}"] += 1
        kl.ops.append(("put", it["version"], it["fire_at_us"], t_us, st))
        kl.pending = (it["version"], it["fire_at_us"])
    else:
        code = (it.get("error") or {}).get("code", "?")
        stats[f"item {st} {code}"] += 1
        kl.ops.append(("unsure" if (st or 500) >= 500 else "refused", None, None, t_us, st))
