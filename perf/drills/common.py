"""What the drills share: knobs from the environment, clocks, free ports, percentiles, one
keep-alive HTTP connection, a webhook receiver and a log line. Python standard library only."""

import http.client
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_float(name, default):
    return float(os.environ.get(name, default))


def now():
    """Monotonic seconds: for intervals."""
    return time.monotonic()


def now_us():
    """Wall-clock microseconds: the clock of punctual's fire_at_us and fired_at_us."""
    return time.time_ns() // 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p, empty=float("nan")):
    """The p-th percentile (0-100) of xs, nearest rank; `empty` when there is none."""
    if not xs:
        return empty
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))]


def log(msg):
    print(msg, flush=True)


class Conn:
    """One keep-alive connection to 127.0.0.1:port. `exchange` answers (status, headers, body
    bytes), or raises OSError / http.client.HTTPException on a transport failure, after which
    the next call connects again."""

    def __init__(self, port, timeout):
        self.port, self.timeout = port, timeout
        self.conn = None

    def exchange(self, method, path, body=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            self.conn.request(method, path, body=body, headers=headers)
            r = self.conn.getresponse()
            data = r.read()
            if r.will_close:
                self.close()
            return r.status, r.headers, data
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def http_get(port, path):
    """(status, body bytes) of one GET on a connection of its own."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def serve_webhooks(on_post):
    """A webhook receiver on a free loopback port, in threads of its own: on_post(path,
    headers, body bytes, received_ns) answers each POST's status, the receipt read first thing
    after the request's head. Returns the server; its port is server.server_address[1]."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"   # punctual keeps its connections alive

        def do_POST(self):
            received = time.time_ns()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(on_post(self.path, self.headers, body, received))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        # Python's default accept backlog is 5: a burst of connects from the server's
        # per-host slots (64 a shard) overflowed it, and each dropped SYN cost a 1 s (then
        # 3 s) retransmission, so a drill measured its own receiver. A real receiver
        # listens with the kernel's somaxconn.
        request_queue_size = 1024

        def handle_error(self, request, client_address):
            # A punctual killed or stopped resets its keep-alive connections: expected.
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, name="receiver", daemon=True).start()
    return server
