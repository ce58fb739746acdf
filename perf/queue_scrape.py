#!/usr/bin/env python3
"""What a `/metrics` scrape costs with a pull queue's backlog: starts nothing, talks to a
running `punctual serve` whose config gives tenant `jobs` a queue (`queue = true`, a token
`jobs-token-0123456789abcdef0123456789ab`, `max_pending` above N) and a `metrics_token`
`metrics-token-0123456789abcdef0123456789`; fills the queue with N timers due at once (batches
of 1,000) and times five scrapes at 0, 100,000 and N ready messages. Standard library only.

Usage:  perf/queue_scrape.py PORT [N]     (N default 1,000,000)"""

import http.client
import json
import sys
import time

PORT, N = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
TENANT = {"Authorization": "Bearer jobs-token-0123456789abcdef0123456789ab", "Content-Type": "application/json"}
METRICS = {"Authorization": "Bearer metrics-token-0123456789abcdef0123456789"}
conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)


def scrape():
    t = time.monotonic()
    conn.request("GET", "/metrics", headers=METRICS)
    r = conn.getresponse()
    body = r.read().decode()
    ready = [line for line in body.splitlines() if line.startswith("punctual_queue_ready")]
    return time.monotonic() - t, r.status, ready[:1]


done = 0
for target in (0, 100_000, N):
    while done < target:
        items = [{"key": f"m{done + i}", "delay_ms": 0} for i in range(1000)]
        conn.request("POST", "/v1/timers/jobs", body=json.dumps({"timers": items}), headers=TENANT)
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"batch answered {r.status}")
        done += 1000
    time.sleep(3)  # every timer fired into the queue
    runs = [scrape() for _ in range(5)]
    print(target, "scrape s:", [round(d, 4) for d, _, _ in runs], runs[-1][1], runs[-1][2], flush=True)
