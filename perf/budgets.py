#!/usr/bin/env python3
"""The one-shot budgets of `punctual serve`, measured from outside against the real binary.
Python standard library only.

Usage:  python3 perf/budgets.py [--bin target/release/punctual] [--timers 10000000]
                                [--store memory|journal] [--pages 200] [--debounce-s 20]
                                [--debounce-conns 32] [--cancel-limit-s S] [--skip-w1]
                                [--out FILE.json]

One server, 2 shards, no pinning and no spinning (a shared host), on a free loopback port,
with the memory store (or the journal, in a temporary directory, --fsync always). In order:

 1. Fill: --timers timers (10 M) of the tenant `bench`, due in one to two hours, through
    batch POSTs of 10,000 on two connections: 32-byte keys, 100-byte payloads (as
    perf/load/memory.py, whose 1 M figure docs/BENCHMARKS.md gives). Every tenth key is
    `cxl-…` (1 M of 10 M), every 10,000th is `page-…` (1,000), the rest `k-…`.
 2. (c) Memory: VmRSS over the idle process's, per pending timer, at 1 M and at the end.
 3. (a) Pages: --pages times `GET /v1/timers/bench?prefix=page-&limit=1000` on one keep-alive
    connection: the time from sending the request to the last byte of a page of 1,000 keys
    (checked: 1,000 keys, each `page-…`). p50, p99, max; budget 50 ms.
 4. W1 beside pages (skip with --skip-w1): 100,000 timers of the tenant `w1` due uniformly
    over 1-11 s, their lateness from `punctual_fire_lateness_seconds` (the bucket histogram
    of every shard: p50 and p99 interpolated in their bucket, max as the bucket's bound);
    once alone, then again while a connection reads pages back to back.
 5. (b) Bulk cancel: `DELETE /v1/timers/bench?prefix=cxl-` (202), then
    `GET /v1/actions/bench/{id}` every 20 ms until `done`; cancels per second = `cancelled`
    over the time from the DELETE to the first `done` (checked: 1 M matched and cancelled),
    or, past --cancel-limit-s, the rate so far.
 6. (d) Debounce: one key of the tenant `deb` (its callback a webhook receiver of this script,
    answering 200) PUT 10,000 times a second for --debounce-s seconds, pipelined on
    --debounce-conns connections (32), each `{"delay_ms": 2000, "debounce":
    {"max_wait_ms": 1000}}`: the deadline always lies past the cap, so the key must fire once per burst, at its cap (first write of
    the burst + 1 s). Per fire: `fired_at_us - fire_at_us` (the webhook body's `fire_at_us` is
    the deadline in force, the cap) and the receipt's lateness on the same host clock.

Before and after each phase /proc/loadavg is read: helpers compiling on the same cores show
up there, and every latency above is an upper bound on a busy host. Exit 0 when every step
ran and its checks held (budgets missed are reported, not failed), 1 when a check failed, 2
when it could not run.
"""

import argparse
import http.client
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True   # no __pycache__ beside the scripts
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "drills"))
from common import free_port, pct, serve_webhooks  # noqa: E402  (perf/drills/common.py)
from soak_probe import hist_quantile, proc_cpu_s, scrape  # noqa: E402

TENANT = "bench"
PAYLOAD = '{"p":"' + "x" * 92 + '"}'           # 100 bytes of JSON text
BATCH = 10_000
PAGE_BUDGET_MS = 50
DEBOUNCE_RATE = 10_000


def key_of(i):
    """The i-th key of the fill, 32 bytes: every tenth cxl-, every 10,000th page-, else k-."""
    if i % 10_000 == 5:
        return f"page-{i // 10_000:027d}"
    if i % 10 == 0:
        return f"cxl-{i // 10:028d}"
    return f"k-{i:030d}"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Api:
    """One keep-alive connection; `call` answers (status, parsed JSON or None)."""

    def __init__(self, port, timeout=120):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def call(self, method, path, body=None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        r = self.conn.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, None


class Receiver:
    """The debounced tenant's webhook: every delivery's body with its receipt (wall µs)."""

    def __init__(self):
        self.got, self.lock = [], threading.Lock()
        self.port = serve_webhooks(self.on_post).server_address[1]

    def on_post(self, path, headers, body, received_ns):
        with self.lock:
            self.got.append((received_ns // 1000, body))
        return 200


class Server:
    def __init__(self, binary, work, store, receiver_port):
        self.port = free_port()
        cfg = os.path.join(work, "punctual.toml")
        base = f"http://127.0.0.1:{receiver_port}/"
        with open(cfg, "w") as f:
            f.write(f'open_tenants = true\ncallback_allow = ["{base}"]\n'
                    f'[tenants.deb]\ncallback_url = "{base}hook"\n')
        cmd = [binary, "serve", "--config", cfg, "--listen", f"127.0.0.1:{self.port}",
               "--shards", "2", "--pinning", "none", "--spin-us", "0", "--store", store]
        if store == "journal":
            cmd += ["--data-dir", os.path.join(work, "data")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCTUAL_")}
        self.log = open(os.path.join(work, "server.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            if self.proc.poll() is not None:
                raise RuntimeError(f"punctual exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if Api(self.port, 2).call("GET", "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("punctual not healthy within 60 s")

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


# ---------------------------------------------------------------------------------------------
# The phases
# ---------------------------------------------------------------------------------------------

def fill(server, total, res):
    """Registers `total` timers in batches over two connections; RSS at 1 M and at the end."""
    idle = rss_bytes(server.proc.pid)
    res["rss_idle_bytes"] = idle
    batches = iter(range(0, total, BATCH))
    lock, errors, done = threading.Lock(), [], [0]
    rss_1m = {}

    def worker():
        api = Api(server.port)
        while True:
            with lock:
                start = next(batches, None)
            if start is None or errors:
                return
            body = '{"timers":[' + ",".join(
                f'{{"key":"{key_of(i)}","delay_ms":{3_600_000 + i % 3_600_000},"payload":{PAYLOAD}}}'
                for i in range(start, min(start + BATCH, total))) + "]}"
            st, j = api.call("POST", f"/v1/timers/{TENANT}", body)
            bad = [x for x in (j or {}).get("results", []) if x.get("status") not in (200, 201)]
            with lock:
                if st != 200 or bad:
                    errors.append(f"batch at {start}: {st} {bad[:1] or j}")
                done[0] += min(BATCH, total - start)
                if done[0] >= 1_000_000 and not rss_1m:
                    rss_1m["at"] = done[0]
                    rss_1m["rss"] = rss_bytes(server.proc.pid)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors[:3]))
    secs = time.monotonic() - t0
    time.sleep(1.0)
    end = rss_bytes(server.proc.pid)
    res.update(fill_s=round(secs, 1), fill_per_s=round(total / secs),
               rss_end_bytes=end, bytes_per_timer=round((end - idle) / total, 1))
    if rss_1m:
        # Taken when a worker saw 1 M acknowledged: the other may have a batch in flight.
        res["bytes_per_timer_at_1m"] = round((rss_1m["rss"] - idle) / rss_1m["at"], 1)
    print(f"fill: {total:,} timers in {secs:.0f} s ({total / secs:,.0f}/s); RSS idle "
          f"{idle / 2**20:.0f} MiB, end {end / 2**20:.0f} MiB: {res['bytes_per_timer']} B per "
          f"timer (at 1 M: {res.get('bytes_per_timer_at_1m')} B)", flush=True)


def read_page(api):
    """(seconds, keys) of one page of the prefix page-."""
    t = time.perf_counter()
    st, j = api.call("GET", f"/v1/timers/{TENANT}?prefix=page-&limit=1000")
    dt = time.perf_counter() - t
    if st != 200:
        raise RuntimeError(f"page answered {st}: {j}")
    return dt, [x["key"] for x in j["timers"]], j.get("next")


def pages(server, n, res, fails):
    api = Api(server.port)
    lat = []
    cpu0 = proc_cpu_s(server.proc.pid)
    for i in range(n):
        dt, keys, nxt = read_page(api)
        lat.append(dt * 1e3)
        if i == 0:
            want = res["timers"] // 10_000
            if len(keys) != want or not all(k.startswith("page-") for k in keys):
                fails.append(f"a page held {len(keys)} keys, not the {want} page- keys")
            res["page_next"] = nxt
    # The server's CPU per page (both shards and its other threads): what a page costs on a
    # host where the shards had their cores to themselves.
    cpu_ms = (proc_cpu_s(server.proc.pid) - cpu0) / n * 1e3
    res.update(page_n=n, page_p50_ms=round(pct(lat, 50), 2), page_p99_ms=round(pct(lat, 99), 2),
               page_max_ms=round(max(lat), 2), page_budget_ms=PAGE_BUDGET_MS,
               page_server_cpu_ms=round(cpu_ms, 2))
    print(f"pages: {n} of 1,000 keys among {res['timers']:,}: p50 {res['page_p50_ms']} ms, p99 "
          f"{res['page_p99_ms']} ms, max {res['page_max_ms']} ms (budget {PAGE_BUDGET_MS} ms: "
          f"{'met' if res['page_max_ms'] <= PAGE_BUDGET_MS else 'missed'} by the max, "
          f"{'met' if res['page_p99_ms'] <= PAGE_BUDGET_MS else 'missed'} by p99); server CPU "
          f"{cpu_ms:.1f} ms a page", flush=True)


def w1(server, name, with_pages, res):
    """100,000 timers due over 1-11 s; lateness from the histogram, with or without pages."""
    api = Api(server.port)
    rnd = random.Random(7)
    t0_ms = int(time.time() * 1000)
    before = scrape("127.0.0.1", server.port)[1]["punctual_fire_lateness_seconds"]
    for b in range(10):
        body = '{"timers":[' + ",".join(
            f'{{"key":"{name}-{b * 10_000 + i}","fire_at_ms":{t0_ms + 1000 + rnd.randrange(10_000)}}}'
            for i in range(10_000)) + "]}"
        st, _ = api.call("POST", "/v1/timers/w1", body)
        if st != 200:
            raise RuntimeError(f"W1 batch answered {st}")
    stop, reads = threading.Event(), []

    def reader():
        a = Api(server.port)
        while not stop.is_set():
            reads.append(read_page(a)[0] * 1e3)

    th = threading.Thread(target=reader, daemon=True)
    if with_pages:
        th.start()
    time.sleep(max(0.0, (t0_ms + 11_000) / 1000 - time.time()) + 1.0)
    stop.set()
    if with_pages:
        th.join()
    after = scrape("127.0.0.1", server.port)[1]["punctual_fire_lateness_seconds"]
    p50, _ = hist_quantile(0.50, after, before)
    p99, max_le = hist_quantile(0.99, after, before)
    fired = after[float("inf")] - before.get(float("inf"), 0)
    out = {"fired": int(fired), "p50_ms": round(p50 * 1e3, 3) if p50 is not None else None,
           "p99_ms": round(p99 * 1e3, 3) if p99 is not None else None,
           "max_le_ms": round(max_le * 1e3, 3) if max_le is not None else None}
    if with_pages:
        out.update(pages_read=len(reads), page_p99_ms=round(pct(reads, 99), 2) if reads else None)
    res[f"w1_{name}"] = out
    print(f"W1 {name}: {out}", flush=True)


def bulk_cancel(server, limit_s, res, fails):
    api = Api(server.port)
    cpu0 = proc_cpu_s(server.proc.pid)
    t0 = time.perf_counter()
    st, j = api.call("DELETE", f"/v1/timers/{TENANT}?prefix=cxl-")
    if st != 202:
        raise RuntimeError(f"bulk cancel answered {st}: {j}")
    aid = j["id"]
    progress, mark = [], t0
    while True:
        st, a = api.call("GET", f"/v1/actions/{TENANT}/{aid}")
        if st != 200:
            raise RuntimeError(f"action answered {st}: {a}")
        now = time.perf_counter()
        if a["state"] == "done" or now - t0 > limit_s:
            break
        if now - mark >= 10:
            mark = now
            progress.append((round(now - t0, 1), a["cancelled"]))
        time.sleep(0.02)
    secs = time.perf_counter() - t0
    cpu = proc_cpu_s(server.proc.pid) - cpu0
    want = res["timers"] // 10
    done = a["state"] == "done"
    if done and (a["matched"] != want or a["cancelled"] != want or "error" in a):
        fails.append(f"bulk cancel: {a}, expected {want} matched and cancelled")
    res.update(cancel_done=done, cancel_matched=a["matched"], cancel_cancelled=a["cancelled"],
               cancel_s=round(secs, 2), cancels_per_s=round(a["cancelled"] / secs),
               cancel_server_cpu_s=round(cpu, 1), cancel_progress=progress)
    how = "done" if done else f"NOT done after the --cancel-limit-s of {limit_s:.0f} s (rate so far)"
    print(f"bulk cancel of {want:,}: {a['cancelled']:,} cancelled, {a['matched']:,} matched in "
          f"{secs:.2f} s, {how}: {a['cancelled'] / secs:,.0f} cancels/s; server CPU {cpu:.1f} s; "
          f"progress (s, cancelled) {progress}", flush=True)


def debounce(server, receiver, seconds, conns, res, fails):
    body = b'{"delay_ms":2000,"debounce":{"max_wait_ms":1000},"payload":{"hot":true}}'
    req = (b"PUT /v1/timers/deb/hot HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    status_re = re.compile(rb"HTTP/1\.1 (\d{3}) ")
    tick = 0.01
    per_tick = DEBOUNCE_RATE * tick / conns
    counts, lock, last_answer = {}, threading.Lock(), [0.0]
    start_us = time.time_ns() // 1000
    end = time.monotonic() + seconds

    def conn_loop():
        """Sends on schedule (open loop) while a second thread counts the answers."""
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mine, sent, stop = {}, [0], threading.Event()

        def reader():
            buf, seen = b"", 0
            quiet_since = None
            while not (stop.is_set() and seen >= sent[0]):
                if not select.select([s], [], [], 0.1)[0]:
                    if stop.is_set():
                        quiet_since = quiet_since or time.monotonic()
                        if time.monotonic() - quiet_since > 30:
                            break          # answers missing: counted as such
                    continue
                data = s.recv(1 << 20)
                if not data:
                    break
                buf += data
                last = 0
                for m in status_re.finditer(buf):
                    mine[m.group(1)] = mine.get(m.group(1), 0) + 1
                    seen += 1
                    last = m.end()
                if last:
                    last_answer[0] = max(last_answer[0], time.monotonic())
                buf = buf[last:] if last else buf[-64:]

        rt = threading.Thread(target=reader)
        rt.start()
        nxt, carry = time.monotonic(), 0.0
        while time.monotonic() < end:
            carry += per_tick
            n = int(carry)
            carry -= n
            s.sendall(req * n)
            sent[0] += n
            nxt += tick
            time.sleep(max(0.0, nxt - time.monotonic()))
        stop.set()
        rt.join()
        s.close()
        with lock:
            for k, v in mine.items():
                counts[k.decode()] = counts.get(k.decode(), 0) + v
            counts["sent"] = counts.get("sent", 0) + sent[0]

    threads = [threading.Thread(target=conn_loop) for _ in range(conns)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    time.sleep(2.5)      # the last burst's cap, and its delivery
    st, j = Api(server.port).call("GET", "/v1/timers/deb/hot")
    res["debounce_left"] = j
    with receiver.lock:
        got = [(t, json.loads(b)) for t, b in receiver.got if t >= start_us]
    fires = sorted(got, key=lambda g: g[1]["fire_at_us"])
    late = [(j["fired_at_us"] - j["fire_at_us"]) / 1000 for _, j in fires]
    recv = [(t - j["fire_at_us"]) / 1000 for t, j in fires]
    gaps = [(b[1]["fire_at_us"] - a[1]["fire_at_us"]) / 1e6 for a, b in zip(fires, fires[1:])]
    puts = counts.pop("sent")
    ok = counts.get("200", 0) + counts.get("201", 0)
    send_s = min(secs, seconds)
    res["debounce"] = {
        "seconds": round(secs, 1), "puts": puts, "offered_per_s": round(puts / send_s),
        "answered_per_s": round(sum(counts.values()) / max(1e-3, last_answer[0] - t0)),
        "last_answer_s": round(last_answer[0] - t0, 1),
        "answers": counts, "fires": len(fires),
        "fires_per_s": round(len(fires) / secs, 2),
        "gap_s_min": round(min(gaps), 3) if gaps else None,
        "gap_s_max": round(max(gaps), 3) if gaps else None,
        "late_ms_p50": round(pct(late, 50), 2) if late else None,
        "late_ms_max": round(max(late), 2) if late else None,
        "recv_late_ms_p50": round(pct(recv, 50), 2) if recv else None,
        "recv_late_ms_max": round(max(recv), 2) if recv else None,
        "per_fire_late_ms": [round(x, 2) for x in late],
    }
    if ok != puts:
        fails.append(f"debounce: {puts:,} PUTs sent, answers {counts}")
    if any(j.get("attempt", 1) != 1 for _, j in fires):
        fails.append("debounce: a fire needed more than one attempt")
    d = res["debounce"]
    print(f"debounce: {puts:,} PUTs offered at {d['offered_per_s']:,}/s; {sum(counts.values()):,} "
          f"answered, the last {d['last_answer_s']} s after the first PUT ({d['answered_per_s']:,}/s), "
          f"answers {counts}; "
          f"{len(fires)} fires ({d['fires_per_s']}/s), gaps {d['gap_s_min']}-{d['gap_s_max']} s; "
          f"fired_at - cap p50 {d['late_ms_p50']} ms max {d['late_ms_max']} ms; received - cap "
          f"p50 {d['recv_late_ms_p50']} ms max {d['recv_late_ms_max']} ms", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/punctual")
    ap.add_argument("--timers", type=int, default=10_000_000)
    ap.add_argument("--store", choices=["memory", "journal"], default="memory")
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--debounce-s", type=float, default=20)
    ap.add_argument("--debounce-conns", type=int, default=32)
    ap.add_argument("--cancel-limit-s", type=float, default=3600,
                    help="stop waiting for the bulk cancel after this long; its rate so far is reported")
    ap.add_argument("--skip-w1", action="store_true")
    ap.add_argument("--out", help="write every figure here as JSON")
    a = ap.parse_args()
    if a.timers < 10_000 or a.timers % 10_000:
        ap.error("--timers must be a multiple of 10,000")
    if not os.access(a.bin, os.X_OK):
        print(f"no executable at {a.bin} (--bin)", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="punctual-budgets-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # stop the server on the way out
    res = {"timers": a.timers, "store": a.store, "loadavg": {}, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    fails = []
    server = None
    try:
        receiver = Receiver()
        server = Server(os.path.abspath(a.bin), work, a.store, receiver.port)
        print(f"punctual {a.bin}, store {a.store}, 2 shards, port {server.port}; load {loadavg()}", flush=True)
        steps = [("fill", lambda: fill(server, a.timers, res)),
                 ("pages", lambda: pages(server, a.pages, res, fails))]
        if not a.skip_w1:
            steps += [("w1 alone", lambda: w1(server, "alone", False, res)),
                      ("w1 with pages", lambda: w1(server, "paged", True, res))]
        steps += [("bulk cancel", lambda: bulk_cancel(server, a.cancel_limit_s, res, fails)),
                  ("debounce", lambda: debounce(server, receiver, a.debounce_s, a.debounce_conns, res, fails))]
        for name, step in steps:
            before = loadavg()
            step()
            res["loadavg"][name] = f"{before} -> {loadavg()}"
            print(f"  load average {res['loadavg'][name]}", flush=True)
        res["server_exit"] = server.stop()
        server = None
    except (RuntimeError, OSError, http.client.HTTPException) as e:
        print(f"could not run: {e}; work directory kept: {work}")
        return 2
    finally:
        if server is not None:
            server.stop()
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=1)
    if fails:
        print("FAILED:\n  " + "\n  ".join(fails))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
