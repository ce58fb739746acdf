#!/usr/bin/env python3
"""Pull-queue throughput and memory against Redis Streams, in one run.

    perf/queue_throughput.py BIN [--messages N] [--consumers C] [--durable]

For each side it fills a queue with N messages, then C consumer processes drain it in
batches of 100 (receive then ack), and it prints messages a second, the server's CPU (user +
system, from /proc) per message, and the server's memory per message waiting and per message
in flight:

- punctual: a fresh `BIN serve --shards 2` (`--store memory`, or with --durable the journal
  with `--fsync always`), tenant `jobs` with `queue = true`; N timers due at once (batches of
  1,000, no callback) fire into the queue; consumers call `POST /v1/queues/jobs/receive`
  (`max` 100, `wait_ms` 0) and `/ack`.
- Redis: a fresh `redis-server` (no persistence, or with --durable `appendfsync always`); N
  entries `XADD`ed to one stream (pipelined), a consumer group; consumers call `XREADGROUP
  COUNT 100` and `XACK`.

Memory: the server's RSS with the queue empty, with N messages waiting, and with all N
leased (received once more with a long lease, never acked), each as bytes a message over the
empty figure. (An `XACK` leaves the entry in the stream: a Redis consumer also trims it; the
run trims between its two fills.) The client is Python in both; each consumer is
its own process. Standard library only (a few lines of RESP for Redis).
"""

import argparse
import http.client
import json
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import tempfile
import time

TOKEN = "jobs-token-0123456789abcdef0123456789ab"
HDR = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


# ---- punctual ---------------------------------------------------------------------------


def call(conn, method, path, body=None):
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=HDR)
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise SystemExit(f"{method} {path}: {r.status} {data[:200]!r}")
    return json.loads(data) if data else None


def punctual_consumer(port, stop_at, counter, visibility_ms, ack):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while counter.value < stop_at:
        got = call(conn, "POST", "/v1/queues/jobs/receive", {"max": 100, "wait_ms": 0, "visibility_ms": visibility_ms})
        msgs = got["messages"]
        if not msgs:
            time.sleep(0.001)
            continue
        if ack:
            res = call(conn, "POST", "/v1/queues/jobs/ack", {"receipts": [m["receipt"] for m in msgs]})
            assert all(r["status"] == 204 for r in res["results"]), res
        with counter.get_lock():
            counter.value += len(msgs)


def punctual_side(a, n):
    port = free_port()
    data = tempfile.mkdtemp()
    conf = os.path.join(data, "punctual.toml")
    with open(conf, "w") as f:
        f.write(f'[tenants.jobs]\ntoken = "{TOKEN}"\nqueue = true\nmax_pending = {n + 1000}\n')
    store = ["--store", "journal", "--fsync", "always", "--data-dir", os.path.join(data, "j")] if a.durable else ["--store", "memory"]
    srv = subprocess.Popen([a.bin, "serve", "--listen", f"127.0.0.1:{port}", "--shards", "2", "--config", conf] + store,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for _ in range(400):
            try:
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                break
            except OSError:
                time.sleep(0.05)
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        time.sleep(0.5)
        empty = rss(srv.pid)
        for at in range(0, n, 1000):
            items = [{"key": f"m{i}", "delay_ms": 0, "payload": {"order": i}} for i in range(at, min(n, at + 1000))]
            call(conn, "POST", "/v1/timers/jobs", {"timers": items})
        while call(conn, "GET", "/v1/queues/jobs")["ready"] < n:
            time.sleep(0.2)
        waiting = rss(srv.pid)
        rate, cpu = drain(lambda c, k: punctual_consumer(port, n, c, 60_000, True), a.consumers, n, srv.pid)
        # Fill again and lease everything without an ack: the in-flight figure.
        for at in range(0, n, 1000):
            items = [{"key": f"l{i}", "delay_ms": 0, "payload": {"order": i}} for i in range(at, min(n, at + 1000))]
            call(conn, "POST", "/v1/timers/jobs", {"timers": items})
        while call(conn, "GET", "/v1/queues/jobs")["ready"] < n:
            time.sleep(0.2)
        drain(lambda c, k: punctual_consumer(port, n, c, 3_600_000, False), a.consumers, n, srv.pid)
        leased = rss(srv.pid)
        q = call(conn, "GET", "/v1/queues/jobs")
        assert q["in_flight"] == n, q
        return rate, cpu, (waiting - empty) / n, (leased - empty) / n
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(data, ignore_errors=True)


# ---- Redis ------------------------------------------------------------------------------


class Resp:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def send(self, *cmds):
        out = bytearray()
        for cmd in cmds:
            out += b"*%d\r\n" % len(cmd)
            for x in cmd:
                x = x if isinstance(x, bytes) else str(x).encode()
                out += b"$%d\r\n%s\r\n" % (len(x), x)
        self.s.sendall(out)
        return [self.read() for _ in cmds]

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b":"):
            return rest
        if t == b"-":
            raise SystemExit(f"redis: {rest.decode()}")
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data
        if t in (b"*", b"%"):
            n = int(rest)
            if n < 0:
                return None
            return [self.read() for _ in range(n * (2 if t == b"%" else 1))]
        if t == b"_":
            return None
        raise SystemExit(f"redis: unexpected {line!r}")


def redis_consumer(port, stop_at, counter, name, ack):
    r = Resp(port)
    while counter.value < stop_at:
        (got,) = r.send(["XREADGROUP", "GROUP", "g", name, "COUNT", 100, "STREAMS", "s", ">"])
        entries = got[0][1] if got else []
        if not entries:
            time.sleep(0.001)
            continue
        if ack:
            r.send(["XACK", "s", "g"] + [e[0] for e in entries])
        with counter.get_lock():
            counter.value += len(entries)


def redis_side(a, n):
    port = free_port()
    data = tempfile.mkdtemp()
    persist = ["--appendonly", "yes", "--appendfsync", "always"] if a.durable else ["--appendonly", "no"]
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--dir", data] + persist,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                r = Resp(port)
                break
            except OSError:
                time.sleep(0.05)
        used = lambda: rss(srv.pid)
        r.send(["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"])
        empty = used()
        fill = lambda p: [r.send(*[["XADD", "s", "*", "key", f"{p}{i}", "version", 1, "payload", json.dumps({"order": i})]
                                  for i in range(at, min(n, at + 1000))]) for at in range(0, n, 1000)]
        fill("m")
        waiting = used()
        rate, cpu = drain(lambda c, k: redis_consumer(port, n, c, f"c{k}", True), a.consumers, n, srv.pid)
        r.send(["XTRIM", "s", "MAXLEN", 0])
        fill("l")
        drain(lambda c, k: redis_consumer(port, n, c, f"c{k}", False), a.consumers, n, srv.pid)
        leased = used()
        return rate, cpu, (waiting - empty) / n, (leased - empty) / n
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(data, ignore_errors=True)


# ---- both -------------------------------------------------------------------------------


def drain(target, consumers, n, pid):
    counter = mp.Value("q", 0)
    procs = [mp.Process(target=target, args=(counter, k)) for k in range(consumers)]
    cpu0, t0 = cpu_s(pid), time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit("a consumer failed")
    took, cpu = time.monotonic() - t0, cpu_s(pid) - cpu0
    return counter.value / took, cpu / counter.value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--durable", action="store_true")
    a = ap.parse_args()
    mp.set_start_method("fork")
    rows = [("punctual", punctual_side(a, a.messages)), ("redis", redis_side(a, a.messages))]
    mode = "journal --fsync always / appendfsync always" if a.durable else "memory / no persistence"
    print(f"{a.messages} messages, {a.consumers} consumers, batches of 100, {mode}")
    print(f"{'':10} {'msgs/s':>10} {'CPU µs/msg':>11} {'B/msg waiting':>14} {'B/msg leased':>13}")
    for name, (rate, cpu, w, l) in rows:
        print(f"{name:10} {rate:10.0f} {cpu * 1e6:11.2f} {w:14.0f} {l:13.0f}")
    (pr, pc, pw, pl), (rr, rc, rw, rl) = rows[0][1], rows[1][1]
    print(f"{'ratio':10} {pr / rr:10.2f} {pc / rc:11.2f} {pw / rw:14.2f} {pl / rl:13.2f}   (punctual / redis)")


if __name__ == "__main__":
    main()
