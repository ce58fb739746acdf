#!/usr/bin/env python3
"""The server's CPU per registration under the batch load.

    python3 perf/load/batch_cpu.py BIN [--perf OUT.data] [--stat EVENTS] [--dur 8]

Starts a fresh `BIN serve --shards 2 --store journal --fsync always` on a fresh data
directory, runs `wrk -t2 -c8 -dDURs -s perf/load/batch.lua` against it, and prints the
timers acknowledged, the server's user+system time over the run (every thread, from
/proc/PID/task/*/stat), that time per timer, and each thread name's share. --perf records
`perf record -e cpu-clock -F 499 --call-graph dwarf` of the server over the run (read it with
`perf script -i OUT.data -F comm,tid,ip,sym,dso | perf/load/steps.py TIMERS`); --stat counts
perf events (comma-separated, e.g. raw_syscalls:sys_enter,context-switches) per batch.
"""
import argparse, collections, os, re, shutil, socket, subprocess, tempfile, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("bin")
ap.add_argument("--perf")
ap.add_argument("--stat")
ap.add_argument("--dur", default="8")
a = ap.parse_args()
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
data = tempfile.mkdtemp()
server = subprocess.Popen([a.bin, "serve", "--listen", f"127.0.0.1:{port}", "--shards", "2", "--store", "journal",
                           "--fsync", "always", "--data-dir", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(400):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz"); break
    except Exception:
        time.sleep(0.05)

def ticks():
    out = collections.Counter()
    for tid in os.listdir(f"/proc/{server.pid}/task"):
        try:
            name = open(f"/proc/{server.pid}/task/{tid}/comm").read().strip()
            f = open(f"/proc/{server.pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            out[name] += int(f[11]) + int(f[12])
        except FileNotFoundError:
            pass
    return out

before = ticks()
rec = None
if a.perf:
    rec = ["perf", "record", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,16384", "-o", a.perf]
elif a.stat:
    rec = ["perf", "stat", "-x,", "-o", data + ".stat"] + [x for e in a.stat.split(",") for x in ("-e", e)]
side = rec and subprocess.Popen(rec + ["-p", str(server.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
out = subprocess.run(["wrk", "-t2", "-c8", f"-d{a.dur}s", "-s", os.path.join(root, "perf/load/batch.lua"),
                      f"http://127.0.0.1:{port}"], capture_output=True, text=True).stdout
after = ticks()
if side:
    side.send_signal(2); side.wait()
server.terminate(); server.wait()
batches = int(re.search(r"(\d+) requests in", out).group(1))
non2xx = re.search(r"Non-2xx[^:]*:\s*(\d+)", out)
hz = os.sysconf("SC_CLK_TCK")
spent = {k: after[k] - before.get(k, 0) for k in after if after[k] > before.get(k, 0)}
ns = sum(spent.values()) * 1e9 / hz
print(f"timers {batches * 1000} non-2xx {non2xx.group(1) if non2xx else 0} server_cpu_ms {ns / 1e6:.0f} "
      f"ns_per_timer {ns / (batches * 1000):.0f} threads_ms {({k: v * 1000 // hz for k, v in spent.items()})}")
if a.stat:
    for line in open(data + ".stat"):
        f = line.split(",")
        if len(f) > 3 and f[0].replace(".", "").isdigit():
            print(f"{f[2]} per batch {float(f[0]) / batches:.2f}")
    os.remove(data + ".stat")
shutil.rmtree(data)
