"""Redis Sentinel for the failover drill: the nodes' configuration files, what the sentinels
say, their events as received, and a watch on the master-to-be."""

import os
import socket
import threading

from common import now
from redis_nodes import Resp, RespError, text, try_cmd

MASTER_NAME = "punctual-drill"
PUNCTUAL_WRITES = {"hset", "hdel", "xadd", "multi", "exec", "wait"}


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
