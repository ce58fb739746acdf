"""The real punctual binary on free ports for the tests: PUNCTUAL_BIN, else the repository's
target/release/punctual, built first (cargo build --release --locked)."""

from __future__ import annotations

import http.server
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]

ACME_TOKEN = "acme-token-0123456789abcdef0123456789"
STD_TOKEN = "std-token-0123456789abcdef0123456789ab"
SLOW_TOKEN = "slow-token-0123456789abcdef0123456789ab"
QUOTA_TOKEN = "quota-token-0123456789abcdef0123456789a"
PULL_TOKEN = "pull-token-0123456789abcdef0123456789abc"
NEW_SECRET = "rotation-new-0123456789abcdef0123456789"
OLD_SECRET = "rotation-old-0123456789abcdef0123456789"
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
WHSEC_OLD = "whsec_dGhpcy1pcy10aGUtb2xkLWtleS0wMTIzNDU2Nzg5"

# The consumers' tenants, one per test so that none sees another's messages.
CONSUME_TENANTS = ["orders", "work", "awork", "flaky", "lingering", "stopping", "astopping", "prefetched", "aflaky", "alingering"]


def queue_token(name: str) -> str:
    return f"{name}-token-0123456789abcdef0123456789abcdef"


# Abstract sockets claiming the ports given out, held while the process lives: the
# repository's Rust tests claim theirs the same way (tests/support/ports.rs), so no two tests
# running side by side get one port.
_claims = []


def free_port() -> int:
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            claim.bind(f"\0punctual-test-port-{port}")
        except OSError:
            claim.close()
            continue
        _claims.append(claim)
        return port
    raise RuntimeError("no unclaimed port in 1,000 binds of port 0")


_binary = None


def binary() -> str:
    global _binary
    if _binary is None:
        _binary = os.environ.get("PUNCTUAL_BIN")
        if not _binary:
            subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "punctual"], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _binary = str(ROOT / "target" / "release" / "punctual")
    return _binary


class Process:
    def __init__(self, argv, url, workdir):
        self.workdir = workdir
        self.log = open(os.path.join(workdir.name, "log"), "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = url

    def signal(self, sig):
        self.proc.send_signal(sig)
        if sig == signal.SIGSTOP:  # wait until every thread is stopped
            end = time.monotonic() + 10
            while time.monotonic() < end:
                tasks = list(pathlib.Path(f"/proc/{self.proc.pid}/task").glob("*/stat"))
                states = [t.read_text().rpartition(")")[2].split()[0] for t in tasks]
                if states and all(s == "T" for s in states):
                    return
                time.sleep(0.005)
            raise RuntimeError("the process's threads did not all stop within 10 s")

    def stop(self):
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.workdir.cleanup()


def start_server(toml: str, *args: str) -> Process:
    """`punctual serve` on a free port, toml as its configuration, a journal in a temporary
    directory (unless args name --redis); waits for /healthz 200."""
    work = tempfile.TemporaryDirectory(prefix="punctual-py-client-")
    config = os.path.join(work.name, "punctual.toml")
    with open(config, "w") as f:
        f.write(toml)
    port = free_port()
    argv = [binary(), "serve", "--listen", f"127.0.0.1:{port}", "--config", config, "--shards", "2",
            "--pinning", "none", "--spin-us", "0", "--shard-capacity", "100000"]
    if "--redis" not in args:
        argv += ["--store", "journal", "--data-dir", os.path.join(work.name, "journal"), "--fsync", "everysec"]
    p = Process(argv + list(args), f"http://127.0.0.1:{port}", work)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(p.url + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return p
        except OSError:
            pass
        if p.proc.poll() is not None:
            break
        time.sleep(0.05)
    p.stop()
    raise RuntimeError("punctual did not answer /healthz 200 within 30 s")


def start_redis() -> Process:
    work = tempfile.TemporaryDirectory(prefix="punctual-py-redis-")
    port = free_port()
    p = Process(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", work.name], f"redis://127.0.0.1:{port}", work)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p
        except OSError:
            time.sleep(0.02)
    p.stop()
    raise RuntimeError("redis-server did not listen within 10 s")


class Receiver:
    """The tests' webhook endpoint: each test mounts a handler under a path of its own. A
    handler gets (headers, body) and returns the status to answer."""

    def __init__(self):
        self.handlers = {}
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                h = receiver.handlers.get(self.path)
                status = h(dict(self.headers.items()), body) if h else 404
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def mount(self, path, handler) -> str:
        self.handlers[path] = handler
        return self.base + path


@pytest.fixture(scope="session")
def receiver():
    r = Receiver()
    yield r
    r.server.shutdown()


# Where a test runs examples/receiver.py, allowed as a callback.
EXAMPLE_PORT = free_port()


def _allow(receiver) -> str:
    return (f'callback_allow = ["{receiver.base}/", "http://127.0.0.1:{EXAMPLE_PORT}/"]\n'
            'callback_allow_networks = ["127.0.0.1/32"]\n')


@pytest.fixture(scope="session")
def open_server(receiver):
    """The first run: no tenants (every tenant open), a journal in a temporary directory."""
    s = start_server(_allow(receiver) + "retry_base_delay_ms = 50\nretry_max_delay_ms = 200\n")
    os.environ["PUNCTUAL_URL"] = s.url  # the README's examples read it
    yield s
    s.stop()


@pytest.fixture(scope="session")
def tenants_server(receiver):
    """The second run: tenants with tokens, signing secrets, a rate, a quota and a pull queue."""
    s = start_server(_allow(receiver) + f"""
[tenants.acme]
token = "{ACME_TOKEN}"
webhook_secrets = ["{NEW_SECRET}", "{OLD_SECRET}"]
[tenants.std]
token = "{STD_TOKEN}"
webhook_signature = "standard"
webhook_secrets = ["{WHSEC}", "{WHSEC_OLD}"]
[tenants.slow]
token = "{SLOW_TOKEN}"
max_requests_per_s = 1
burst = 1
[tenants.capped]
token = "{QUOTA_TOKEN}"
max_pending = 2
[tenants.pull]
token = "{PULL_TOKEN}"
queue = true
queue_max_receives = 3
""" + "".join(f'[tenants.{n}]\ntoken = "{queue_token(n)}"\nqueue = true\n' for n in CONSUME_TENANTS)
        # Two requests a second: a consumer's receives are refused 429 rate_limited.
        + f'[tenants.throttled]\ntoken = "{queue_token("throttled")}"\nqueue = true\nmax_requests_per_s = 2\nburst = 2\n')
    os.environ["PUNCTUAL_QUEUE_URL"] = s.url  # the README's consumer reads them
    os.environ["PUNCTUAL_TOKEN"] = queue_token("orders")
    yield s
    s.stop()
