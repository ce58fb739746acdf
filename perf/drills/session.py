#!/usr/bin/env python3
"""A user's session: the one-shot routes (conditions, debounce, listing, bulk cancel) with
tokens and signed webhooks on the journal, the server killed (SIGKILL) in the middle of it all
and started again on the same port, then what came out read back. Python standard library only.

Usage:  perf/drills/session.py --bin target/release/punctual [SECONDS]

What runs (SECONDS of load, default 30; a SIGKILL every 3-6 s):
  - two tenants with tokens, `shop` and `acme`, each with a signed callback to a receiver;
  - debounce: 4 `shop` keys written every 50 ms (delay 400 ms, `max_wait_ms` 1500);
  - create-only: `shop` keys PUT with `"if": "absent"` (due in 0.5-2 s) by 2 connections;
  - compare-and-set: `shop` keys replaced with `if_version` by the version last read;
  - a bulk cancel of 12,000 `acme` timers under `bulk-` (due 50 s after the start), sent again
    until its action reports `done` (an action cut by a kill reports `interrupted`);
  - 400 `acme` timers under `keep-` due in an hour, listed by prefix 97 a page after each start;
  - each tenant's token against the other's timers (401);
  - a recurring schedule of `shop` every second, catch-up `all`, to the same receiver;
  - a third tenant, `jobs`, with a pull queue and no callback: timers PUT by one connection
    (due in 0.1-1.5 s), received by a consumer in long polls and acknowledged (one in 20 left
    unacknowledged on its first receive, as by a consumer that died holding it).
Checks (exit 1 on any failure): never early; every acknowledged create-only and compare-and-set
version that nothing replaced was delivered; each debounced key fired at least once per
`max_wait_ms` (plus the outages) while it was written, and its last acknowledged payload was
delivered; no `bulk-` timer fired and none is listed; each listing held the 400 `keep-` keys
once each; every signature verified; the schedule's occurrences came one a second with none
missing from the first to the last, each under one version and one `sequence`, one higher than
the last; every acknowledged `jobs` timer was received, none before its deadline and none again
after an ack answered 204, each one left unacknowledged received again, and the queue is empty
at the end; SIGTERM exits 0."""

import argparse
import http.client
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import free_port, log, now_us  # noqa: E402
from crash_procs import CHILDREN, SECRET, Receiver, Server  # noqa: E402

TOKENS = {"shop": "shop-token-0123456789abcdef0123456789ab", "acme": "acme-token-0123456789abcdef0123456789ab",
          "jobs": "jobs-token-0123456789abcdef0123456789ab"}
DEBOUNCE_KEYS, MAX_WAIT_MS, DEBOUNCE_DELAY_MS = 4, 1500, 400
BULK, KEEP, BULK_DUE_S = 12000, 400, 50
TICK_US = 1_000_000


class Cut(Exception):
    """No answer: the connection broke (a kill), so what the request did is unknown."""


class Api:
    """One keep-alive connection, as `tenant` (its token on every request)."""

    def __init__(self, port, tenant):
        self.port, self.token, self.conn = port, TOKENS.get(tenant, tenant), None

    def call(self, method, path, body=None, token=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Authorization": f"Bearer {token or self.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            r = self.conn.getresponse()
            raw = r.read()
        except (OSError, http.client.HTTPException) as e:
            self.conn.close()
            self.conn = None
            raise Cut(type(e).__name__)
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, None


class Told:
    """What the clients were told, under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}        # (tenant, key) -> {version: fire_at} acknowledged, not replaced
        self.ended = set()     # (tenant, key, version) replaced or cancelled by an acknowledged op
        self.uncertain = set()  # (tenant, key): a request cut by a kill
        self.debounce = {}     # key -> [(acked_us, payload)]
        self.queued = {}       # (key, version) of `jobs` -> fire_at_us, acknowledged
        self.jobs_uncertain = 0  # `jobs` PUTs cut by a kill (their key is never checked)
        self.received = {}     # (key, version) -> [receive_count, ...]
        self.acked_msgs = set()  # (key, version) whose ack answered 204
        self.fails = []

    def fail(self, msg):
        with self.lock:
            self.fails.append(msg)


def debouncer(port, told, stop, i):
    api, key, seq = Api(port, "shop"), f"cart-{i}", 0
    while not stop.is_set():
        seq += 1
        body = {"delay_ms": DEBOUNCE_DELAY_MS, "debounce": {"max_wait_ms": MAX_WAIT_MS}, "payload": {"seq": seq}}
        try:
            st, _ = api.call("PUT", f"/v1/timers/shop/{key}", body)
        except Cut:
            continue
        if st in (200, 201):
            with told.lock:
                told.debounce.setdefault(key, []).append((now_us(), seq))
        elif st not in (503, 429):
            told.fail(f"debounce {key}: PUT answered {st}")
        time.sleep(0.05)


def conditional(port, told, stop, i, rng):
    """Create-only keys, then compare-and-set on the ones created."""
    api, n = Api(port, "shop"), 0
    while not stop.is_set():
        n += 1
        key = f"once-{i}-{n % 50}"
        body = {"delay_ms": rng.randint(500, 2000), "if": "absent", "payload": {"n": n}}
        try:
            st, v = api.call("PUT", f"/v1/timers/shop/{key}", body)
            if st == 201:
                told_ack(told, "shop", key, v, replaced=None)
                if rng.random() < 0.5:
                    body = {"delay_ms": rng.randint(500, 2000), "if_version": v["version"], "payload": {"n": -n}}
                    st2, v2 = api.call("PUT", f"/v1/timers/shop/{key}", body)
                    if st2 == 200:
                        told_ack(told, "shop", key, v2, replaced=v["version"])
                    elif st2 not in (404, 409, 503, 429):
                        told.fail(f"if_version {key}: {st2} {v2}")
            elif st not in (409, 503, 429):
                told.fail(f"if absent {key}: {st} {v}")
        except Cut:
            with told.lock:
                told.uncertain.add(("shop", key))
        time.sleep(0.01)


def told_ack(told, tenant, key, v, replaced):
    with told.lock:
        told.acked.setdefault((tenant, key), {})[v["version"]] = v["fire_at_us"]
        if replaced is not None:
            told.ended.add((tenant, key, replaced))


def bulk_cancel(port, told, done):
    """Sends the bulk cancel until an action of it reports `done`; True once it has."""
    api, sent, seen = Api(port, "acme"), 0, []
    for _ in range(200):
        try:
            st, v = api.call("DELETE", "/v1/timers/acme?prefix=bulk-")
            if st != 202:
                time.sleep(0.2)
                continue
            sent, aid = sent + 1, v["id"]
            for _ in range(600):
                st, a = api.call("GET", f"/v1/actions/acme/{aid}")
                if st == 200 and a.get("state") == "done":
                    done.set()
                    return dict(a, sent=sent, before=seen)
                if st != 200 or a.get("state") != "running":
                    seen.append((st, (a or {}).get("state"), (a or {}).get("cancelled")))
                    break     # interrupted by a kill, or gone: send it again
                time.sleep(0.05)
        except Cut:
            time.sleep(0.2)
    return None


def list_keep(port, told):
    """Walks `keep-` 97 a page; each of the 400 once."""
    api, seen, after = Api(port, "acme"), [], ""
    for _ in range(100):
        q = "prefix=keep-&limit=97" + (f"&after={after}" if after else "")
        st, v = api.call("GET", f"/v1/timers/acme?{q}")
        if st != 200:
            told.fail(f"listing keep-: {st} {v}")
            return
        seen += [t["key"] for t in v["timers"]]
        after = v.get("next")
        if not after:
            break
    if sorted(seen) != sorted(f"keep-{i:04}" for i in range(KEEP)):
        told.fail(f"listing keep- held {len(seen)} keys, {len(set(seen))} distinct; expected the {KEEP} once each")


def producer(port, told, stop, rng):
    """`jobs` timers without a callback: each enters the tenant's queue when it fires."""
    api, n = Api(port, "jobs"), 0
    while not stop.is_set():
        n += 1
        try:
            st, v = api.call("PUT", f"/v1/timers/jobs/job-{n}", {"delay_ms": rng.randint(100, 1500), "payload": {"n": n}})
        except Cut:
            with told.lock:
                told.jobs_uncertain += 1
            time.sleep(0.05)
            continue
        if st == 201:
            with told.lock:
                told.queued[(f"job-{n}", v["version"])] = v["fire_at_us"]
        elif st not in (503, 429):
            told.fail(f"jobs PUT job-{n}: {st} {v}")
        time.sleep(0.02)


def consumer(port, told, stop):
    """Receives `jobs` messages in long polls and acknowledges each batch."""
    api = Api(port, "jobs")
    while not stop.is_set():
        try:
            st, v = api.call("POST", "/v1/queues/jobs/receive", {"max": 50, "wait_ms": 1000, "visibility_ms": 5000})
        except Cut:
            time.sleep(0.1)
            continue
        if st != 200:
            if st not in (503, 429):
                told.fail(f"receive: {st} {v}")
            time.sleep(0.1)
            continue
        got_us = now_us()
        with told.lock:
            for m in v["messages"]:
                ident = (m["key"], m["version"])
                if ident in told.acked_msgs:
                    told.fail(f"received again after its ack answered 204: {ident}, receive_count {m['receive_count']}")
                if m["fire_at_us"] > got_us or m["fired_at_us"] < m["fire_at_us"]:
                    told.fail(f"received before its deadline: {m}")
                told.received.setdefault(ident, []).append(m["receive_count"])
        # One message in 20, on its first receive, is left unacknowledged, as by a consumer
        # that died holding it: its lease must end and bring it back, across kills as well.
        receipts = {m["receipt"]: (m["key"], m["version"]) for m in v["messages"]
                    if not (m["receive_count"] == 1 and dropped(m["key"]))}
        if not receipts:
            continue
        try:
            st, r = api.call("POST", "/v1/queues/jobs/ack", {"receipts": list(receipts)})
        except Cut:
            continue
        if st != 200:
            if st != 503:
                told.fail(f"ack: {st} {r}")
            continue
        with told.lock:
            for res in r["results"]:
                if res["status"] == 204:
                    told.acked_msgs.add(receipts[res["receipt"]])
                elif res["status"] not in (409, 404, 503):
                    told.fail(f"ack result {res}")


def dropped(key):
    """Whether the consumer leaves `key`'s first receive unacknowledged."""
    return int(key.rsplit("-", 1)[1]) % 20 == 7


def judge_queue(told, port):
    """Every acknowledged `jobs` timer received, a dropped one again; the queue empty at the end."""
    missing = [k for k in told.queued if k not in told.received]
    if missing:
        told.fail(f"jobs: {len(missing)} acknowledged timers never received, e.g. {missing[:3]}")
    back = [k for k in told.queued if dropped(k[0]) and k in told.received]
    once = [k for k in back if max(told.received[k]) < 2]
    if once:
        told.fail(f"jobs: {len(once)} of {len(back)} messages left unacknowledged never came back, e.g. {once[:3]}")
    twice = sum(1 for v in told.received.values() if len(v) > 1)
    st, q = Api(port, "jobs").call("GET", "/v1/queues/jobs")
    if st != 200 or q["depth"] or q["in_flight"]:
        told.fail(f"jobs queue not empty at the end: {st} {q}")
    log(f"queue: {len(told.queued)} timers acknowledged ({told.jobs_uncertain} PUT attempts cut by a kill), "
        f"{len(told.received)} received ({twice} more than once; {len(back)} left unacknowledged once on "
        f"purpose, each received again), {len(told.acked_msgs)} acks answered 204")


def judge_schedule(told, receiver, last_write):
    """The `tick` schedule: one occurrence a second, none missing, each once by version and sequence."""
    occ = {}
    for a in receiver.attempts:
        if a["tenant"] == "shop" and (a["key"] or "").startswith("@tick@") and a["status"] == 200:
            p = a["payload"] or {}
            occ.setdefault(p.get("occurrence_us"), set()).add((a["version"], p.get("sequence")))
    if not occ:
        told.fail("schedule tick: no occurrence delivered")
        return
    times = sorted(occ)
    for o in times:
        if len(occ[o]) > 1:
            told.fail(f"schedule tick: occurrence {o} delivered under {sorted(occ[o])} (version, sequence)")
    for a, b in zip(times, times[1:]):
        if b - a != TICK_US:
            told.fail(f"schedule tick: {(b - a) // TICK_US - 1} occurrences missing after {a}")
        elif min(s for _, s in occ[b]) != max(s for _, s in occ[a]) + 1:
            told.fail(f"schedule tick: sequence {sorted(occ[a])} then {sorted(occ[b])}")
    if times[-1] < last_write:
        told.fail(f"schedule tick: the last occurrence delivered, {times[-1]}, is before the load ended ({last_write})")
    log(f"schedule tick: {len(times)} occurrences delivered, one a second")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("seconds", nargs="?", type=int, default=30)
    args = ap.parse_args()
    rng = random.Random(7)
    workdir = tempfile.mkdtemp(prefix="punctual-session-")
    receiver = Receiver()
    base = f"http://127.0.0.1:{receiver.port}/"
    cfg = os.path.join(workdir, "punctual.toml")
    with open(cfg, "w") as f:
        f.write(f'callback_allow = ["{base}"]\nwebhook_timeout_ms = 2000\n')
        for t in ("shop", "acme"):
            f.write(f'[tenants.{t}]\ntoken = "{TOKENS[t]}"\ncallback_url = "{base}ok/{t}"\nwebhook_secret = "{SECRET}"\n')
        f.write(f'[tenants.jobs]\ntoken = "{TOKENS["jobs"]}"\nqueue = true\n')
    port = free_port()
    server = Server(args.bin, workdir, port, cfg, ["--data-dir", os.path.join(workdir, "data")])
    server.start()
    told, start_us = Told(), now_us()
    acme = Api(port, "acme")
    for i in range(0, BULK, 500):
        items = [{"key": f"bulk-{j:05}", "fire_at_ms": start_us // 1000 + BULK_DUE_S * 1000} for j in range(i, i + 500)]
        st, v = acme.call("POST", "/v1/timers/acme", {"timers": items})
        assert st == 200 and all(r["status"] == 201 for r in v["results"]), (st, v)
    items = [{"key": f"keep-{j:04}", "delay_ms": 3_600_000} for j in range(KEEP)]
    st, v = acme.call("POST", "/v1/timers/acme", {"timers": items})
    assert st == 200 and all(r["status"] == 201 for r in v["results"]), (st, v)
    # One tenant's token opens nothing of the other's.
    for who, path in (("shop", "/v1/timers/acme/keep-0001"), ("acme", "/v1/timers/shop?prefix=x")):
        st, _ = Api(port, who).call("GET", path)
        if st != 401:
            told.fail(f"{who}'s token on {path}: {st}, not 401")
    st, v = Api(port, "shop").call("PUT", "/v1/schedules/shop/tick", {
        "every_ms": TICK_US // 1000, "catch_up": {"policy": "all", "window_ms": 3_600_000}, "payload": {"drill": "tick"}})
    assert st == 201, (st, v)
    stop, cancelled, drained = threading.Event(), threading.Event(), threading.Event()
    threads = [threading.Thread(target=debouncer, args=(port, told, stop, i)) for i in range(DEBOUNCE_KEYS)]
    threads += [threading.Thread(target=conditional, args=(port, told, stop, i, random.Random(i))) for i in range(2)]
    threads += [threading.Thread(target=producer, args=(port, told, stop, random.Random(99)))]
    pull = threading.Thread(target=consumer, args=(port, told, drained))
    bulk = threading.Thread(target=lambda: told.__setattr__("bulk_action", bulk_cancel(port, told, cancelled)))
    for t in threads + [bulk, pull]:
        t.start()
    t_end = time.monotonic() + args.seconds
    first = True
    while time.monotonic() < t_end:
        # The first kill lands in the bulk cancel's first seconds, so that its action is cut.
        time.sleep(rng.uniform(0.1, 0.3) if first else rng.uniform(3, 6))
        first = False
        server.kill_and_restart()
        list_keep(port, told)
    stop.set()
    for t in threads:
        t.join()
    bulk.join()
    last_write = now_us()
    # Wait for everything acknowledged to be due and delivered, and past bulk-'s deadline.
    time.sleep(max(0, (start_us + (BULK_DUE_S + 2) * 1_000_000 - now_us()) / 1e6) + 3)
    drained.set()
    pull.join()
    judge(told, receiver, server, start_us, last_write, cancelled)
    judge_schedule(told, receiver, last_write)
    judge_queue(told, port)
    list_keep(port, told)
    st, v = Api(port, "acme").call("GET", "/v1/timers/acme?prefix=bulk-&limit=10")
    if st != 200 or v["timers"]:
        told.fail(f"bulk- still listed after the action: {st} {v}")
    server.proc.send_signal(signal.SIGTERM)
    rc = server.proc.wait(timeout=30)
    if rc != 0:
        told.fail(f"SIGTERM: exit {rc}")
    log(f"session: {server.starts} starts, outages {[round((b - a) / 1e6, 2) for a, b in server.outages]} s; "
        f"{len(receiver.attempts)} deliveries; bulk action {getattr(told, 'bulk_action', None)}")
    for f in told.fails + receiver.bad:
        log(f"FAIL {f}")
    log(f"session: {'FAILED' if told.fails or receiver.bad else 'passed'} ({workdir})")
    sys.exit(1 if told.fails or receiver.bad else 0)


def judge(told, receiver, server, start_us, last_write, cancelled):
    got = {}
    for a in receiver.attempts:
        if a["fired_at"] < a["fire_at"] or a["recv"] < a["fire_at"]:
            told.fail(f"early: {a}")
        got.setdefault((a["tenant"], a["key"]), []).append(a)
        if a["key"].startswith("bulk-") and a["tenant"] == "acme":
            told.fail(f"a bulk-cancelled timer fired: {a}")
    if not cancelled.is_set():
        told.fail("the bulk cancel never reported done")
    for (tenant, key), versions in told.acked.items():
        if (tenant, key) in told.uncertain:
            continue
        delivered = {a["version"] for a in got.get((tenant, key), []) if a["status"] == 200}
        for version in versions:
            if (tenant, key, version) not in told.ended and version not in delivered:
                told.fail(f"lost: {tenant}/{key} v{version} acknowledged, never delivered")
    checked = sum(len(v) for k, v in told.acked.items() if k not in told.uncertain)
    log(f"create-only and compare-and-set: {checked} acknowledged versions checked, "
        f"{len(told.ended)} replaced, {len(told.uncertain)} keys uncertain (a request cut by a kill)")
    outage_us = sum(b - a for a, b in server.outages)
    for key, writes in told.debounce.items():
        fires = sorted(a["fire_at"] for a in got.get(("shop", key), []) if a["attempt"] == 1)
        during = [f for f in fires if writes[0][0] <= f <= last_write]
        edges = [writes[0][0]] + during + [last_write]
        worst = max(b - a for a, b in zip(edges, edges[1:]))
        if worst > MAX_WAIT_MS * 1000 + outage_us + 1_000_000:
            told.fail(f"debounce {key}: {worst / 1e3:.0f} ms without a fire while written")
        seqs = [(a.get("payload") or {}).get("seq", 0) for a in got.get(("shop", key), []) if a["status"] == 200]
        if max(seqs, default=0) < writes[-1][1]:
            told.fail(f"debounce {key}: last acknowledged payload seq {writes[-1][1]} never delivered (max {max(seqs, default=0)})")
        log(f"debounce {key}: {len(writes)} writes acknowledged, {len(fires)} fires, longest gap {worst / 1e3:.0f} ms")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the drill could not run to its checks: say why, exit 2
        log(f"session: could not run: {type(e).__name__}: {e}")
        sys.exit(2)
    finally:
        for child in CHILDREN:   # never leave a server behind, whatever ended the drill
            if child.poll() is None:
                child.kill()
