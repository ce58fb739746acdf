"""The soak's open-loop load: keep-alive connections on one selector, sending new timers,
reschedules, cancels and batches at a fixed rate, and counting every answer."""

import collections
import json
import os
import random
import selectors
import socket
import threading
import time
import urllib.parse

REQUEST_TIMEOUT_S = 10.0
TENANTS = ["soak-a", "soak-b", "soak-c", "soak-d"]


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
