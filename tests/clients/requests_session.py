"""Python `requests` with one Session (keep-alive, pooled), as its users use it, driving PUT,
GET, DELETE and a batch through a tenant's rate limit, its quota and a 413; then the
standard library's `http.client` on one connection, which does not look for a connection
the server closed before it reuses it. Any connection error ends the script with its
traceback. Prints how many answers of each status it got.

Usage: python3 requests_session.py http://127.0.0.1:PORT
"""
import collections
import http.client
import json
import sys
import urllib.parse

import requests

base = sys.argv[1]
seen = collections.Counter()
s = requests.Session()


def call(method, path, want=None, **kw):
    r = s.request(method, base + path, timeout=30, **kw)
    seen[r.status_code] += 1
    if want is not None:
        assert r.status_code in want, f"{method} {path}: {r.status_code} {r.text}"
    return r


far = {"delay_ms": 600000, "payload": {"order": 8812}}
for i in range(3):
    call("PUT", f"/v1/timers/calm/k{i}", {201}, json=far)
r = call("GET", "/v1/timers/calm/k0", {200})
assert r.json()["payload"] == {"order": 8812}, r.text
call("DELETE", "/v1/timers/calm/k0", {204})
call("DELETE", "/v1/timers/calm/k0", {404})
batch = {"timers": [{"key": f"b{i}", "delay_ms": 600000} for i in range(5)]}
r = call("POST", "/v1/timers/calm", {200}, json=batch)
assert [x["status"] for x in r.json()["results"]] == [201] * 5, r.text

# Past the rate (5 a second, burst 5): 429 with Retry-After, and the next request still goes
# out on the session.
for i in range(30):
    r = call("PUT", f"/v1/timers/limited/k{i}", {201, 200, 429}, json=far)
    if r.status_code == 429:
        assert int(r.headers["Retry-After"]) >= 1, r.headers
    call("GET", "/v1/timers/calm/k1", {200})
    call("POST", "/v1/timers/limited", {200, 429}, json=batch)
assert seen[429] > 0, seen

# Past the quota (3 pending): new keys are 429 quota_exceeded, replacements are not.
for i in range(6):
    r = call("PUT", f"/v1/timers/capped/k{i}", {201, 429}, json=far)
    assert (r.status_code == 429) == (i >= 3), r.text
call("PUT", "/v1/timers/capped/k0", {200}, json=far)

# A body over max_body_bytes, then ordinary requests on the same session.
big = {"delay_ms": 1, "payload": "x" * 10000}
for _ in range(3):
    r = call("PUT", "/v1/timers/calm/big", {413}, json=big)
    assert r.json()["error"]["code"] == "body_too_large", r.text
    call("GET", "/v1/timers/calm/k1", {200})
# An unknown route and a wrong method, each with a body.
call("PUT", "/v1/nothing", {404}, json=far)
call("PATCH", "/v1/timers/calm/k1", {405}, json=far)
call("DELETE", "/v1/timers/calm/k1", {204})

# http.client: one connection, PUTs through the rate limit, each answer read before the next
# request; a 413 and a 404 with bodies between them.
u = urllib.parse.urlsplit(base)
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
body = json.dumps(far)
for i in range(60):
    c.request("PUT", f"/v1/timers/limited/h{i}", body=body,
              headers={"content-type": "application/json"})
    r = c.getresponse()
    r.read()
    seen[r.status] += 1
    assert r.status in (200, 201, 429), r.status
    if i % 20 == 10:
        c.request("PUT", "/v1/nothing", body=body)
        r = c.getresponse()
        r.read()
        assert r.status == 404, r.status
        if r.getheader("connection", "").lower() == "close":
            c.close()
print(json.dumps(seen))
