"""The cluster drill's machinery: the hashes that place a key, a Redis Cluster of six
redis-servers, and punctual nodes that can be started, paused, killed and asked how many
partitions they hold."""

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import time
from collections import Counter, defaultdict

from common import free_port, http_get, now
from redis_nodes import Node, Resp, RespError, text, try_cmd, wait_for

PARTITIONS = 1024


# ---------------------------------------------------------------------------------------------
# The hashes of src/partition.rs and src/nodes/rendezvous.rs
# ---------------------------------------------------------------------------------------------

M64 = (1 << 64) - 1


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & M64
    return h


def partition_of(tenant, key):
    return fnv1a64(tenant.encode() + b"\xff" + key.encode()) % PARTITIONS


def splitmix64(z):
    z = (z + 0x9e3779b97f4a7c15) & M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def weight(node, p):
    return splitmix64(fnv1a64(node.encode() + b"\xff" + p.to_bytes(4, "little")))


def assignment(nodes):
    """partition -> node id, by highest weight (ties are astronomically rare)."""
    return {p: max(nodes, key=lambda n: weight(n, p)) for p in range(PARTITIONS)}


def shares(nodes):
    return Counter(assignment(nodes).values())


# ---------------------------------------------------------------------------------------------
# Redis Cluster
# ---------------------------------------------------------------------------------------------

def cluster_port():
    """A free port whose bus port (+10,000) is free too: Redis refuses a cluster port over
    55,535, and the kernel's ephemeral range goes higher."""
    rnd = random.Random()
    for _ in range(1000):
        p = rnd.randint(20000, 45000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 10000))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair for a Redis Cluster node")


def cluster_node(d, port):
    """A restartable redis-server (redis_nodes.py's `Node`) with a cluster node's configuration."""
    conf = os.path.join(d, f"redis-{port}.conf")
    lines = [
        f"port {port}", "bind 127.0.0.1", "protected-mode no", f"dir {d}",
        f"logfile {os.path.join(d, f'redis-{port}.log')}",
        "cluster-enabled yes", f"cluster-config-file nodes-{port}.conf",
        "enable-debug-command local",
        "cluster-node-timeout 1000", "cluster-replica-validity-factor 0",
        "cluster-allow-replica-migration no", 'save ""', "appendonly no",
        f"dbfilename dump-{port}.rdb", "repl-diskless-sync yes",
        "repl-diskless-sync-delay 0",
    ]
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    return Node(f"redis-{port}", port, conf)


class Cluster:
    def __init__(self, d):
        self.nodes = [cluster_node(d, cluster_port()) for _ in range(6)]
        try:
            for n in self.nodes:
                n.start()
            cmd = ["redis-cli", "--cluster", "create"]
            cmd += [f"127.0.0.1:{n.port}" for n in self.nodes]
            cmd += ["--cluster-replicas", "1", "--cluster-yes"]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            if r.returncode != 0:
                raise RuntimeError("redis-cli --cluster create failed: "
                                   + r.stdout.decode()[-2000:])
            wait_for("the cluster to be ok with every replica in sync", self.healthy, 60)
        except BaseException:
            for n in self.nodes:
                n.kill()
            raise

    def running(self):
        return [n for n in self.nodes if n.proc is not None]

    def url(self):
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3]) + "/"

    def slots(self):
        """[(first, last, master port)] as a running node sees them."""
        for n in self.running():
            r = try_cmd(n.port, "CLUSTER", "SLOTS")
            if isinstance(r, list):
                return [(int(s[0]), int(s[1]), int(s[2][1])) for s in r]
        return []

    def masters(self):
        return sorted({p for _, _, p in self.slots()})

    def healthy(self):
        for n in self.running():
            i = text(try_cmd(n.port, "CLUSTER", "INFO") or b"")
            if "cluster_state:ok" not in i:
                return False
        masters = self.masters()
        if len(masters) != 3:
            return False
        replicas = len(self.running()) - 3
        for m in masters:
            r = text(try_cmd(m, "INFO", "replication") or b"")
            if r.count("state=online") < min(1, replicas):
                return False
        return True

    def cmd(self, key_slot_port_hint, *args):
        """One command at the master serving its key, following MOVED (and ASK) replies."""
        port = key_slot_port_hint
        for _ in range(5):
            c = Resp(port, timeout=10)
            try:
                r = c.cmd(*args)
                return r
            except RespError as e:
                msg = str(e)
                if msg.startswith(("MOVED", "ASK")):
                    port = int(msg.split()[2].rsplit(":", 1)[1])
                    continue
                raise
            finally:
                c.close()
        raise RuntimeError(f"no master answered {args[:2]}")


# ---------------------------------------------------------------------------------------------
# punctual nodes
# ---------------------------------------------------------------------------------------------

class Punctual:
    def __init__(self, binary, d, name, url):
        self.name, self.binary, self.url = name, binary, url
        self.port = free_port()
        self.id = f"127.0.0.1:{self.port}"
        self.d = d
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log_path = os.path.join(self.d, f"{self.name}-{self.starts}.log")
        cmd = [self.binary, "serve", "--listen", self.id, "--advertise", self.id,
               "--redis", self.url, "--redis-wait-replicas", "1", "--shards", "2",
               "--pinning", "none", "--spin-us", "0", "--shard-capacity", "200000"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCTUAL_")}
        env["RUST_LOG"] = os.environ.get("RUST_LOG", "info")
        # Every node of the drill shares one cluster secret (required with --advertise).
        env["PUNCTUAL_CLUSTER_SECRET"] = "drill-cluster-secret-0123456789abcdef"
        self.logf = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self):
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        self.proc = None

    def term(self):
        """SIGTERM; (exit status or None if killed after 30 s, seconds it took)."""
        t0 = now()
        self.signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.proc = None
        return rc, now() - t0

    def loaded(self):
        try:
            status, body = http_get(self.port, "/healthz")
            return json.loads(body).get("partitions") if status == 200 else None
        except (OSError, http.client.HTTPException, ValueError):
            return None

    def metrics(self):
        try:
            status, body = http_get(self.port, "/metrics")
        except (OSError, http.client.HTTPException):
            return {}
        out = defaultdict(float)
        for line in text(body).splitlines():
            if line.startswith("#") or " " not in line:
                continue
            name, _, v = line.rpartition(" ")
            base = name.split("{", 1)[0]
            try:
                out[base] += float(v)
                out[name] = float(v)
            except ValueError:
                pass
        return out


def settled(live):
    """Every live node has loaded exactly its rendezvous share of the partitions."""
    want = shares([n.id for n in live])
    return all(n.loaded() == want[n.id] for n in live)


def wait_settled(live, since, limit):
    """Seconds from `since` until settled, or None after `limit` seconds."""
    give_up = since + limit
    while now() < give_up:
        if settled(live):
            return now() - since
        time.sleep(0.05)
    return None
