#!/usr/bin/env python3
# Where a scrape of /metrics spends its CPU: the real binary (memory store, --pinning none),
# 80 tenants per shard each with 8 webhook timers delivered to a local receiver, then 100
# scrapes one after the other, and the CPU time of each thread (by name; Linux cuts names at
# 15 bytes) over them, read from /proc/<pid>/task/*/stat.
#
#   python3 perf/load/scrape_cpu.py target/release/punctual 8    # binary, shards
import http.server, threading, subprocess, time, json, urllib.request, socket, os, sys, tempfile, collections
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n=int(self.headers.get('Content-Length',0)); self.rfile.read(n)
        self.send_response(200); self.send_header('Content-Length','0'); self.end_headers()
    def log_message(self,*a): pass
srv=http.server.ThreadingHTTPServer(('127.0.0.1',0),H); threading.Thread(target=srv.serve_forever,daemon=True).start()
rport=srv.server_address[1]
s=socket.socket(); s.bind(('127.0.0.1',0)); port=s.getsockname()[1]; s.close()
d=tempfile.mkdtemp(); shards=sys.argv[2]
cfg=os.path.join(d,'p.toml'); open(cfg,'w').write(f'callback_allow = ["http://127.0.0.1:{rport}/"]\n')
p=subprocess.Popen([sys.argv[1],'serve','--listen',f'127.0.0.1:{port}','--store','memory','--shards',shards,'--pinning','none','--spin-us','0','--config',cfg],stdout=subprocess.DEVNULL,stderr=subprocess.PIPE)
base=f'http://127.0.0.1:{port}'
for _ in range(400):
    try: urllib.request.urlopen(base+'/healthz'); break
    except Exception: time.sleep(0.05)
else: print(p.stderr.read().decode()[:2000]); sys.exit(1)
def req(m,path,body=None):
    r=urllib.request.Request(base+path,data=body,method=m); r.add_header('Content-Type','application/json')
    return urllib.request.urlopen(r).read()
for t in range(80*int(shards)):
    timers=[{"key":f"k{i}","delay_ms":10,"callback":{"url":f"http://127.0.0.1:{rport}/h"}} for i in range(8)]
    req('POST',f'/v1/timers/tenant-{t:04}',json.dumps({"timers":timers}).encode())
time.sleep(4)
def cpu():
    out=collections.Counter()
    for tid in os.listdir(f'/proc/{p.pid}/task'):
        try:
            name=open(f'/proc/{p.pid}/task/{tid}/comm').read().strip()
            f=open(f'/proc/{p.pid}/task/{tid}/stat').read().rsplit(')',1)[1].split()
            out[name]+= (int(f[11])+int(f[12]))*10  # utime+stime, ms
        except FileNotFoundError: pass
    return out
body=urllib.request.urlopen(base+'/metrics').read()
a=cpu(); t0=time.perf_counter()
for i in range(100): urllib.request.urlopen(base+'/metrics').read()
el=time.perf_counter()-t0; b=cpu()
print(f"{shards} shards: exposition {len(body)/1e6:.2f} MB, {len(body.splitlines())} lines; 100 scrapes in {el:.2f} s")
for k in sorted(set(a)|set(b)):
    if b[k]-a[k]>0: print(f"  {k:24s} {b[k]-a[k]:6d} ms CPU")
p.kill(); p.wait()
import shutil; shutil.rmtree(d, ignore_errors=True)
