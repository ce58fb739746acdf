#!/usr/bin/env python3
"""Failover drill: the Redis master dies under load and Redis Sentinel promotes its replica.
Python standard library only; Redis is spoken to with a small RESP client over a socket.

Usage:  perf/drills/failover.py --bin target/release/punctual [--runs N] [--wait 0,1] [--out DIR]
        (perf/drills/failover.sh builds the binary and calls this; read that first.)

One run, for one setting of --redis-wait-replicas (0 or 1):

 1. In a fresh directory, on loopback and free ports: a Redis master, one replica, and three
    sentinels monitoring the master (quorum 2, down-after-milliseconds 1000, failover-timeout
    5000, resolve-hostnames no, announce-ip 127.0.0.1). Redis keeps no RDB and no AOF here:
    in this drill a write survives the master only through the replica (that is what
    --redis-wait-replicas is for). repl-diskless-sync-delay is 0 so that a returning node
    resynchronises at once (Redis's default waits 5 s more before a full sync).
 2. `punctual serve --shards 2 --redis redis+sentinel://127.0.0.1:S1,…/<master>
    [--redis-wait-replicas 1]` on a free port (no pinning, spinning off: a shared host).
 3. Load from LOAD_PROCS processes × LOAD_CONNS keep-alive connections, paced at RATE timers
    per second in all (half the connections PUT one timer per request, half POST batches of
    BATCH), every key new, deadlines 1-15 s ahead so that timers fire throughout the drill.
    Every acknowledged (2xx) timer is recorded with its version. 503s are counted apart (with
    and without Retry-After; batch items refused with 503 too): a 503 is not an
    acknowledgement, whatever happens to the write later. Nobody retries: each key is sent once.
 4. After WARMUP_S (5 s) of load: SIGKILL of the master. Every sentinel's events are
    subscribed to (PSUBSCRIBE *) and timestamped on receipt; +switch-master marks the
    quorum's promotion.
 5. Time to writes on the new master: from just before the kill, CLIENT LIST is polled on the
    replica every 10 ms; the first connection that is not a sentinel's (their names start
    with "sentinel-"), not a replication link (flags M/S) and whose last command is a write of
    punctual's (hset, hdel, xadd, multi, exec, wait) marks punctual's first write there. Its
    time minus the +switch-master receipt is the figure (negative when punctual got there
    first: a sentinel names the promoted replica as soon as the failover has chosen it).
    Resolution about 10 ms plus one poll round trip.
 6. With --redis-wait-replicas 1 the new master has no replica, so acknowledgements stall.
    RESTART_AFTER_S (3 s) after +switch-master the drill restarts the old master on its old
    port as a replica of the new master (`--replicaof`), as an operator's supervisor should
    restart a node that keeps nothing on disk (never as a master: an empty master that
    Sentinel took for the master again would wipe the replicas); it resynchronises, and WAIT
    is satisfied again.
 7. Acks resume: the first 2xx received after punctual's first write on the new master, from
    the kill, from +switch-master and (wait 1) from the restart. Also the longest gap between
    two consecutive 2xx around the kill.
 8. Load goes on AFTER_S (10 s) after acks resume, then stops. The drill waits until every
    deadline sent has passed plus a margin, then reads, from the master Sentinel names now,
    every tenant's stream `punctual:fired:{<tenant>}` (XRANGE) and every pending record
    (HSCAN of punctual:{p<N>}:timers, N in 0..1023).
 9. Per run: acknowledged timers; acknowledged timers lost (the acknowledged version is
    neither in the key's stream nor pending); acknowledged timers still pending past their
    deadline + margin; duplicates (the same key and version delivered more than once; the
    extra copies are counted); early fires; 503s; time to writes on the new master; time
    until acks resume.

Checks (exit 1 if one fails): with wait 1, no acknowledged timer lost; in every mode,
punctual writes to the new master no later than SWITCH_LIMIT_S (5 s) after +switch-master,
acks resume within RESUME_LIMIT_S (60 s) of the kill, no acknowledged timer is still pending
at the end, nothing fires early, every 503 carries Retry-After, no request times out, and
punctual stops cleanly on SIGTERM. Without WAIT (wait 0) a lost acknowledged timer is possible
(a write the master acknowledged and had not yet replicated when it died) and is only
reported; so is the rare duplicate (a pipeline applied but not answered before the kill is
written again to the new master: same key and version, which consumers de-duplicate on).
Exit 2: the drill could not run (no binary, no redis-server, or every failing run failed
before the kill: Redis, the sentinels or punctual did not come up). A failover that never
happens after the kill is a failed check (exit 1).

Outputs go to --out (default: a new directory under /tmp), one directory per run with the
Redis, Sentinel and punctual logs, the sentinels' event timeline, /metrics before stopping,
the lost keys if any, and result.json; summary.txt holds the table printed at the end.

Environment (defaults in brackets): RATE [1000 timers/s], LOAD_PROCS [2], LOAD_CONNS [4 per
process], BATCH [20], WARMUP_S [5], AFTER_S [10], RESTART_AFTER_S [3], DELAY_MIN_MS [1000],
DELAY_MAX_MS [15000], SWITCH_LIMIT_S [5], RESUME_LIMIT_S [60], REDIS_SERVER [redis-server].
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_float(name, default):
    return float(os.environ.get(name, default))


RATE = env_float("RATE", 1000)
LOAD_PROCS = env_int("LOAD_PROCS", 2)
LOAD_CONNS = env_int("LOAD_CONNS", 4)
BATCH = env_int("BATCH", 20)
WARMUP_S = env_float("WARMUP_S", 5)
AFTER_S = env_float("AFTER_S", 10)
RESTART_AFTER_S = env_float("RESTART_AFTER_S", 3)
DELAY_MIN_MS = env_int("DELAY_MIN_MS", 1000)
DELAY_MAX_MS = env_int("DELAY_MAX_MS", 15000)
SWITCH_LIMIT_S = env_float("SWITCH_LIMIT_S", 5)
RESUME_LIMIT_S = env_float("RESUME_LIMIT_S", 60)
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
MASTER_NAME = "punctual-drill"
TENANTS = ["drill-a", "drill-b", "drill-c", "drill-d"]
PARTITIONS = 1024
CLIENT_TIMEOUT_S = 15        # a request with no answer this long counts as a hang
FIRE_MARGIN_S = 5            # after the last deadline, before the streams are read
SETTLE_S = 30                # then at most this long for stragglers to appear
PUNCTUAL_WRITES = {"hset", "hdel", "xadd", "multi", "exec", "wait"}


def now():
    return time.monotonic()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# RESP
# ---------------------------------------------------------------------------------------------

class RespError(Exception):
    pass


class Resp:
    """One connection to a Redis server or sentinel, RESP2, one command at a time."""

    def __init__(self, port, timeout=2.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb")

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))

    def read(self):
        line = self.f.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed")
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ConnectionError(f"unexpected RESP line {line[:40]!r}")

    def cmd(self, *args):
        self.send(*args)
        r = self.read()
        if isinstance(r, RespError):
            raise r
        return r

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def try_cmd(port, *args, timeout=1.0):
    """The reply, or None when the server is unreachable or answers an error."""
    try:
        c = Resp(port, timeout)
        try:
            return c.cmd(*args)
        finally:
            c.close()
    except (OSError, ConnectionError, RespError):
        return None


def info(port, section):
    r = try_cmd(port, "INFO", section)
    if r is None:
        return {}
    out = {}
    for line in text(r).splitlines():
        if ":" in line:
            k, _, v = line.partition(":")
            out[k] = v
    return out


def wait_for(what, cond, timeout):
    give_up = now() + timeout
    while now() < give_up:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


# ---------------------------------------------------------------------------------------------
# Redis, Sentinel, punctual
# ---------------------------------------------------------------------------------------------

class Node:
    """A redis-server (or sentinel) process with its config file; restartable as it was."""

    def __init__(self, name, port, conf_path, sentinel=False):
        self.name, self.port, self.conf, self.sentinel = name, port, conf_path, sentinel
        self.proc = None
        self.starts = 0

    def start(self, replica_of=None):
        self.starts += 1
        cmd = [REDIS_SERVER, self.conf] + (["--sentinel"] if self.sentinel else [])
        if replica_of is not None:
            cmd += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        wait_for(f"{self.name} on port {self.port} to answer PING",
                 lambda: try_cmd(self.port, "PING") == "PONG", 20)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def redis_conf(d, name, port, replica_of=None):
    path = os.path.join(d, f"{name}.conf")
    lines = [
        f"port {port}", "bind 127.0.0.1", "protected-mode no", f"dir {d}",
        f"logfile {os.path.join(d, name + '.log')}", f"pidfile {os.path.join(d, name + '.pid')}",
        'save ""', "appendonly no", f"dbfilename {name}.rdb",
        "repl-diskless-sync yes", "repl-diskless-sync-delay 0",
        "replica-announce-ip 127.0.0.1",
    ]
    if replica_of:
        lines.append(f"replicaof 127.0.0.1 {replica_of}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def sentinel_conf(d, name, port, master_port):
    path = os.path.join(d, f"{name}.conf")
    lines = [
        f"port {port}", "bind 127.0.0.1", "protected-mode no", f"dir {d}",
        f"logfile {os.path.join(d, name + '.log')}", f"pidfile {os.path.join(d, name + '.pid')}",
        "sentinel resolve-hostnames no", "sentinel announce-ip 127.0.0.1",
        f"sentinel announce-port {port}",
        f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2",
        f"sentinel down-after-milliseconds {MASTER_NAME} 1000",
        f"sentinel failover-timeout {MASTER_NAME} 5000",
        f"sentinel parallel-syncs {MASTER_NAME} 1",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def sentinel_master(port):
    r = try_cmd(port, "SENTINEL", "MASTER", MASTER_NAME)
    if not isinstance(r, list):
        return {}
    return {text(r[i]): text(r[i + 1]) for i in range(0, len(r) - 1, 2)}


def master_addr(port):
    r = try_cmd(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
    if isinstance(r, list) and len(r) == 2:
        return int(r[1])
    return None


class Events(threading.Thread):
    """PSUBSCRIBE * on one sentinel: (monotonic time, channel, message), as received."""

    def __init__(self, port, sink, lock):
        super().__init__(daemon=True)
        self.port, self.sink, self.lock = port, sink, lock
        self.conn = Resp(port, timeout=None)
        self.conn.send("PSUBSCRIBE", "*")
        self.conn.read()

    def run(self):
        while True:
            try:
                m = self.conn.read()
            except (OSError, ConnectionError, ValueError):
                return
            t = now()
            if isinstance(m, list) and len(m) == 4 and text(m[0]) == "pmessage":
                with self.lock:
                    self.sink.append((t, self.port, text(m[2]), text(m[3])))

    def stop(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


class Watch(threading.Thread):
    """Polls the replica (the master-to-be) every 10 ms: when it turns master (ROLE), when a
    client of punctual's first writes there (CLIENT LIST), and when a replica of its own is
    online again (INFO replication). Reconnects when Sentinel's promotion kills its link."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.master_at = None
        self.first_write_at = None
        self.first_write_client = None
        self.replica_online_at = None
        self.halt = threading.Event()

    def run(self):
        conn = None
        while not self.halt.is_set():
            try:
                if conn is None:
                    conn = Resp(self.port, timeout=1.0)
                t = now()
                if self.master_at is None:
                    role = conn.cmd("ROLE")
                    if text(role[0]) == "master":
                        self.master_at = t
                if self.first_write_at is None:
                    for line in text(conn.cmd("CLIENT", "LIST")).splitlines():
                        f = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
                        if (f.get("cmd") in PUNCTUAL_WRITES and "M" not in f.get("flags", "")
                                and "S" not in f.get("flags", "")
                                and not f.get("name", "").startswith("sentinel-")):
                            self.first_write_at = t
                            self.first_write_client = line
                            break
                if self.master_at is not None and self.replica_online_at is None:
                    rep = text(conn.cmd("INFO", "replication"))
                    if "state=online" in rep:
                        self.replica_online_at = t
            except (OSError, ConnectionError, RespError, IndexError, TypeError):
                if conn is not None:
                    conn.close()
                conn = None
            if self.first_write_at is not None and self.replica_online_at is not None:
                return
            self.halt.wait(0.01)


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


def http_get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# Load (worker processes: `failover.py --worker ...`)
# ---------------------------------------------------------------------------------------------

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
# ---------------------------------------------------------------------------------------------

def one_run(binary, wait, d, run_id):
    os.makedirs(d, exist_ok=True)
    res = {"wait_replicas": wait, "dir": d, "failures": []}
    fail = res["failures"]
    nodes = []
    events, ev_lock = [], threading.Lock()
    subs = []
    server = None
    workers = []
    stop_file = os.path.join(d, "stop-load")
    try:
        pm, pr = free_port(), free_port()
        master = Node("master", pm, redis_conf(d, "master", pm))
        replica = Node("replica", pr, redis_conf(d, "replica", pr, replica_of=pm))
        nodes += [master, replica]
        master.start()
        replica.start()
        wait_for("the replica's link to the master",
                 lambda: info(pr, "replication").get("master_link_status") == "up", 30)
        sports = [free_port() for _ in range(3)]
        for i, sp in enumerate(sports):
            s = Node(f"sentinel{i + 1}", sp, sentinel_conf(d, f"sentinel{i + 1}", sp, pm), sentinel=True)
            nodes.append(s)
            s.start()
        # Every sentinel must know the replica and the two other sentinels before the kill,
        # or the quorum cannot form and the failover cannot pick the replica.
        wait_for("the sentinels to discover the replica and each other", lambda: all(
            sentinel_master(sp).get("num-slaves") == "1"
            and sentinel_master(sp).get("num-other-sentinels") == "2" for sp in sports), 60)
        for sp in sports:
            e = Events(sp, events, ev_lock)
            e.start()
            subs.append(e)

        hp = free_port()
        server = Punctual(binary, d, hp, sports, wait)
        log(f"  master :{pm}, replica :{pr}, sentinels :{sports[0]},:{sports[1]},:{sports[2]}, punctual :{hp}")

        # Load.
        start_at = now() + 0.3
        for w in range(LOAD_PROCS):
            out = os.path.join(d, f"load-{w}.json")
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                  "--port", str(hp), "--rate", str(RATE / LOAD_PROCS),
                                  "--conns", str(LOAD_CONNS), "--prefix", f"r{run_id}w{w}c",
                                  "--stop-file", stop_file, "--start-at", str(start_at),
                                  "--out", out])
            workers.append((p, out))
        time.sleep(max(0.0, start_at + WARMUP_S - now()))

        watch = Watch(pr)
        watch.start()
        t_kill = now()
        master.kill()
        log(f"  master SIGKILLed after {WARMUP_S:.0f} s of load")
        res["t_kill"] = t_kill

        def switch_time():
            with ev_lock:
                ts = [t for t, _, ch, _ in events if ch == "+switch-master"]
            return min(ts) if ts else None

        try:
            t_switch = wait_for("+switch-master from a sentinel", switch_time, 60)
        except RuntimeError as e:
            fail.append(str(e))
            raise
        new_port = master_addr(sports[0])
        if new_port != pr:
            fail.append(f"sentinels name :{new_port} as master, not the replica :{pr}")
        log(f"  +switch-master {t_switch - t_kill:.2f} s after the kill")
        try:
            wait_for("punctual's first write on the new master",
                     lambda: watch.first_write_at, SWITCH_LIMIT_S + 25)
        except RuntimeError as e:
            fail.append(str(e))
        t_first_write = watch.first_write_at

        t_restart = None
        if wait > 0:
            time.sleep(max(0.0, t_switch + RESTART_AFTER_S - now()))
            # As the new master's replica: a node that keeps nothing on disk must never come
            # back as a master (if the failover had not settled, Sentinel could take the
            # empty node for the master and the replicas would resync from it, wiping them).
            master.start(replica_of=new_port)
            t_restart = now()
            log(f"  old master restarted on :{pm} {t_restart - t_switch:.2f} s after +switch-master")

        # Acks resume: watched live from the load's files would need IPC; the probe below
        # is one more acknowledged write per 100 ms from this process, recorded like the rest.
        probe_acked = []
        resumed_at = None
        give_up = t_kill + RESUME_LIMIT_S
        seq = 0
        while now() < give_up:
            k = f"probe-{run_id}-{seq}"
            seq += 1
            t0 = now()
            try:
                c = http.client.HTTPConnection("127.0.0.1", hp, timeout=CLIENT_TIMEOUT_S)
                c.request("PUT", f"/v1/timers/{TENANTS[0]}/{k}",
                          body=json.dumps({"delay_ms": DELAY_MIN_MS}))
                r = c.getresponse()
                data = r.read()
                c.close()
            except (OSError, http.client.HTTPException):
                time.sleep(0.1)
                continue
            if 200 <= r.status < 300:
                j = json.loads(data)
                probe_acked.append([now(), TENANTS[0], k, j["version"], j["fire_at_us"], t0])
                if t_first_write is not None and t0 > t_first_write and (t_restart is None or t0 > t_restart):
                    resumed_at = now()
                    break
            if t_first_write is None:
                t_first_write = watch.first_write_at
            time.sleep(max(0.0, 0.1 - (now() - t0)))
        if resumed_at is None:
            fail.append(f"no acknowledgement within {RESUME_LIMIT_S:.0f} s of the kill")
        else:
            time.sleep(AFTER_S)
        with open(stop_file, "w"):
            pass
        for p, _ in workers:
            p.wait()
        t_load_end = now()
        watch.halt.set()

        acked, refused, statuses, last_deadline = list(probe_acked), [], Counter(), 0.0
        for p, out in workers:
            with open(out) as f:
                j = json.load(f)
            acked += j["acked"]
            refused += j["refused"]
            statuses.update(j["statuses"])
            last_deadline = max(last_deadline, j["last_deadline"])
        statuses["probe PUT 2xx"] = len(probe_acked)

        # Timing.
        ack_times = sorted(a[0] for a in acked)
        res["switch_after_kill_s"] = t_switch - t_kill
        res["first_write_after_switch_s"] = (t_first_write - t_switch) if t_first_write else None
        res["promoted_after_kill_s"] = (watch.master_at - t_kill) if watch.master_at else None
        res["replica_online_after_kill_s"] = (watch.replica_online_at - t_kill) if watch.replica_online_at else None
        res["first_write_client"] = watch.first_write_client
        first_after = next((t for t in ack_times if t_first_write and t >= t_first_write), None)
        res["acks_resume_after_kill_s"] = (first_after - t_kill) if first_after else None
        res["acks_resume_after_switch_s"] = (first_after - t_switch) if first_after else None
        res["acks_resume_after_restart_s"] = (first_after - t_restart) if (first_after and t_restart) else None
        res["restart_after_kill_s"] = (t_restart - t_kill) if t_restart else None
        before = [t for t in ack_times if t <= t_kill]
        after = [t for t in ack_times if t > t_kill]
        res["last_ack_before_kill_s"] = (before[-1] - t_kill) if before else None
        # 2xx answers that left after the kill but before punctual reached the new master:
        # writes the old master (and with WAIT, its replica) confirmed just before it died.
        early_acks = [t for t in after if t_first_write is None or t < t_first_write]
        res["acks_between_kill_and_new_master"] = len(early_acks)
        res["last_of_those_after_kill_s"] = (early_acks[-1] - t_kill) if early_acks else None
        gap, prev = 0.0, (before[-1] if before else t_kill)
        for t in after:
            gap = max(gap, t - prev)
            prev = t
        res["longest_ack_gap_s"] = gap
        with ev_lock:
            timeline = sorted(events)
        res["sentinel_events"] = [[round(t - t_kill, 3), p, ch, m] for t, p, ch, m in timeline]
        conv = [t for t, _, ch, _ in timeline if ch == "+convert-to-slave"]
        res["convert_to_slave_after_restart_s"] = (min(conv) - t_restart) if (conv and t_restart) else None

        # /metrics while the load is over but the timers have not all fired.
        try:
            with open(os.path.join(d, "metrics.txt"), "wb") as f:
                f.write(http_get(hp, "/metrics")[1])
        except (OSError, http.client.HTTPException):
            pass

        # Wait for every deadline sent, then for stragglers.
        wait_s = last_deadline + FIRE_MARGIN_S - time.time()
        log(f"  load stopped ({t_load_end - t_kill:.1f} s after the kill); waiting {max(0, wait_s):.0f} s for the deadlines")
        time.sleep(max(0.0, wait_s))
        final_port = master_addr(sports[0])
        want = {(a[1], a[2]): a[3] for a in acked}
        settle_until = now() + SETTLE_S
        while True:
            streams = read_streams(final_port)
            missing = [tk for tk, v in want.items() if v not in [e[0] for e in streams[tk[0]].get(tk[1], [])]]
            if not missing or now() > settle_until:
                break
            time.sleep(1)
        pending = read_pending(final_port)

        lost, stuck = [], []
        for (tenant, key), v in want.items():
            if any(e[0] == v for e in streams[tenant].get(key, [])):
                continue
            if pending.get((tenant, key)) == v:
                stuck.append([tenant, key, v])
            else:
                lost.append([tenant, key, v])
        dups = early = entries = 0
        for tenant, keys in streams.items():
            for key, es in keys.items():
                entries += len(es)
                c = Counter(e[0] for e in es)
                dups += sum(n - 1 for n in c.values() if n > 1)
                early += sum(1 for e in es if e[2] < e[1])
        refused_keys = {(r[1], r[2]) for r in refused}
        res.update({
            "acknowledged": len(acked),
            "lost": len(lost),
            "stuck_pending": len(stuck),
            "duplicates": dups,
            "early": early,
            "stream_entries": entries,
            "pending_left": len(pending),
            "refused_timers": len(refused_keys),
            "refused_applied_later": sum(1 for tk in refused_keys if tk[1] in streams[tk[0]] or tk in pending),
            "statuses": dict(sorted(statuses.items())),
            "http_503_with_retry_after": sum(n for s, n in statuses.items() if " 503 " in s and s.endswith("with Retry-After")),
            "http_503_without_retry_after": sum(n for s, n in statuses.items() if "WITHOUT Retry-After" in s),
            "batch_items_503": sum(n for s, n in statuses.items() if s.startswith("item 503")),
            "transport_errors": sum(n for s, n in statuses.items() if " error " in s),
        })
        if lost:
            with open(os.path.join(d, "lost.json"), "w") as f:
                json.dump(lost, f)
        if stuck:
            with open(os.path.join(d, "stuck.json"), "w") as f:
                json.dump(stuck, f)

        # Checks.
        if wait > 0 and lost:
            fail.append(f"{len(lost)} acknowledged timers lost with --redis-wait-replicas {wait}")
        fw = res["first_write_after_switch_s"]
        if fw is None or fw > SWITCH_LIMIT_S:
            fail.append(f"first write on the new master {fw} s after +switch-master (limit {SWITCH_LIMIT_S} s)")
        if stuck:
            fail.append(f"{len(stuck)} acknowledged timers still pending past their deadline")
        if early:
            fail.append(f"{early} fires before their deadline")
        if res["http_503_without_retry_after"]:
            fail.append(f"{res['http_503_without_retry_after']} 503 answers without Retry-After")
        if res["transport_errors"]:
            fail.append(f"{res['transport_errors']} requests failed at the transport (time-out or reset)")
        rc = server.stop()
        res["punctual_exit"] = rc
        if rc != 0:
            fail.append(f"punctual did not stop cleanly on SIGTERM (exit {rc})")
        server = None
    except RuntimeError as e:
        if str(e) not in fail:
            fail.append(str(e))
        if "t_kill" not in res:
            res["setup_error"] = str(e)
    finally:
        if not os.path.exists(stop_file):
            with open(stop_file, "w"):
                pass
        for p, _ in workers:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        if server is not None:
            res["punctual_exit"] = server.stop()
        for s in subs:
            s.stop()
        for n in nodes:
            n.kill()
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(d, "sentinel-events.txt"), "w") as f:
        for ev in res.get("sentinel_events", []):
            f.write(f"{ev[0]:+8.3f} s  :{ev[1]}  {ev[2]}  {ev[3]}\n")
    return res


def fmt(v, unit="s"):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f} {unit}".strip()
    return str(v)


def report(res):
    lines = [
        f"    acknowledged           {fmt(res.get('acknowledged'))}",
        f"    lost (acked)           {fmt(res.get('lost'))}",
        f"    still pending (acked)  {fmt(res.get('stuck_pending'))}",
        f"    duplicates delivered   {fmt(res.get('duplicates'))}",
        f"    early fires            {fmt(res.get('early'))}",
        f"    503 with Retry-After   {fmt(res.get('http_503_with_retry_after'))} requests, "
        f"{fmt(res.get('batch_items_503'))} batch items; refused timers applied later anyway: "
        f"{fmt(res.get('refused_applied_later'))} of {fmt(res.get('refused_timers'))}",
        f"    +switch-master         {fmt(res.get('switch_after_kill_s'))} after the kill",
        f"    first write, new master {fmt(res.get('first_write_after_switch_s'))} after +switch-master",
        f"    acks resume            {fmt(res.get('acks_resume_after_switch_s'))} after +switch-master"
        + (f", {fmt(res.get('acks_resume_after_restart_s'))} after the restart"
           if res.get("restart_after_kill_s") is not None else ""),
        f"    longest gap in acks    {fmt(res.get('longest_ack_gap_s'))}",
    ]
    if res.get("convert_to_slave_after_restart_s") is not None:
        lines.append(f"    +convert-to-slave      {fmt(res['convert_to_slave_after_restart_s'])} after the restart")
    for f_ in res["failures"]:
        lines.append(f"    FAIL: {f_}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin")
    ap.add_argument("--runs", type=int, default=2, help="runs per mode [2]")
    ap.add_argument("--wait", default="0,1", help="modes: --redis-wait-replicas values, comma-separated [0,1]")
    ap.add_argument("--out", help="where the runs' directories go [a new directory under /tmp]")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--conns", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--prefix", help=argparse.SUPPRESS)
    ap.add_argument("--stop-file", help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker_main(a)
        return 0
    if not a.bin or not os.access(a.bin, os.X_OK):
        print(f"no executable punctual binary: {a.bin!r} (--bin)", file=sys.stderr)
        return 2
    try:
        subprocess.run([REDIS_SERVER, "--version"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        print(f"{REDIS_SERVER} is needed (Redis 6.2 or later, with Sentinel)", file=sys.stderr)
        return 2
    modes = [int(m) for m in a.wait.replace(" ", ",").split(",") if m.strip()]
    out = a.out or tempfile.mkdtemp(prefix="punctual-failover-")
    os.makedirs(out, exist_ok=True)
    log(f"failover drill: modes wait={modes}, {a.runs} run(s) each, {RATE:.0f} timers/s; outputs in {out}")
    results = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for run in range(a.runs):
        for wait in modes:
            run_id = f"{stamp}-w{wait}-{run + 1}"
            log(f"run {run_id}")
            res = one_run(a.bin, wait, os.path.join(out, run_id), run_id)
            results.append(res)
            log(report(res))
    lines = ["", f"{'run':<26} {'wait':>4} {'acked':>7} {'lost':>5} {'dups':>5} {'503':>6} "
             f"{'503item':>7} {'switch':>7} {'write':>7} {'resume':>7} {'gap':>6}  result"]
    for r in results:
        def s(k):
            v = r.get(k)
            return "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))
        lines.append(f"{os.path.basename(r['dir']):<26} {r['wait_replicas']:>4} {s('acknowledged'):>7} "
                     f"{s('lost'):>5} {s('duplicates'):>5} {s('http_503_with_retry_after'):>6} "
                     f"{s('batch_items_503'):>7} {s('switch_after_kill_s'):>7} "
                     f"{s('first_write_after_switch_s'):>7} {s('acks_resume_after_switch_s'):>7} "
                     f"{s('longest_ack_gap_s'):>6}  {'FAIL' if r['failures'] else 'ok'}")
    lines.append("switch: +switch-master after the kill; write: punctual's first write on the new "
                 "master after +switch-master; resume: first 2xx after +switch-master; gap: longest "
                 "time without a 2xx (seconds)")
    summary = "\n".join(lines)
    log(summary)
    with open(os.path.join(out, "summary.txt"), "a") as f:
        f.write(summary + "\n")
    failed = [r for r in results if r["failures"]]
    if failed and all(r.get("setup_error") for r in failed):
        log(f"COULD NOT RUN: {len(failed)} of {len(results)} runs failed before the kill (see above)")
        return 2
    if failed:
        log(f"FAILED: {len(failed)} of {len(results)} runs (see FAIL lines above)")
        return 1
    log("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
