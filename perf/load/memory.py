#!/usr/bin/env python3
"""Resident memory per pending timer of `punctual serve`.

Usage: perf/load/memory.py [BINARY] [COUNT] [STORE]
Starts BINARY (default target/release/punctual) with 2 shards on 127.0.0.1:7598 and the store
STORE (default memory: the figure is the engine's own; `journal` adds the journal's buffers),
reads its VmRSS, registers COUNT timers (default 1,000,000) with 32-byte keys and 100-byte
payloads through batch POSTs of 10,000, due in one hour, reads VmRSS again and prints the
difference per timer. --shard-capacity is COUNT: builds that reserved their tables up front
reserved that much.
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import time

binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/punctual"
count = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
store = sys.argv[3] if len(sys.argv) > 3 else "memory"
port = 7598


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


proc = subprocess.Popen(
    [binary, "serve", "--listen", f"127.0.0.1:{port}", "--shards", "2",
     "--shard-capacity", str(count), "--spin-us", "0", "--store", store,
     "--data-dir", f"/tmp/punctual-memory-{os.getpid()}"],
    stderr=subprocess.DEVNULL)
try:
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.05)
    before = rss_kib(proc.pid)
    payload = {"p": "x" * 92}  # 100 bytes of JSON text
    assert len(json.dumps(payload, separators=(",", ":"))) == 100
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    batch = 10_000
    for start in range(0, count, batch):
        items = [{"key": f"order-{i:026d}", "delay_ms": 3_600_000, "payload": payload}
                 for i in range(start, min(start + batch, count))]
        assert len(items[0]["key"]) == 32
        conn.request("POST", "/v1/timers/mem", json.dumps({"timers": items}, separators=(",", ":")))
        r = conn.getresponse()
        body = json.loads(r.read())
        bad = [x for x in body["results"] if x["status"] not in (200, 201)]
        if r.status != 200 or bad:
            raise RuntimeError(f"batch at {start}: {r.status} {bad[:1]}")
    time.sleep(0.5)
    after = rss_kib(proc.pid)
    print(f"store: {store}  timers: {count}  RSS before: {before} KiB  after: {after} KiB  "
          f"per timer: {(after - before) * 1024 / count:.0f} bytes")
finally:
    proc.terminate()
    proc.wait()
    shutil.rmtree(f"/tmp/punctual-memory-{os.getpid()}", ignore_errors=True)
