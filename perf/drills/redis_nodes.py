"""Redis for the drills: a small RESP2 client over a socket, and redis-server (or sentinel)
processes that can be killed and started again as they were. Python standard library only."""

import os
import socket
import subprocess
import time

from common import now

REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")


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

