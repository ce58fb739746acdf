#!/usr/bin/env python3
"""A worker that closes unpaid orders by pulling fired timers from punctual's queue, with the
standard library only.

The shop puts a timer per order when the order is created (`PUT /v1/timers/shop/order-8812`,
`{"delay_ms": 900000, "payload": {"order": "8812"}}`, no callback), and deletes it when the
order is paid. The tenant has `queue = true`, so a timer that fires without being deleted
waits in the queue until a worker like this one receives and acknowledges it:

    PUNCTUAL_URL=http://127.0.0.1:8080 PUNCTUAL_TOKEN=… \\
        python3 examples/pull_worker.py shop orders.sqlite3

It long-polls `POST /v1/queues/{tenant}/receive`, closes each order it is told of, and
acknowledges the batch; an order it fails to close is nacked to come back in 5 s; a batch that
takes longer than half its lease has the rest of its leases extended. SIGTERM or SIGINT stops
it cleanly: it receives no more, finishes the order at hand, acknowledges what it closed and
nacks the rest so that another worker gets them at once.

Delivery is at least once: a worker killed between its work and its ack, or a lease that ends
while the work runs, gives the message to a worker again. So the work is idempotent and keyed
by (key, version), which names one scheduling exactly once: the order's close and the record
that (key, version) was handled commit in one SQLite transaction, and a message seen again
finds the record and is only acknowledged. The `orders` table (created if missing) is the
shop's; a real application does the same in its own database.

For production code in Python, `punctual.Client.consume` (clients/python) does the same loop
with concurrency, prefetch and retries policy; this file shows the protocol in full.
"""

import json
import os
import signal
import sqlite3
import sys
import time
import urllib.error
import urllib.request

# How long a received message stays leased to this worker (PUNCTUAL_VISIBILITY_MS): longer than
# a batch usually takes, short enough that a dead worker's messages come back soon.
VISIBILITY_MS = int(os.environ.get("PUNCTUAL_VISIBILITY_MS", "30000"))
WAIT_MS = 20_000
BATCH = 100
NACK_DELAY_MS = 5_000


class Punctual:
    """The four queue calls, each retried while punctual answers 503, 429 or not at all."""

    def __init__(self, url, token, tenant):
        self.base = url.rstrip("/") + "/v1/queues/" + tenant
        self.token = token

    def call(self, action, body, stopping=lambda: False):
        delay = 0.1
        while True:
            req = urllib.request.Request(
                self.base + "/" + action,
                data=json.dumps(body).encode(),
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            if self.token:
                req.add_header("Authorization", "Bearer " + self.token)
            try:
                # A long poll answers within wait_ms; the margin covers a slow answer.
                with urllib.request.urlopen(req, timeout=WAIT_MS / 1000 + 10) as resp:
                    return json.load(resp)
            except urllib.error.HTTPError as e:
                if e.code not in (429, 503):
                    raise SystemExit(f"{action}: {e.code} {e.read().decode(errors='replace')}")
                wait = max(delay, float(e.headers.get("Retry-After") or 0))
                print(f"{action}: {e.code}, again in {wait:.1f} s", file=sys.stderr, flush=True)
            except (urllib.error.URLError, OSError) as e:
                # No answer: a receive's leases (if it made any) end by themselves; an ack
                # sent again is answered per receipt (204, or 409 once the first one landed).
                wait = delay
                print(f"{action}: {e}, again in {wait:.1f} s", file=sys.stderr, flush=True)
            if action == "receive" and stopping():
                return {"messages": []}
            time.sleep(wait)
            delay = min(delay * 2, 5.0)

    def receive(self, stopping):
        body = {"max": BATCH, "wait_ms": WAIT_MS, "visibility_ms": VISIBILITY_MS}
        return self.call("receive", body, stopping)["messages"]

    def settle(self, action, receipts, **fields):
        for at in range(0, len(receipts), 1000):
            results = self.call(action, {"receipts": receipts[at : at + 1000], **fields})["results"]
            for r in results:
                if r["status"] != 204:
                    # 409 lease_expired: the lease ended first; the message went (or goes) to
                    # a worker again, which finds it handled. Nothing is lost.
                    print(f"{action}: {r['error']['code']} for one receipt", file=sys.stderr, flush=True)


def open_db(path):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
    db.execute(
        "CREATE TABLE IF NOT EXISTS handled (key TEXT, version INTEGER, at REAL, PRIMARY KEY (key, version))"
    )
    return db


def close_order(db, msg):
    """Closes the message's order if it is still unpaid, once per (key, version). True when
    this call did the work, False when the message had been handled already."""
    order = str((msg.get("payload") or {}).get("order", ""))
    if not order:
        raise ValueError(f"message {msg['key']} names no order")
    db.execute("BEGIN IMMEDIATE")
    try:
        seen = db.execute(
            "SELECT 1 FROM handled WHERE key = ? AND version = ?", (msg["key"], msg["version"])
        ).fetchone()
        if not seen:
            db.execute("UPDATE orders SET status = 'closed' WHERE id = ? AND status = 'unpaid'", (order,))
            db.execute("INSERT INTO handled VALUES (?, ?, ?)", (msg["key"], msg["version"], time.time()))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return not seen


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: pull_worker.py TENANT DATABASE  (PUNCTUAL_URL, PUNCTUAL_TOKEN from the environment)")
    tenant, path = sys.argv[1], sys.argv[2]
    api = Punctual(os.environ.get("PUNCTUAL_URL", "http://127.0.0.1:8080"), os.environ.get("PUNCTUAL_TOKEN"), tenant)
    db = open_db(path)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    print(f"pulling {tenant}'s queue", flush=True)
    while not stop:
        batch = api.receive(lambda: bool(stop))
        leased_at = time.monotonic()
        done, failed, left = [], [], []
        for i, msg in enumerate(batch):
            if stop:
                left = [m["receipt"] for m in batch[i:]]
                break
            if time.monotonic() - leased_at > VISIBILITY_MS / 2000:
                api.settle("extend", [m["receipt"] for m in batch[i:]], visibility_ms=VISIBILITY_MS)
                leased_at = time.monotonic()
            try:
                if close_order(db, msg):
                    print(f"closed {msg['key']} v{msg['version']} (receive {msg['receive_count']})", flush=True)
                else:
                    print(f"already handled {msg['key']} v{msg['version']}", flush=True)
                done.append(msg["receipt"])
            except Exception as e:  # the work failed: the message comes back after a delay
                print(f"failed {msg['key']}: {e}", file=sys.stderr, flush=True)
                failed.append(msg["receipt"])
        if done:
            api.settle("ack", done)
        if failed:
            api.settle("nack", failed, delay_ms=NACK_DELAY_MS)
        if left:
            api.settle("nack", left, delay_ms=0)
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
