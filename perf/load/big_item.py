#!/usr/bin/env python3
# One batch item far past any valid size, POSTed five times to a fresh one-shard server
# (memory store), per body shape: an 8 MiB string payload and 8 million numbers (a 16 MB
# body), each also with an unknown field first. Prints each round trip; two binaries are
# run in turn, twice.
#
#   python3 perf/load/big_item.py <binary before> <binary after>
import subprocess, socket, time, sys, os, tempfile, http.client
def run(binary):
    s=socket.socket(); s.bind(('127.0.0.1',0)); port=s.getsockname()[1]; s.close()
    p=subprocess.Popen([binary,'serve','--listen',f'127.0.0.1:{port}','--store','memory','--shards','1','--pinning','none'],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            c=http.client.HTTPConnection('127.0.0.1',port); c.request('GET','/healthz'); c.getresponse().read(); break
        except Exception: time.sleep(0.05)
    out={}
    arr='['+','.join(['0']*8_000_000)+']'
    for shape,extra,payload in [('8 MiB string','','"'+'x'*(8<<20)+'"'),('8 MiB string, unknown field','"zz":1,','"'+'x'*(8<<20)+'"'),('8 M numbers (16 MB)','',arr),('8 M numbers, unknown field','"zz":1,',arr)]:
        body=('{"timers":[{'+extra+'"key":"h","delay_ms":1,"payload":'+payload+'}]}').encode()
        ts=[]
        for _ in range(5):
            c=http.client.HTTPConnection('127.0.0.1',port)
            t=time.perf_counter(); c.request('POST','/v1/timers/t',body,{'Content-Type':'application/json'}); r=c.getresponse(); r.read(); ts.append((time.perf_counter()-t)*1e3)
        out[shape]=(r.status, sorted(ts))
    p.kill(); p.wait()
    return out
for i in range(2):
    for name,b in [('before',sys.argv[1]),('after',sys.argv[2])]:
        for shape,(st,ts) in run(b).items():
            print(f"{name:6s} {shape:30s} status {st}: " + ", ".join(f"{t:.1f}" for t in ts) + " ms")
