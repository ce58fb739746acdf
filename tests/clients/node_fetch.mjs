// Node's own `fetch` (undici: pooled keep-alive connections), as its users use it, driving
// PUT, GET, DELETE and a batch through a tenant's rate limit, its quota and a 413. A
// connection error rejects, and the script exits non-zero with it. Prints how many answers
// of each status it got.
//
// Usage: node node_fetch.mjs http://127.0.0.1:PORT
import assert from "node:assert/strict";

const base = process.argv[2];
const seen = {};

async function call(method, path, want, body) {
  const init = { method };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { "content-type": "application/json" };
  }
  const r = await fetch(base + path, init);
  const text = await r.text();
  seen[r.status] = (seen[r.status] || 0) + 1;
  if (want) assert.ok(want.includes(r.status), `${method} ${path}: ${r.status} ${text}`);
  return { status: r.status, headers: r.headers, json: () => JSON.parse(text) };
}

const far = { delay_ms: 600000, payload: { order: 8812 } };
for (let i = 0; i < 3; i++) await call("PUT", `/v1/timers/calm/k${i}`, [201], far);
const got = await call("GET", "/v1/timers/calm/k0", [200]);
assert.deepEqual(got.json().payload, { order: 8812 });
await call("DELETE", "/v1/timers/calm/k0", [204]);
await call("DELETE", "/v1/timers/calm/k0", [404]);
const batch = { timers: [0, 1, 2, 3, 4].map((i) => ({ key: `b${i}`, delay_ms: 600000 })) };
const b = await call("POST", "/v1/timers/calm", [200], batch);
assert.deepEqual(b.json().results.map((x) => x.status), [201, 201, 201, 201, 201]);

for (let i = 0; i < 30; i++) {
  const r = await call("PUT", `/v1/timers/limited/k${i}`, [200, 201, 429], far);
  if (r.status === 429) assert.ok(Number(r.headers.get("retry-after")) >= 1);
  await call("GET", "/v1/timers/calm/k1", [200]);
  await call("POST", "/v1/timers/limited", [200, 429], batch);
}
assert.ok(seen[429] > 0, JSON.stringify(seen));

for (let i = 0; i < 6; i++) {
  const r = await call("PUT", `/v1/timers/capped/k${i}`, [201, 429], far);
  assert.equal(r.status === 429, i >= 3);
}
await call("PUT", "/v1/timers/capped/k0", [200], far);

const big = { delay_ms: 1, payload: "x".repeat(10000) };
for (let i = 0; i < 3; i++) {
  const r = await call("PUT", "/v1/timers/calm/big", [413], big);
  assert.equal(r.json().error.code, "body_too_large");
  await call("GET", "/v1/timers/calm/k1", [200]);
}
await call("PUT", "/v1/nothing", [404], far);
await call("PATCH", "/v1/timers/calm/k1", [405], far);
await call("DELETE", "/v1/timers/calm/k1", [204]);
console.log(JSON.stringify(seen));
