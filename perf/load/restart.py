#!/usr/bin/env python3
"""Pending timers through a SIGKILL: registers TIMERS far-future timers (default 600,000) over
HTTP batches of 5,000 from 4 threads and 3 tenants into `punctual serve` on the journal (2
shards), replaces 5% of them with single PUTs and cancels 1% with DELETEs, then kills the
server with SIGKILL and starts it again on the same port and data directory. It prints the
registration rate, the time to /healthz, what /metrics counts pending against what was
acknowledged, each shard's "recovered pending timers" log line, and checks 3,000 pending timers
(deadline and version, by GET) and 1,000 cancelled ones (404). Exit status 1 on any mismatch.

    python3 perf/load/restart.py target/release/punctual [TIMERS]
    PUNCTUAL_SERVE_ARGS="--page-horizon-s 3600" python3 perf/load/restart.py target/release/punctual

PUNCTUAL_SERVE_ARGS adds flags to `punctual serve` (above: paging, which pages all of them).

Standard library only; the data directory is a temporary one, removed at the end.
"""
import atexit, json, os, random, shutil, signal, socket, subprocess, sys, tempfile, threading, time, http.client

if len(sys.argv) < 2:
    sys.exit(__doc__)
BIN = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 600_000
WORK = tempfile.mkdtemp(prefix="punctual-restart.")
DATA = os.path.join(WORK, "data")
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    PORT = s.getsockname()[1]
TENANTS = ["shop", "ads", "mail"]
CHILDREN = []
atexit.register(lambda: [c.kill() for c in CHILDREN if c.poll() is None])

def start(log):
    extra = os.environ.get("PUNCTUAL_SERVE_ARGS", "").split()
    p = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", DATA, "--shards", "2"] + extra,
                         stderr=open(log, "w"), stdout=subprocess.DEVNULL)
    CHILDREN.append(p)
    t0 = time.time()
    while time.time() - t0 < 120:
        try:
            c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=2); c.request("GET", "/healthz")
            if c.getresponse().status == 200: return p, time.time() - t0
        except OSError: pass
        time.sleep(0.02)
    raise SystemExit("not healthy in 120 s")
def req(c, m, path, body=None):
    for _ in range(1200):  # 503 while a shard still loads: bounded wait
        c.request(m, path, body=json.dumps(body) if body is not None else None, headers={"Content-Type": "application/json"})
        r = c.getresponse(); st, b = r.status, r.read()
        if st != 503: return st, b
        time.sleep(0.05)
    return st, b
expect = {}; lock = threading.Lock()
now_ms = int(time.time() * 1000)
def worker(w, nw):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    rnd = random.Random(w)
    for start_i in range(w * 5000, N, nw * 5000):
        t = TENANTS[(start_i // 5000) % 3]
        items = [{"key": f"order-{i:09d}", "fire_at_ms": now_ms + 3_600_000 + rnd.randrange(7 * 86_400_000), "payload": "p" * 100}
                 for i in range(start_i, min(start_i + 5000, N))]
        st, body = req(c, "POST", f"/v1/timers/{t}", {"timers": items})
        assert st == 200, (st, body[:200])
        res = json.loads(body)["results"]
        with lock:
            for r in res:
                assert r["status"] in (200, 201), r
                expect[(t, r["key"])] = (r["fire_at_us"], r["version"])
p, up = start(os.path.join(WORK, "log1.txt"))
t0 = time.time()
th = [threading.Thread(target=worker, args=(w, 4)) for w in range(4)]
[x.start() for x in th]; [x.join() for x in th]
reg = time.time() - t0
# a mix: replace 5% with new deadlines, cancel 1%
c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60); rnd = random.Random(7)
keys = list(expect)
for (t, k) in rnd.sample(keys, len(keys) // 20):
    st, body = req(c, "PUT", f"/v1/timers/{t}/{k}", {"fire_at_ms": now_ms + 7_200_000 + rnd.randrange(86_400_000), "payload": "q"})
    assert st in (200, 201), (st, body); r = json.loads(body); expect[(t, k)] = (r["fire_at_us"], r["version"])
gone = rnd.sample(keys, len(keys) // 100)
for (t, k) in gone:
    st, _ = req(c, "DELETE", f"/v1/timers/{t}/{k}"); assert st == 204, st; del expect[(t, k)]
print(f"registered {N} in {reg:.1f} s ({N/reg:.0f}/s over HTTP batches), replaced {len(keys)//20}, cancelled {len(gone)}; pending {len(expect)}")
p.send_signal(signal.SIGKILL); p.wait()
p, up = start(os.path.join(WORK, "log2.txt"))
print(f"SIGKILL, restart on the same port: healthy in {up:.2f} s")
c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
st, body = req(c, "GET", "/metrics")
pend = sum(float(l.split()[-1]) for l in body.decode().splitlines() if l.startswith("punctual_timers_pending"))
print(f"/metrics punctual_timers_pending {pend:.0f} (expected {len(expect)})")
bad = 0
for (t, k) in rnd.sample(list(expect), 3000):
    st, body = req(c, "GET", f"/v1/timers/{t}/{k}")
    r = json.loads(body) if st == 200 else {}
    if st != 200 or (r.get("fire_at_us"), r.get("version")) != expect[(t, k)]: bad += 1; print("mismatch", t, k, st, body[:200])
for (t, k) in gone[:1000]:
    st, _ = req(c, "GET", f"/v1/timers/{t}/{k}")
    if st != 404: bad += 1; print("cancelled but found", t, k, st)
print(f"checked 3000 pending and 1000 cancelled: {bad} wrong")
p.send_signal(signal.SIGTERM); p.wait()
for l in open(os.path.join(WORK, "log2.txt")):
    if "recovered" in l: print("  log:", l.strip()[-160:])
ok = not bad and pend == len(expect)
shutil.rmtree(WORK, ignore_errors=True) if ok else print(f"work directory kept: {WORK}")
sys.exit(0 if ok else 1)
