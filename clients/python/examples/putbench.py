#!/usr/bin/env python3
"""PUTs per second through the client and through httpx alone (the HTTP library the client
uses), on one connection and on 16 (threads sharing one client), against a running server
(clients/bench/run.sh starts one).

    python3 examples/putbench.py http://127.0.0.1:7480 3

Each variant runs for the given seconds, three times, alternated, and prints one JSON line per
run: PUTs per second and this process's CPU per PUT.
"""

import json
import resource
import sys
import threading
import time

import httpx

import punctual


def cpu():
    """This process's CPU time so far, user and system, in seconds."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run(base, kind, conns, seconds):
    limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
    http = httpx.Client(limits=limits)
    client = punctual.Client(base, http=http)
    done = [0] * conns
    end = time.monotonic() + seconds

    def worker(w):
        i = 0
        while time.monotonic() < end:
            key = f"w{w}-{i % 1000}"
            if kind == "client":
                client.put("bench", key, delay_ms=3_600_000, payload={"order": i})
            else:
                r = http.put(f"{base}/v1/timers/bench/{key}", json={"delay_ms": 3_600_000, "payload": {"order": i}})
                if r.status_code // 100 != 2:
                    raise RuntimeError(r.text)
                r.json()["version"]
            i += 1
            done[w] += 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    http.close()
    return sum(done)


if __name__ == "__main__":
    base, seconds = sys.argv[1], float(sys.argv[2])
    for _ in range(3):
        for conns in (1, 16):
            for kind in ("client", "raw"):
                before = cpu()
                n = run(base, kind, conns, seconds)
                print(json.dumps({"lang": "python", "kind": kind, "conns": conns, "puts_per_s": n / seconds,
                                  "cpu_us_per_put": (cpu() - before) * 1e6 / n}), flush=True)
