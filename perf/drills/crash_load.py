"""The crash drill's load: connections that schedule, replace and cancel their own keys,
connections that walk keys through dead letters, and the killer."""

import os
import time
from collections import defaultdict

from common import now_us
from crash_model import Client, Uncertain

KILL_MIN_S = float(os.environ.get("CRASH_KILL_MIN_S", "2"))
KILL_MAX_S = float(os.environ.get("CRASH_KILL_MAX_S", "5"))
PAUSE_S = float(os.environ.get("CRASH_PAUSE_MS", "40")) / 1000  # up to this between a connection's requests
DELAY_MS = (300, 4000)
FAR_DELAY_MS = 3_600_000


def body_for(rng, delay_ms):
    return {"delay_ms": delay_ms, "payload": {"n": rng.randrange(1 << 30)}}


def mixed_worker(idx, port, model, tenants, stop, rng):
    """PUT / re-PUT / DELETE / batch over this connection's own keys."""
    cl = Client(port)
    own = defaultdict(list)          # tenant -> key names owned by this worker
    seq = 0
    while not stop.is_set():
        tenant = rng.choice(tenants)
        r = rng.random()
        if r < 0.40 or not own[tenant]:                     # a new key
            seq += 1
            names = [f"w{idx}-{seq}"]
            own[tenant].append(names[0])
            op = "put"
        elif r < 0.60:                                      # replace (or re-create) one
            names, op = [rng.choice(own[tenant])], "put"
        elif r < 0.85:
            names, op = [rng.choice(own[tenant])], "delete"
        else:                                               # a batch of new and old keys
            names = []
            for _ in range(rng.randrange(5, 30)):
                if rng.random() < 0.5 or not own[tenant]:
                    seq += 1
                    own[tenant].append(f"w{idx}-{seq}")
                    names.append(own[tenant][-1])
                else:
                    names.append(rng.choice(own[tenant]))
            names = list(dict.fromkeys(names))               # one item per key
            op = "batch"
        keys = [model.key(tenant, n) for n in names]
        try:
            if op == "put":
                k = keys[0]
                st, j = cl.call("PUT", f"/v1/timers/{tenant}/{k.key}", body_for(rng, rng.randrange(*DELAY_MS)))
                if st in (200, 201):
                    k.scheduled(st, j["version"], j["fire_at_us"], now_us())
                else:
                    model.refusals[(tenant, "put", st)] += 1
                    k.unsure(f"PUT {st}")
            elif op == "delete":
                k = keys[0]
                st, _ = cl.call("DELETE", f"/v1/timers/{tenant}/{k.key}")
                if st == 204:
                    k.cancelled(now_us())
                elif st == 404:
                    if k.pending is not None:              # it fired: no longer pending
                        k.pending = None
                    k.why.append("cancel 404")
                else:
                    model.refusals[(tenant, "delete", st)] += 1
                    k.unsure(f"DELETE {st}")
            else:
                items = [dict(key=k.key, **body_for(rng, rng.randrange(*DELAY_MS))) for k in keys]
                st, j = cl.call("POST", f"/v1/timers/{tenant}", {"timers": items})
                acked = now_us()
                if st != 200:
                    model.refusals[(tenant, "batch", st)] += 1
                    for k in keys:
                        k.unsure(f"batch {st}")
                else:
                    for k, res in zip(keys, j["results"]):
                        if res["status"] in (200, 201):
                            k.scheduled(res["status"], res["version"], res["fire_at_us"], acked)
                        else:
                            model.refusals[(tenant, "batch item", res["status"])] += 1
                            k.unsure(f"batch item {res['status']}")
        except Uncertain as e:
            for k in keys:
                k.unsure(f"{op}: {e}")
            time.sleep(0.05)
        time.sleep(rng.random() * PAUSE_S)
    cl.close()


def reject_worker(idx, port, model, receiver, stop, rng):
    """Walks reject keys, one at a time, through a dead-letter scenario each."""
    cl = Client(port)
    seq = 0
    while not stop.is_set():
        seq += 1
        k = model.key("reject", f"r{idx}-{seq}")
        try:
            st, j = cl.call("PUT", f"/v1/timers/reject/{k.key}", body_for(rng, rng.randrange(200, 800)))
            if st not in (200, 201):
                k.unsure(f"PUT {st}")
                continue
            v1 = j["version"]
            k.scheduled(st, v1, j["fire_at_us"], now_us())
            # It fires, the receiver answers 400, it becomes a dead letter; the timer goes.
            t0 = time.monotonic()
            while time.monotonic() - t0 < 30:
                st, _ = cl.call("GET", f"/v1/timers/reject/{k.key}")
                if st == 404:
                    break
                time.sleep(0.1)
            else:
                k.unsure("still pending 30 s after its deadline")
                continue
            k.pending, k.dead = None, v1
            k.why.append(f"dead v{v1}")
            scenario = rng.choice(["none", "put", "put+discard", "discard", "redrive", "put+redrive"])
            k.why.append(f"scenario {scenario}")
            if scenario.startswith("put"):
                st, j = cl.call("PUT", f"/v1/timers/reject/{k.key}", body_for(rng, FAR_DELAY_MS))
                if st != 201:
                    k.unsure(f"PUT beside a dead letter answered {st}")
                    continue
                k.scheduled(st, j["version"], j["fire_at_us"], now_us())
            if scenario.endswith("discard"):
                st, _ = cl.call("DELETE", f"/v1/dead/reject/{k.key}")
                if st != 204:
                    k.unsure(f"DELETE dead answered {st}")
                    continue
                k.dead = None
            if scenario == "redrive":
                st, j = cl.call("POST", f"/v1/dead/reject/{k.key}/retry")
                if st != 202 or j.get("version") != v1:
                    k.unsure(f"re-drive answered {st} {j}")
                    continue
                # pending again with v1; it fires and dies again with the same version.
            if scenario == "put+redrive":
                st, _ = cl.call("POST", f"/v1/dead/reject/{k.key}/retry")
                if st != 409:
                    k.unsure(f"re-drive beside a pending timer answered {st}, not 409")
                    continue
        except Uncertain as e:
            k.unsure(str(e))
            time.sleep(0.05)
    cl.close()


def killer(server, stop, rng, errors):
    while not stop.wait(rng.uniform(KILL_MIN_S, KILL_MAX_S)):
        try:
            server.kill_and_restart()
        except RuntimeError as e:
            errors.append(str(e))
            stop.set()
