#!/usr/bin/env python3
"""Soak load generator, sampler and verdict for `punctual serve` (called by perf/soak.sh).

Python standard library only.

    soak.py run --url http://127.0.0.1:PORT --pid PID --duration 30m --out DIR [--aux-pid PID]
    soak.py verdict --out DIR [--server-exit N] [--server-log FILE]

`run` drives a running server and samples it; it writes DIR/samples.csv (one row per sample),
DIR/summary.json (counts for the whole run) and DIR/errors.log (unexpected answers and
connection errors). `verdict` reads those files and prints the verdict (also written to
DIR/verdict.txt); its exit status is 0 when the run was clean, 1 when requests failed or the
fire count does not add up, 2 when the server died or did not exit cleanly.

The load
--------
Open loop: operations are due at a constant rate (--rate, ops/s, all connections together)
whatever the server does. Each due operation joins one FIFO queue; any idle keep-alive
connection (--conns of them) takes the head. A request's latency is measured from the time
it was DUE, not from when it was sent, so a stalled server shows up as latency instead of
as a quieter generator (no coordinated omission). The time from send to answer is recorded
too (svc_*), as is the generator's own lag (how late its loop noticed that an operation was
due: if that is large, the generator, not the server, was starved of CPU).

Operations (weights --mix, default new 50, resched 25, cancel 20, batch 5):
  new      PUT of a new key, delay 1-30 s                      expect 201
  resched  PUT of a recently scheduled key, new delay 1-30 s    expect 200 (pending) or 201 (it had fired)
  cancel   DELETE of a recently scheduled key                   expect 204, or 404 (it had fired or was cancelled)
  batch    POST of --batch new keys, delays 1-30 s             expect 200, every item 201
Every other answer, a connection error or a request outstanding for more than 10 s is an error.

Sampling
--------
Every --sample seconds (10 by default), from a separate thread:
  rss_mib, threads, fds     VmRSS and Threads of /proc/PID/status, entries of /proc/PID/fd
  cpu_pct                   server CPU time over the window (100 = one core)
  pending, fired_per_s      sum over shards of punctual_timers_pending; rate of punctual_timers_fired_total
  late_p50_ms, late_p99_ms  fire lateness quantiles over the window, from the difference of the
                            punctual_fire_lateness_seconds buckets (summed over shards) between
                            this scrape and the previous one, interpolated linearly inside the
                            bucket that holds the quantile (as Prometheus' histogram_quantile
                            does); the buckets go 1-2-5 from 1 us to 10 s, so a value is only
                            known to lie within its bucket
  late_max_le_ms            upper bound of the highest non-empty bucket in the window
  ops_per_s                 requests answered per second (client side)
  req_p50_ms .. req_max_ms  client-side latency from the due time, over requests answered in
                            the window (exact, from every request)
  svc_p99_ms                client-side latency from the actual send
  gen_lag_p99_ms            generator loop lag (see above); its timer resolution is ~1 ms
  errors, errors_total      unexpected answers/connection errors in the window, and so far
  cancel_404_total          expected 404s on DELETE so far
  store_pending_writes, journal_disk_mib, store_errors_total, ring_rejected_total,
  watchdog_wakes_total,
  executor_stalls_total     from /metrics, summed over shards
  executor_runnable_sleeps_total  of those, with the shard's task runnable (glommio's park bug)
  aux_rss_mib               VmRSS of --aux-pid (the soak's redis-server), if given
  shard_runq_wait_pct       host contention as the server saw it: the largest share of the
                            window a shard thread spent runnable but not running (schedstat)
  host_cpu_pressure_pct     /proc/pressure/cpu "some avg10": share of the last 10 s in which
                            some task on the host waited for a CPU
  host_io_pressure_pct      the same for I/O (a slow fdatasync shows up here)
  flush_p99_ms, flush_max_le_ms  punctual_store_flush_seconds over the window, like lateness
  gen_cpu_pct               this generator's own CPU use (100 = one core)
  backlog                   operations due but not yet sent (all connections busy): grows
                            without bound when the server cannot keep up with --rate
  stream_entries            Redis store: entries in the fired streams, all tenants (each is
                            trimmed at about 1,000,000, so Redis memory grows until then)
The first row (t=0) is taken before any load. After the load phase the server is sampled for
up to 60 s more (phase "drain") until no timer is pending: every timer then has fired or was
cancelled, and the fired count must equal the 201s minus the 204s the client received.
"""

import argparse
import collections
import csv
import http.client
import json
import math
import os
import random
import re
import selectors
import socket
import statistics
import sys
import threading
import time
import urllib.parse

COLUMNS = [
    "t_s", "phase", "rss_mib", "threads", "fds", "cpu_pct", "pending", "fired_per_s",
    "late_p50_ms", "late_p99_ms", "late_max_le_ms", "ops_per_s", "req_p50_ms", "req_p99_ms",
    "req_max_ms", "svc_p99_ms", "gen_lag_p99_ms", "errors", "errors_total", "cancel_404_total",
    "flush_p99_ms", "flush_max_le_ms", "store_pending_writes", "journal_disk_mib",
    "store_errors_total", "store_ack_timeouts_total", "store_refused_total",
    "ring_rejected_total", "watchdog_wakes_total", "executor_stalls_total", "executor_runnable_sleeps_total", "journal_snapshots_total",
    "journal_compaction_holds_total", "aux_rss_mib", "shard_runq_wait_pct",
    "host_cpu_pressure_pct", "host_io_pressure_pct", "gen_cpu_pct", "stream_entries", "backlog",
]
HISTOGRAMS = ("punctual_fire_lateness_seconds", "punctual_store_flush_seconds")

REQUEST_TIMEOUT_S = 10.0
TENANTS = ["soak-a", "soak-b", "soak-c", "soak-d"]


def parse_duration(text):
    """'90s', '30m', '1h', '1h30m', '45' (seconds) -> seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError(f"bad duration {text!r}: use e.g. 90s, 30m, 1h, 1h30m")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


# ---------------------------------------------------------------- /proc and /metrics

def proc_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except OSError:
        return False


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "Threads"):
                out[k] = int(v.split()[0])
    return out


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shard_runq_wait_ns(pid):
    """{tid: ns spent runnable but waiting for a CPU} of the shard threads (all threads if
    none is named punctual-shard-*), from /proc/PID/task/TID/schedstat."""
    out, every = {}, {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                wait = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        every[tid] = wait
        if comm.startswith("punctual-shard"):
            out[tid] = wait
    return out or every


def host_pressure(what):
    """'some avg10' of /proc/pressure/<what> (cpu, io): % of the last 10 s in which some task
    waited for a CPU / for I/O (None where PSI is not available)."""
    try:
        with open(f"/proc/pressure/{what}") as f:
            return float(f.readline().split()[1].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


def proc_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


LINE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")
LE_RE = re.compile(r'le="([^"]+)"')


def scrape(host, port):
    """Sums over shards: {name: value} for plain series, and {histogram: {le: cumulative}}
    for the HISTOGRAMS."""
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        if resp.status != 200:
            raise OSError(f"/metrics answered {resp.status}")
    finally:
        conn.close()
    sums = collections.defaultdict(float)
    buckets = {h: collections.defaultdict(float) for h in HISTOGRAMS}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = LINE_RE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        try:
            v = float(value)
        except ValueError:
            continue
        if name.endswith("_bucket") and name[:-7] in buckets:
            le = LE_RE.search(labels)
            if le:
                buckets[name[:-7]][float(le.group(1))] += v  # float("+Inf") is inf
        else:
            sums[name] += v
    return sums, {h: dict(b) for h, b in buckets.items()}


def hist_quantile(q, cum_now, cum_before):
    """Quantile q of the observations between two scrapes of a cumulative histogram.

    Returns (value_s, max_le_s) or (None, None) with no observation. value is interpolated
    linearly inside its bucket (lower bound = the previous bucket's upper bound, 0 for the
    first); a quantile in the +Inf bucket is reported as the largest finite bound."""
    les = sorted(cum_now)
    delta = []
    for le in les:
        d = cum_now[le] - cum_before.get(le, 0.0)
        delta.append(d)
    if any(d < 0 for d in delta):  # counter reset: the server restarted
        delta = [cum_now[le] for le in les]
    total = delta[-1] if delta else 0
    if total <= 0:
        return None, None
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    value = None
    for le, c in zip(les, delta):
        if c >= rank:
            if math.isinf(le):
                value = prev_le
            elif c == prev_c:
                value = le
            else:
                value = prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
            break
        prev_le, prev_c = le, c
    max_le = None
    prev_c = 0.0
    for le, c in zip(les, delta):
        if c > prev_c:
            max_le = le
        prev_c = c
    if max_le is not None and math.isinf(max_le):
        max_le = max(x for x in les if not math.isinf(x))
    return value, max_le


def pct(sorted_values, q):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[i]


# ---------------------------------------------------------------- HTTP/1.1 client

def parse_response(buf):
    """(status, body bytes, bytes consumed, close?) of the first whole response in buf, or None."""
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return None
    lines = bytes(buf[:i]).decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    clen, chunked, close = None, False, False
    for line in lines[1:]:
        k, _, v = line.partition(":")
        k = k.strip().lower()
        if k == "content-length":
            clen = int(v.strip())
        elif k == "transfer-encoding" and "chunked" in v.lower():
            chunked = True
        elif k == "connection" and "close" in v.lower():
            close = True
    pos = i + 4
    if chunked:
        body = bytearray()
        while True:
            j = buf.find(b"\r\n", pos)
            if j < 0:
                return None
            size = int(bytes(buf[pos:j]).split(b";")[0], 16)
            if size == 0:
                k = buf.find(b"\r\n\r\n", j)
                if k < 0:
                    return None
                return status, bytes(body), k + 4, close
            if len(buf) < j + 2 + size + 2:
                return None
            body += buf[j + 2:j + 2 + size]
            pos = j + 2 + size + 2
    clen = clen or 0
    if len(buf) < pos + clen:
        return None
    return status, bytes(buf[pos:pos + clen]), pos + clen, close


class Conn:
    __slots__ = ("sock", "rbuf", "wbuf", "op", "sent_at", "id")

    def __init__(self, cid):
        self.id = cid
        self.sock = None
        self.rbuf = bytearray()
        self.wbuf = b""
        self.op = None
        self.sent_at = 0.0


class Load:
    def __init__(self, args):
        self.args = args
        u = urllib.parse.urlsplit(args.url)
        self.host, self.port = u.hostname, u.port or 80
        self.rate = args.rate
        w = [float(x) for x in args.mix.split(",")]
        self.kinds = ["new", "resched", "cancel", "batch"]
        self.weights = w
        self.rng = random.Random(args.seed)
        self.seq = 0
        self.recent = []  # ring of (tenant, key) recently scheduled
        self.recent_max = 65536
        self.recent_i = 0
        self.pad = "x" * 48
        # counters (main thread writes; the sampler reads whole ints)
        self.lock = threading.Lock()
        self.win_lat = []  # (due->answer, send->answer) of answers in the current window
        self.win_lag = []
        self.done = 0
        self.errors_total = 0
        self.cancel_404 = 0
        self.n201 = 0
        self.n204 = 0
        # answers that leave it open whether the change happened (5xx, lost connections)
        self.unacked_puts = 0
        self.unacked_cancels = 0
        self.by_kind = collections.Counter()  # "kind status" -> n
        self.batch_items = collections.Counter()
        self.err_kinds = collections.Counter()
        self.err_log = open(os.path.join(args.out, "errors.log"), "w")
        self.err_logged = 0
        self.stop = threading.Event()
        self.t0 = None
        self.queue = collections.deque()

    # -- operations
    def _key(self):
        self.seq += 1
        return self.rng.choice(TENANTS), f"k{self.seq:010d}"

    def _remember(self, tk):
        if len(self.recent) < self.recent_max:
            self.recent.append(tk)
        else:
            self.recent[self.recent_i] = tk
            self.recent_i = (self.recent_i + 1) % self.recent_max

    def _body(self):
        return (f'{{"delay_ms":{self.rng.randint(1000, 30000)},'
                f'"payload":{{"n":{self.seq},"pad":"{self.pad}"}}}}').encode()

    def make_op(self, due):
        kind = self.rng.choices(self.kinds, self.weights)[0]
        if kind in ("resched", "cancel") and not self.recent:
            kind = "new"
        if kind == "new":
            t, k = self._key()
            body = self._body()
            req = (f"PUT /v1/timers/{t}/{k} HTTP/1.1\r\nHost: soak\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
            meta = (t, k)
        elif kind == "resched":
            t, k = self.rng.choice(self.recent)
            body = self._body()
            req = (f"PUT /v1/timers/{t}/{k} HTTP/1.1\r\nHost: soak\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
            meta = (t, k)
        elif kind == "cancel":
            t, k = self.rng.choice(self.recent)
            req = f"DELETE /v1/timers/{t}/{k} HTTP/1.1\r\nHost: soak\r\n\r\n".encode()
            meta = (t, k)
        else:
            t = self.rng.choice(TENANTS)
            items, keys = [], []
            for _ in range(self.args.batch):
                _, k = self._key()
                keys.append(k)
                items.append(f'{{"key":"{k}","delay_ms":{self.rng.randint(1000, 30000)},'
                             f'"payload":{{"n":{self.seq},"pad":"{self.pad}"}}}}')
            body = ('{"timers":[' + ",".join(items) + "]}").encode()
            req = (f"POST /v1/timers/{t} HTTP/1.1\r\nHost: soak\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
            meta = (t, keys)
        return [kind, due, req, meta]

    def error(self, what, detail=""):
        self.errors_total += 1
        self.err_kinds[what] += 1
        if self.err_logged < 200:
            self.err_logged += 1
            t = time.monotonic() - (self.t0 or time.monotonic())
            self.err_log.write(f"{t:9.3f}s {what} {detail}\n")
            self.err_log.flush()

    def on_answer(self, op, status, body, now, sent_at):
        kind, due, _, meta = op
        self.by_kind[f"{kind} {status}"] += 1
        with self.lock:
            self.win_lat.append((now - due, now - sent_at))
            self.done += 1
        if kind == "new":
            if status == 201:
                self.n201 += 1
                self._remember(meta)
                return
        elif kind == "resched":
            if status in (200, 201):
                if status == 201:
                    self.n201 += 1
                return
        elif kind == "cancel":
            if status == 204:
                self.n204 += 1
                return
            if status == 404:
                self.cancel_404 += 1
                return
        else:
            if status == 200:
                try:
                    results = json.loads(body)["results"]
                except (ValueError, KeyError, TypeError):
                    self.error("batch_unreadable", body[:200])
                    return
                t, keys = meta
                bad = 0
                for r, k in zip(results, keys):
                    s = r.get("status")
                    self.batch_items[s] += 1
                    if s == 201:
                        self.n201 += 1
                        self._remember((t, k))
                    elif s == 200:
                        self._remember((t, k))
                    else:
                        bad += 1
                        if s is not None and s >= 500:
                            self.unacked_puts += 1
                        code = (r.get("error") or {}).get("code", "")
                        self.error(f"batch_item_{s}_{code}", json.dumps(r)[:200])
                if len(results) != len(keys):
                    self.error("batch_count", f"{len(results)} results for {len(keys)} items")
                return
        code = ""
        try:
            code = "_" + json.loads(body)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            pass
        if kind in ("new", "resched") and status >= 500:
            self.unacked_puts += 1
        elif kind == "cancel" and status >= 500:
            self.unacked_cancels += 1
        self.error(f"{kind}_{status}{code}", body[:200].decode("utf-8", "replace"))

    # -- connections
    def connect(self, c):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(5)
        s.connect((self.host, self.port))
        s.setblocking(False)
        c.sock, c.rbuf, c.wbuf, c.op = s, bytearray(), b"", None
        self.sel.register(s, selectors.EVENT_READ, c)

    def drop(self, c, why):
        if c.op is not None:
            kind = c.op[0]
            if kind == "cancel":
                self.unacked_cancels += 1
            else:
                self.unacked_puts += self.args.batch if kind == "batch" else 1
            self.error(f"conn_{why}", f"{kind} request lost")
            c.op = None
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        c.sock = None
        if c in self.idle:
            self.idle.remove(c)

    def send(self, c, op, now):
        c.op = op
        c.sent_at = now
        data = op[2]
        try:
            n = c.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError as e:
            self.drop(c, "send_error")
            self.error("send_error", str(e))
            return
        if n < len(data):
            c.wbuf = data[n:]
            self.sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)

    def run(self, duration):
        self.sel = selectors.DefaultSelector()
        conns = [Conn(i) for i in range(self.args.conns)]
        self.idle = collections.deque()
        for c in conns:
            self.connect(c)
            self.idle.append(c)
        queue = self.queue = collections.deque()
        interval = 1.0 / self.rate
        self.t0 = t0 = time.monotonic()
        t_end = t0 + duration
        next_due = t0
        hard_end = t_end + REQUEST_TIMEOUT_S + 2
        last_check = t0
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= t_end and not queue and all(c.op is None for c in conns):
                break
            if now >= hard_end:
                break
            lags = None
            while next_due <= now and next_due < t_end:
                if lags is None:
                    lags = []
                lags.append(now - next_due)
                queue.append(self.make_op(next_due))
                next_due += interval
            if lags:
                with self.lock:
                    self.win_lag.extend(lags)
            while queue and self.idle:
                c = self.idle.popleft()
                if c.sock is None:
                    try:
                        self.connect(c)
                    except OSError as e:
                        # count it, keep the operation queued, retry on a later turn
                        self.error("connect_error", str(e))
                        self.idle.append(c)
                        time.sleep(0.05)
                        break
                self.send(c, queue.popleft(), time.monotonic())
                if c.sock is None:  # send failed: the op is lost (counted), reconnect later
                    self.idle.append(c)
            if now - last_check > 1.0:
                last_check = now
                for c in conns:
                    if c.op is not None and now - c.sent_at > REQUEST_TIMEOUT_S:
                        self.drop(c, "timeout")  # counts the lost request
                        self.idle.append(c)
            if queue and self.idle:
                timeout = 0
            elif next_due < t_end:
                timeout = max(0.0, next_due - time.monotonic())
            else:
                timeout = 0.05
            for key, ev in self.sel.select(timeout):
                c = key.data
                if c.sock is None:
                    continue
                if ev & selectors.EVENT_WRITE and c.wbuf:
                    try:
                        n = c.sock.send(c.wbuf)
                        c.wbuf = c.wbuf[n:]
                    except BlockingIOError:
                        pass
                    except OSError as e:
                        self.drop(c, "send_error")
                        self.error("send_error", str(e))
                        self.idle.append(c)
                        continue
                    if not c.wbuf:
                        self.sel.modify(c.sock, selectors.EVENT_READ, c)
                if ev & selectors.EVENT_READ:
                    try:
                        data = c.sock.recv(262144)
                    except BlockingIOError:
                        continue
                    except OSError as e:
                        self.drop(c, "reset")
                        self.error("recv_error", str(e))
                        self.idle.append(c)
                        continue
                    if not data:
                        self.drop(c, "closed")
                        self.idle.append(c)
                        continue
                    c.rbuf += data
                    while True:
                        try:
                            r = parse_response(c.rbuf)
                        except ValueError as e:
                            self.drop(c, "bad_response")
                            self.error("bad_response", str(e))
                            break
                        if r is None:
                            break
                        status, body, used, close = r
                        del c.rbuf[:used]
                        now2 = time.monotonic()
                        if c.op is None:
                            self.error("unsolicited_response", str(status))
                        else:
                            op, c.op = c.op, None
                            self.on_answer(op, status, body, now2, c.sent_at)
                        if close:
                            self.drop(c, "server_close")
                            break
                    if c.op is None and c not in self.idle:
                        self.idle.append(c)
        self.unsent = len(queue)
        for c in conns:
            if c.sock is not None:
                self.drop(c, "unanswered_at_end")
        if self.unsent:
            self.error("unsent_at_end", f"{self.unsent} operations never sent")
        return time.monotonic() - t0


# ---------------------------------------------------------------- sampler

class Sampler(threading.Thread):
    def __init__(self, args, load, host, port):
        super().__init__(daemon=True)
        self.args, self.load, self.host, self.port = args, load, host, port
        self.rows = []
        self.died = False
        self.died_at = None
        self.phase = "load"
        self.finish = threading.Event()  # set by main when the load is over: drain, then stop
        self.drained = False
        self.scrape_errors = 0
        self.last = None
        f = open(os.path.join(args.out, "samples.csv"), "w", newline="")
        self.csv_file = f
        self.csv = csv.DictWriter(f, fieldnames=COLUMNS)
        self.csv.writeheader()
        f.flush()

    def sample(self, t):
        pid = self.args.pid
        if not proc_alive(pid):
            self.died, self.died_at = True, round(t, 1)
            return None
        try:
            st = proc_status(pid)
            fds = proc_fds(pid)
            cpu = proc_cpu_s(pid)
            runq = shard_runq_wait_ns(pid)
        except OSError:
            self.died, self.died_at = True, round(t, 1)
            return None
        try:
            sums, buckets = scrape(self.host, self.port)
        except (OSError, http.client.HTTPException) as e:
            self.scrape_errors += 1
            self.load.error("scrape_error", str(e))
            sums, buckets = None, None
        with self.load.lock:
            lat, self.load.win_lat = self.load.win_lat, []
            lag, self.load.win_lag = self.load.win_lag, []
            done = self.load.done
        errors_total = self.load.errors_total
        now = time.monotonic()
        row = {k: "" for k in COLUMNS}
        gen_cpu = sum(os.times()[:2])
        row["backlog"] = len(self.load.queue)
        row.update(t_s=f"{t:.1f}", phase=self.phase, rss_mib=f"{st.get('VmRSS', 0) / 1024:.2f}",
                   threads=st.get("Threads", ""), fds=fds,
                   errors_total=errors_total, cancel_404_total=self.load.cancel_404)
        prev = self.last
        for what in ("cpu", "io"):
            psi = host_pressure(what)
            if psi is not None:
                row[f"host_{what}_pressure_pct"] = f"{psi:.1f}"
        if sums is not None:
            row["pending"] = int(sums.get("punctual_timers_pending", 0))
            row["store_pending_writes"] = int(sums.get("punctual_store_pending_writes", 0))
            if "punctual_journal_disk_bytes" in sums:
                row["journal_disk_mib"] = f"{sums['punctual_journal_disk_bytes'] / 2**20:.2f}"
            row["store_errors_total"] = int(sums.get("punctual_store_errors_total", 0))
            if "punctual_stream_length" in sums:
                row["stream_entries"] = int(sums["punctual_stream_length"])
            row["store_ack_timeouts_total"] = int(sums.get("punctual_store_ack_timeouts_total", 0))
            row["store_refused_total"] = int(sums.get("punctual_store_refused_total", 0))
            row["ring_rejected_total"] = int(sums.get("punctual_ring_rejected_total", 0))
            row["watchdog_wakes_total"] = int(sums.get("punctual_shard_watchdog_wakes_total", 0))
            row["executor_stalls_total"] = int(sums.get("punctual_executor_stalls_total", 0))
            row["executor_runnable_sleeps_total"] = int(
                sums.get("punctual_executor_runnable_sleeps_total", 0))
            row["journal_snapshots_total"] = int(sums.get("punctual_journal_snapshots_total", 0))
            row["journal_compaction_holds_total"] = int(
                sums.get("punctual_journal_compaction_holds_total", 0))
        if self.args.aux_pid:
            try:
                row["aux_rss_mib"] = f"{proc_status(self.args.aux_pid).get('VmRSS', 0) / 1024:.2f}"
            except OSError:
                row["aux_rss_mib"] = ""
        if prev is not None:
            dt = now - prev["mono"]
            row["cpu_pct"] = f"{100 * (cpu - prev['cpu']) / dt:.1f}"
            row["gen_cpu_pct"] = f"{100 * (gen_cpu - prev['gen_cpu']) / dt:.1f}"
            waits = [w - prev["runq"][tid] for tid, w in runq.items() if tid in prev["runq"]]
            if waits:
                row["shard_runq_wait_pct"] = f"{100 * max(waits) / 1e9 / dt:.1f}"
            row["ops_per_s"] = f"{(done - prev['done']) / dt:.1f}"
            row["errors"] = errors_total - prev["errors_total"]
            if sums is not None and prev["sums"] is not None:
                fired = sums.get("punctual_timers_fired_total", 0) - prev["sums"].get(
                    "punctual_timers_fired_total", 0)
                row["fired_per_s"] = f"{fired / dt:.1f}"
                late, late0 = buckets["punctual_fire_lateness_seconds"], prev["buckets"]["punctual_fire_lateness_seconds"]
                p50, _ = hist_quantile(0.50, late, late0)
                p99, max_le = hist_quantile(0.99, late, late0)
                if p99 is not None:
                    row["late_p50_ms"] = f"{p50 * 1e3:.4f}"
                    row["late_p99_ms"] = f"{p99 * 1e3:.4f}"
                    row["late_max_le_ms"] = f"{max_le * 1e3:.4f}"
                fl, fl0 = buckets["punctual_store_flush_seconds"], prev["buckets"]["punctual_store_flush_seconds"]
                p99, max_le = hist_quantile(0.99, fl, fl0)
                if p99 is not None:
                    row["flush_p99_ms"] = f"{p99 * 1e3:.3f}"
                    row["flush_max_le_ms"] = f"{max_le * 1e3:.3f}"
            if lat:
                due = sorted(x[0] for x in lat)
                svc = sorted(x[1] for x in lat)
                row["req_p50_ms"] = f"{pct(due, 0.50) * 1e3:.3f}"
                row["req_p99_ms"] = f"{pct(due, 0.99) * 1e3:.3f}"
                row["req_max_ms"] = f"{due[-1] * 1e3:.3f}"
                row["svc_p99_ms"] = f"{pct(svc, 0.99) * 1e3:.3f}"
            if lag:
                row["gen_lag_p99_ms"] = f"{pct(sorted(lag), 0.99) * 1e3:.3f}"
        self.last = {"mono": now, "cpu": cpu, "runq": runq, "gen_cpu": gen_cpu, "done": done, "errors_total": errors_total,
                     "sums": sums if sums is not None else (prev or {}).get("sums"),
                     "buckets": buckets if buckets is not None else (prev or {}).get("buckets")}
        self.final_sums = self.last["sums"]
        self.csv.writerow(row)
        self.csv_file.flush()
        self.rows.append(row)
        return row

    def run(self):
        step = self.args.sample
        t0 = time.monotonic()
        k = 0
        finished_at = None
        while True:
            if self.phase == "load" and self.finish.is_set():
                self.phase = "drain"
                finished_at = time.monotonic()
            t = time.monotonic() - t0
            row = self.sample(t)
            if row is None:
                self.load.stop.set()
                print(f"soak: the server (pid {self.args.pid}) is gone at t={t:.0f}s",
                      file=sys.stderr, flush=True)
                return
            if self.args.verbose:
                print("soak: " + " ".join(f"{c}={row[c]}" for c in (
                    "t_s", "phase", "rss_mib", "fds", "pending", "ops_per_s", "late_p99_ms",
                    "req_p99_ms", "gen_lag_p99_ms", "errors_total")), file=sys.stderr, flush=True)
            if self.phase == "drain":
                if row.get("pending") == 0:
                    self.drained = True
                    return
                if time.monotonic() - finished_at >= 60:
                    return
            k += 1
            deadline = t0 + k * step
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, 0.5))


def cmd_run(args):
    os.makedirs(args.out, exist_ok=True)
    duration = parse_duration(args.duration)
    load = Load(args)
    sampler = Sampler(args, load, load.host, load.port)
    sampler.start()
    # let the t=0 (idle) sample land before the load starts
    while not sampler.rows and sampler.is_alive():
        time.sleep(0.01)
    elapsed = load.run(duration)
    sampler.finish.set()
    sampler.join()
    fs = getattr(sampler, "final_sums", None) or {}
    fired = int(fs.get("punctual_timers_fired_total", 0))
    summary = {
        "duration_s": duration, "load_elapsed_s": round(elapsed, 1), "rate": args.rate,
        "conns": args.conns, "mix": args.mix, "batch": args.batch, "sample_s": args.sample,
        "url": args.url, "store": args.store, "shards": args.shards,
        "requests_answered": load.done, "errors_total": load.errors_total,
        "errors_by_kind": dict(load.err_kinds), "answers": dict(sorted(load.by_kind.items())),
        "batch_items": {str(k): v for k, v in load.batch_items.items()},
        "cancel_404": load.cancel_404, "created_201": load.n201, "cancelled_204": load.n204,
        "expected_fires": load.n201 - load.n204, "fired_total": fired,
        "unacked_puts": load.unacked_puts, "unacked_cancels": load.unacked_cancels,
        "pending_end": sampler.rows[-1].get("pending") if sampler.rows else None,
        "drained": sampler.drained, "server_died": sampler.died, "died_at_s": sampler.died_at,
        "scrape_errors": sampler.scrape_errors,
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    load.err_log.close()
    if sampler.died:
        return 2
    return 1 if load.errors_total else 0


# ---------------------------------------------------------------- verdict

def slope_per_hour(points):
    """Least-squares slope of (t_s, y) points, per hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    sxy = sum((p[0] - mx) * (p[1] - my) for p in points)
    return sxy / sxx * 3600


def fnum(row, k):
    v = row.get(k, "")
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v, spec="{:.2f}"):
    return "n/a" if v is None else spec.format(v)


def cmd_verdict(args):
    with open(os.path.join(args.out, "samples.csv")) as f:
        rows = list(csv.DictReader(f))
    try:
        with open(os.path.join(args.out, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {"server_died": True, "errors_total": None}
    load = [r for r in rows if r["phase"] == "load"]
    lines = []
    out = lines.append
    if not load:
        out("VERDICT: FAIL (no samples)")
        print("\n".join(lines))
        return 2
    t_end = fnum(load[-1], "t_s")
    half = [r for r in load if fnum(r, "t_s") >= t_end / 2]
    rss_pts = [(fnum(r, "t_s"), fnum(r, "rss_mib")) for r in half if fnum(r, "rss_mib") is not None]
    fd_pts = [(fnum(r, "t_s"), fnum(r, "fds")) for r in half if fnum(r, "fds") is not None]
    thr_pts = [(fnum(r, "t_s"), fnum(r, "threads")) for r in half if fnum(r, "threads") is not None]
    aux_pts = [(fnum(r, "t_s"), fnum(r, "aux_rss_mib")) for r in half if fnum(r, "aux_rss_mib") is not None]
    rss_slope, fd_slope, thr_slope = slope_per_hour(rss_pts), slope_per_hour(fd_pts), slope_per_hour(thr_pts)
    aux_slope = slope_per_hour(aux_pts)
    loaded = load[1:]  # without the idle t=0 row

    def col(k, rs=loaded):
        return [v for v in (fnum(r, k) for r in rs) if v is not None]

    def spread(k):
        v = col(k)
        return (statistics.median(v), max(v)) if v else (None, None)

    late_med, late_max = spread("late_p99_ms")
    req_med, req_max = spread("req_p99_ms")
    svc_med, svc_max = spread("svc_p99_ms")
    lag_med, lag_max = spread("gen_lag_p99_ms")
    pend = col("pending")
    pend_half = col("pending", half)
    ops = col("ops_per_s")
    fired = col("fired_per_s")
    cpu = col("cpu_pct")
    rss0 = fnum(load[0], "rss_mib")
    rss1 = fnum(loaded[0], "rss_mib") if loaded else None
    rss_mid = rss_pts[0][1] if rss_pts else None
    rss_end = fnum(load[-1], "rss_mib")
    rss_max = max(col("rss_mib", load))
    fds = col("fds", load)
    drain = [r for r in rows if r["phase"] == "drain"]

    dur = t_end
    out(f"soak verdict: store={s.get('store')} shards={s.get('shards')} load {dur / 60:.1f} min "
        f"at {s.get('rate')} ops/s target, {s.get('conns')} connections, samples every {s.get('sample_s')} s")
    out(f"  RSS MiB: idle {fmt(rss0)}, first loaded sample {fmt(rss1)}, half-way {fmt(rss_mid)}, "
        f"end of load {fmt(rss_end)}, max {fmt(rss_max)}")
    out(f"  RSS slope, 2nd half: {fmt(rss_slope, '{:+.2f}')} MiB/h "
        f"(over 24 h: {fmt(None if rss_slope is None else rss_slope * 24, '{:+.1f}')} MiB)")
    out(f"  fds: start {int(fds[0])}, end {int(fds[-1])}, max {int(max(fds))}; slope, 2nd half: "
        f"{fmt(fd_slope, '{:+.2f}')} fds/h; threads slope {fmt(thr_slope, '{:+.2f}')}/h")
    if aux_pts:
        se = col("stream_entries", load)
        out(f"  redis-server RSS MiB: end {fmt(aux_pts[-1][1])}, slope, 2nd half: {fmt(aux_slope, '{:+.2f}')} MiB/h"
            + (f" (fired-stream entries at the end: {int(se[-1])}; each tenant's stream is trimmed at ~1,000,000)" if se else ""))
    if pend:
        out(f"  pending: min {int(min(pend))}, median {int(statistics.median(pend))}, max {int(max(pend))} "
            f"(2nd half {int(min(pend_half))}..{int(max(pend_half))})")
    out(f"  fire lateness p99 per 10 s window (bucket-interpolated): median {fmt(late_med, '{:.3f}')} ms, "
        f"max {fmt(late_max, '{:.3f}')} ms; highest bucket reached: "
        f"{fmt(max(col('late_max_le_ms')) if col('late_max_le_ms') else None, '{:g}')} ms")
    out(f"  request p99 (client, from due time) per window: median {fmt(req_med, '{:.2f}')} ms, "
        f"max {fmt(req_max, '{:.2f}')} ms; from send: median {fmt(svc_med, '{:.2f}')}, max {fmt(svc_max, '{:.2f}')} ms; "
        f"worst single request {fmt(max(col('req_max_ms')) if col('req_max_ms') else None, '{:.1f}')} ms")
    bl = col("backlog", load)
    out(f"  backlog (due, not yet sent) at samples: max {fmt(max(bl) if bl else None, '{:.0f}')}")
    out(f"  generator lag p99: median {fmt(lag_med, '{:.2f}')} ms, max {fmt(lag_max, '{:.2f}')} ms")
    rq_med, rq_max = spread("shard_runq_wait_pct")
    psi = col("host_cpu_pressure_pct")
    pio = col("host_io_pressure_pct")
    pc = "{:.0f}%"
    out(f"  host contention: shard thread waiting for a CPU median {fmt(rq_med, pc)} of the time, "
        f"max {fmt(rq_max, pc)}; host pressure (PSI some avg10) CPU median "
        f"{fmt(statistics.median(psi) if psi else None, pc)}, max {fmt(max(psi) if psi else None, pc)}, "
        f"I/O median {fmt(statistics.median(pio) if pio else None, pc)}, max {fmt(max(pio) if pio else None, pc)}")
    if ops:
        out(f"  ops/s: mean {statistics.mean(ops):.0f} (min {min(ops):.0f}, max {max(ops):.0f}); "
            f"fires/s mean {fmt(statistics.mean(fired) if fired else None, '{:.0f}')}; "
            f"server CPU mean {fmt(statistics.mean(cpu) if cpu else None, '{:.0f}')}% of one core, "
            f"generator {fmt(statistics.mean(col('gen_cpu_pct')) if col('gen_cpu_pct') else None, '{:.0f}')}%")
    out(f"  requests answered {s.get('requests_answered')}; answers: {s.get('answers')}")
    out(f"  errors: {s.get('errors_total')} {s.get('errors_by_kind') or ''}; expected 404 on cancel: {s.get('cancel_404')}")
    last = rows[-1]
    ok_fires = None
    if s.get("drained") is not None and s.get("expected_fires") is not None:
        # Requests answered 5xx or lost may or may not have taken effect: each unacknowledged
        # PUT may add one fire, each unacknowledged DELETE may remove one.
        exp, fired_n = s["expected_fires"], s.get("fired_total")
        lo, hi = exp - s.get("unacked_cancels", 0), exp + s.get("unacked_puts", 0)
        ok_fires = bool(s.get("drained")) and fired_n is not None and lo <= fired_n <= hi
        rng = f"{exp}" if lo == hi else f"{lo}..{hi} (the {hi - lo} unacknowledged requests may or may not have taken effect)"
        out(f"  after the load: pending {last.get('pending')} after {len(drain)} drain samples; fired "
            f"{fired_n}, expected {rng}; 201s {s.get('created_201')} - 204s {s.get('cancelled_204')}"
            f"{'' if ok_fires else '  MISMATCH'}")
    fl_med, fl_max = spread("flush_p99_ms")
    if fl_med is not None:
        out(f"  store flush (journal group commit / Redis pipeline) p99 per window: median {fl_med:.2f} ms, "
            f"max {fl_max:.2f} ms; highest bucket reached {max(col('flush_max_le_ms')):g} ms")
    for k in ("store_errors_total", "store_ack_timeouts_total", "store_refused_total",
              "ring_rejected_total", "watchdog_wakes_total", "executor_stalls_total",
              "executor_runnable_sleeps_total", "journal_snapshots_total", "journal_compaction_holds_total"):
        v = fnum(last, k)
        if v or k in ("watchdog_wakes_total", "executor_stalls_total",
                      "executor_runnable_sleeps_total"):
            out(f"  {k}: {int(v or 0)}")
    log_bad = []
    if args.server_log and os.path.exists(args.server_log):
        with open(args.server_log, errors="replace") as f:
            for line in f:
                if re.search(r"\b(ERROR|panicked|WARN)\b", line):
                    log_bad.append(line.rstrip())
        out(f"  server log: {len(log_bad)} WARN/ERROR/panic lines" +
            ("" if not log_bad else "; first: " + log_bad[0][:160]))
    died = s.get("server_died") or (args.server_exit not in (None, 0))
    if s.get("server_died"):
        out(f"  SERVER DIED at t={s.get('died_at_s')} s")
    if args.server_exit is not None:
        out(f"  server exit status after SIGTERM: {args.server_exit}")
    errors = s.get("errors_total")
    if died:
        verdict, code = "FAIL (server died or exited badly)", 2
    elif errors or errors is None:
        verdict, code = "FAIL (request errors)", 1
    elif ok_fires is False:
        verdict, code = "FAIL (fired count does not add up, or timers still pending after 60 s)", 1
    else:
        verdict, code = "PASS (no errors, server alive; judge the slopes above)", 0
    out(f"VERDICT: {verdict}")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "verdict.txt"), "w") as f:
        f.write(text + "\n")
    return code


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="drive and sample a running server")
    r.add_argument("--url", required=True)
    r.add_argument("--pid", type=int, required=True, help="the server's pid (for /proc)")
    r.add_argument("--aux-pid", type=int, help="another process whose RSS to record (redis-server)")
    r.add_argument("--duration", required=True, help="90s, 30m, 1h ...")
    r.add_argument("--out", required=True)
    r.add_argument("--rate", type=float, default=2000, help="operations per second, all connections")
    r.add_argument("--conns", type=int, default=64)
    r.add_argument("--batch", type=int, default=20, help="timers per batch POST")
    r.add_argument("--mix", default="50,25,20,5", help="weights: new,resched,cancel,batch")
    r.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--store", default="?", help="for the record only")
    r.add_argument("--shards", default="?", help="for the record only")
    r.add_argument("-v", "--verbose", action="store_true", help="print each sample to stderr")
    v = sub.add_parser("verdict", help="print the verdict of a finished run")
    v.add_argument("--out", required=True)
    v.add_argument("--server-exit", type=int)
    v.add_argument("--server-log")
    args = ap.parse_args()
    sys.exit(cmd_run(args) if args.cmd == "run" else cmd_verdict(args))


if __name__ == "__main__":
    main()
