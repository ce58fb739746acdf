"""The failover drill's punctual and its load: the server under test, the load's worker
processes (`failover.py --worker ...`), and reading back what Redis holds."""

import http.client
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict

from common import env_int, http_get, now
from failover_sentinel import MASTER_NAME
from redis_nodes import Resp, text

BATCH = env_int("BATCH", 20)
DELAY_MIN_MS = env_int("DELAY_MIN_MS", 1000)
DELAY_MAX_MS = env_int("DELAY_MAX_MS", 15000)
TENANTS = ["drill-a", "drill-b", "drill-c", "drill-d"]
PARTITIONS = 1024
CLIENT_TIMEOUT_S = 15        # a request with no answer this long counts as a hang


class Punctual:
    def __init__(self, binary, d, port, sentinels, wait):
        self.port = port
        self.log_path = os.path.join(d, "punctual.log")
        url = "redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in sentinels) + "/" + MASTER_NAME
        self.cmd = [binary, "serve", "--listen", f"127.0.0.1:{port}", "--shards", "2",
                    "--pinning", "none", "--spin-us", "0", "--redis", url,
                    "--redis-wait-replicas", str(wait)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCTUAL_")}
        env["RUST_LOG"] = os.environ.get("RUST_LOG", "info")
        self.logf = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        t0 = now()
        while now() - t0 < 60:
            if self.proc.poll() is not None:
                raise RuntimeError(f"punctual exited with {self.proc.returncode} at start; see {self.log_path}")
            try:
                if http_get(port, "/healthz")[0] == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"punctual not healthy after 60 s; see {self.log_path}")

    def stop(self):
        """SIGTERM; the exit status, or None if it had to be killed after 20 s."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def load_thread(idx, port, batch, rate, stop_file, start_at, out):
    """One keep-alive connection, paced at `rate` timers/s (requests of `batch` timers; a
    request that took long is not made up for by a burst). Appends to out["acked"]
    [t_ack, tenant, key, version, fire_at_us], counts statuses in out["statuses"]."""
    rnd = random.Random(f"{idx}-{os.getpid()}")
    period = batch / rate
    conn = None
    seq = 0
    nxt = start_at
    acked, statuses, refused = out["acked"], out["statuses"], out["refused"]
    while True:
        d = nxt - now()
        if d > 0:
            time.sleep(d)
        elif d < -period:
            nxt = now()
        nxt += period
        if os.path.exists(stop_file):
            break
        tenant = rnd.choice(TENANTS)
        keys = [f"{idx}-{seq + i}" for i in range(batch)]
        seq += batch
        delays = [rnd.randint(DELAY_MIN_MS, DELAY_MAX_MS) for _ in keys]
        if batch == 1:
            method, path = "PUT", f"/v1/timers/{tenant}/{keys[0]}"
            body = json.dumps({"delay_ms": delays[0], "payload": {"k": keys[0]}})
        else:
            method, path = "POST", f"/v1/timers/{tenant}"
            body = json.dumps({"timers": [{"key": k, "delay_ms": dl, "payload": {"k": k}}
                                          for k, dl in zip(keys, delays)]})
        t_sent = now()
        out["last_deadline"] = max(out["last_deadline"], time.time() + max(delays) / 1000)
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            if r.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as e:
            if conn is not None:
                conn.close()
            conn = None
            statuses[f"{method} error {type(e).__name__}"] += 1
            refused.extend([now(), tenant, k, "transport"] for k in keys)
            continue
        t = now()
        if r.status == 503:
            ra = r.getheader("Retry-After")
            ok = ra is not None and ra.strip().isdigit() and int(ra) >= 1
            code = "?"
            try:
                code = json.loads(data)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                pass
            statuses[f"{method} 503 {code} {'with' if ok else 'WITHOUT'} Retry-After"] += 1
            refused.extend([t, tenant, k, "503"] for k in keys)
            continue
        if not 200 <= r.status < 300:
            statuses[f"{method} {r.status}"] += 1
            refused.extend([t, tenant, k, str(r.status)] for k in keys)
            continue
        j = json.loads(data)
        if batch == 1:
            statuses[f"{method} {r.status}"] += 1
            acked.append([t, tenant, keys[0], j["version"], j["fire_at_us"], t_sent])
            continue
        statuses[f"{method} {r.status}"] += 1
        results = j.get("results", [])
        if [it.get("key") for it in results] != keys:
            statuses["POST results do not match the items"] += 1
        for k, it in zip(keys, results):
            if it.get("status") in (200, 201):
                acked.append([t, tenant, k, it["version"], it["fire_at_us"], t_sent])
                statuses[f"item {it['status']}"] += 1
            else:
                code = (it.get("error") or {}).get("code", "?")
                statuses[f"item {it.get('status')} {code}"] += 1
                refused.append([t, tenant, k, str(it.get("status"))])
    if conn is not None:
        conn.close()


def worker_main(a):
    outs = []
    threads = []
    per_conn = a.rate / a.conns
    for c in range(a.conns):
        batch = 1 if c % 2 == 0 else BATCH
        o = {"acked": [], "statuses": Counter(), "refused": [], "last_deadline": 0.0}
        outs.append(o)
        threads.append(threading.Thread(
            target=load_thread,
            args=(f"{a.prefix}{c}", a.port, batch, per_conn, a.stop_file, a.start_at, o)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = Counter()
    for o in outs:
        statuses.update(o["statuses"])
    with open(a.out, "w") as f:
        json.dump({"acked": [x for o in outs for x in o["acked"]],
                   "refused": [x for o in outs for x in o["refused"]],
                   "statuses": statuses,
                   "last_deadline": max(o["last_deadline"] for o in outs)}, f)


# ---------------------------------------------------------------------------------------------
# Reading what Redis holds
# ---------------------------------------------------------------------------------------------

def read_streams(port):
    """tenant -> key -> [(version, fire_at_us, fired_at_us)]"""
    c = Resp(port, timeout=10)
    out = {}
    try:
        for tenant in TENANTS:
            got = defaultdict(list)
            start = "-"
            while True:
                page = c.cmd("XRANGE", f"punctual:fired:{{{tenant}}}", start, "+", "COUNT", 10000)
                for eid, fields in page:
                    f = {text(fields[i]): text(fields[i + 1]) for i in range(0, len(fields) - 1, 2)}
                    got[f.get("key", "")].append(
                        (int(f.get("version", 0)), int(f.get("fire_at_us", 0)), int(f.get("fired_at_us", 0))))
                if len(page) < 10000:
                    break
                start = "(" + text(page[-1][0])
            out[tenant] = got
    finally:
        c.close()
    return out


def read_pending(port):
    """(tenant, key) -> version, for every pending record."""
    c = Resp(port, timeout=10)
    out = {}
    try:
        for n in range(PARTITIONS):
            cursor = "0"
            while True:
                cursor, flat = c.cmd("HSCAN", f"punctual:{{p{n}}}:timers", cursor, "COUNT", 1000)
                cursor = text(cursor)
                for i in range(0, len(flat) - 1, 2):
                    field = text(flat[i])
                    tenant, _, key = field.partition("/")
                    rec = flat[i + 1]
                    try:
                        out[(tenant, key)] = int(rec.split(b" ", 1)[0])
                    except ValueError:
                        out[(tenant, key)] = -1
                if cursor == "0":
                    break
    finally:
        c.close()
    return out


# ---------------------------------------------------------------------------------------------
# One run
