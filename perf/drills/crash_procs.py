"""What the crash drill runs beside its load: the webhook receiver, a redis-server of its own
(for --store redis), and the server under test, killed and started again."""

import hashlib
import hmac
import json
import os
import signal
import subprocess
import threading
import time

from common import free_port, now_us, serve_webhooks
from crash_model import Client, Uncertain
from redis_nodes import Resp, RespError

SHARDS = 2
SECRET = "crash-drill-secret-0123456789abcdef0123456789"   # 45 bytes
CHILDREN = []                # processes this drill started: killed when it exits


def decoded(reply):
    """A RESP reply with its bulk strings as str."""
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, list):
        return [decoded(r) for r in reply]
    return reply



# ---------------------------------------------------------------------------------------------
# The webhook receiver
# ---------------------------------------------------------------------------------------------

class Receiver:
    def __init__(self):
        self.lock = threading.Lock()
        self.attempts = []           # dicts: tenant key version attempt fire_at fired_at recv status
        self.bad = []
        self.server = serve_webhooks(self.on_post)
        self.port = self.server.server_address[1]

    def on_post(self, path, headers, body, received_ns):
        try:
            j = json.loads(body)
        except ValueError:
            j = None
        kind = path.strip("/").split("/")[0]
        status = 200
        if kind == "flaky":
            h = hashlib.sha256(f"{headers.get('Idempotency-Key')}/{headers.get('Punctual-Attempt')}".encode()).digest()
            status = 503 if h[0] & 1 else 200
        elif kind == "reject":
            status = 400
        self.record(kind, j, headers, body, received_ns // 1000, status)
        return status

    def record(self, kind, j, headers, body, recv, status):
        with self.lock:
            if not isinstance(j, dict):
                self.bad.append(f"{kind}: body is not a JSON object: {body[:100]!r}")
                return
            idem = headers.get("Idempotency-Key", "")
            want = f"{j.get('tenant')}/{j.get('key')}/{j.get('version')}"
            if idem != want:
                self.bad.append(f"Idempotency-Key {idem!r} but the body names {want}")
            if kind == "ok":
                sig = headers.get("Punctual-Signature", "")
                parts = dict(p.split("=", 1) for p in sig.split(",") if "=" in p)
                mac = hmac.new(SECRET.encode(), f"{parts.get('t', '')}.".encode() + body, hashlib.sha256).hexdigest()
                if not hmac.compare_digest(mac, parts.get("v1", "")):
                    self.bad.append(f"shop/{j.get('key')}: signature {sig!r} does not verify")
            self.attempts.append({
                "tenant": j.get("tenant"), "key": j.get("key"), "version": j.get("version"),
                "attempt": j.get("attempt"), "fire_at": j.get("fire_at_us"),
                "fired_at": j.get("fired_at_us"), "recv": recv, "status": status,
                "payload": j.get("payload"),
            })


# ---------------------------------------------------------------------------------------------
# Redis (for --store redis): a server of our own, read with redis_nodes.py's RESP client
# ---------------------------------------------------------------------------------------------

class Redis:
    def __init__(self, workdir):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", workdir],
            stdout=open(os.path.join(workdir, "redis.log"), "w"), stderr=subprocess.STDOUT)
        CHILDREN.append(self.proc)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            try:
                if self.cmd("PING") == "PONG":
                    return
            except (OSError, RespError):
                time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING within 20 s")

    def cmd(self, *args):
        c = Resp(self.port, timeout=10)
        try:
            return decoded(c.cmd(*args))
        finally:
            c.close()

    def stream(self, tenant):
        """Every entry of punctual:fired:{tenant} as dicts."""
        out, start = [], "-"
        while True:
            page = self.cmd("XRANGE", f"punctual:fired:{{{tenant}}}", start, "+", "COUNT", "10000") or []
            for eid, fields in page:
                out.append(dict(zip(fields[0::2], fields[1::2])))
            if len(page) < 10000:
                return out
            last = page[-1][0]
            ms, seq = last.split("-")
            start = f"{ms}-{int(seq) + 1}"


# ---------------------------------------------------------------------------------------------
# The server, killed and restarted
# ---------------------------------------------------------------------------------------------

class Server:
    def __init__(self, binary, workdir, port, config, store_args):
        self.binary, self.workdir, self.port = binary, workdir, port
        self.cmd = [binary, "serve", "--config", config, "--listen", f"127.0.0.1:{port}",
                    "--shards", str(SHARDS), "--pinning", "none", "--spin-us", "0"] + store_args
        self.proc, self.starts = None, 0
        self.outages = []            # (killed_us, healthy_us)
        self.start_s = []

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.workdir, f"server-{self.starts}.log"), "w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info")))
        CHILDREN.append(self.proc)
        while time.monotonic() - t0 < 120:
            if self.proc.poll() is not None:
                raise RuntimeError(f"punctual exited with {self.proc.returncode} at start #{self.starts}; see {log.name}")
            try:
                st, _ = Client(self.port).call("GET", "/healthz")
                if st == 200:
                    self.start_s.append(time.monotonic() - t0)
                    return
            except Uncertain:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"punctual not healthy 120 s after start #{self.starts}; see {log.name}")

    def kill_and_restart(self):
        killed = now_us()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.start()
        self.outages.append((killed, now_us()))


# ---------------------------------------------------------------------------------------------
# The load
