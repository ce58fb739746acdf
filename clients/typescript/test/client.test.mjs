import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ApiError, Client, NO_RETRY, TransportError } from "punctual-client";
import { ACME_TOKEN, QUOTA_TOKEN, SLOW_TOKEN, STD_TOKEN, allow, startRedis, startReceiver, startServer, tenantsToml } from "./harness.mjs";

let receiver, open, tenants;
before(async () => {
  receiver = await startReceiver();
  open = await startServer(allow(receiver) + "retry_base_delay_ms = 50\nretry_max_delay_ms = 200\n");
  tenants = await startServer(tenantsToml(receiver));
});
after(async () => {
  await open?.stop();
  await tenants?.stop();
  await receiver?.close();
});

function recording(extra = {}) {
  const seen = [];
  return { seen, retry: { onRetry: (attempt, error, waitMs) => seen.push({ error, waitMs }), ...extra } };
}

async function rejects(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("resolved where it should reject");
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("put, get, cancel round trip", async () => {
  const c = new Client(open.url);
  const s = await c.put("shop", "order:8812", { delay_ms: 900_000, payload: { order: 8812 } });
  assert.ok(s.created);
  assert.equal(s.key, "order:8812");
  const at = new Date(Date.now() + 3_600_000);
  const r = await c.put("shop", "order:8812", { fire_at: at, payload: { order: 8812, v: 2 } });
  assert.ok(!r.created && r.version > s.version);
  assert.equal(r.fire_at_us, at.getTime() * 1000);
  const got = await c.get("shop", "order:8812");
  assert.deepEqual(got.payload, { order: 8812, v: 2 });
  assert.equal(got.version, r.version);
  assert.equal((await c.put("shop", "ms", { fire_at_ms: 1896084900000 })).fire_at_us, 1896084900000000);
  await c.cancel("shop", "order:8812");
  const e = await rejects(c.cancel("shop", "order:8812"));
  assert.ok(e instanceof ApiError && e.notFound && e.status === 404);
  const g = await rejects(c.get("shop", "order:8812"));
  assert.equal(g.code, "not_found");
});

test("bad input is a typed error and not retried", async () => {
  const { seen, retry } = recording();
  const c = new Client(open.url, { retry });
  const cases = [
    ["a b", "k", { delay_ms: 1 }, "invalid_tenant"],
    ["shop", "a/b", { delay_ms: 1 }, "invalid_key"],
    ["shop", "k", {}, "invalid_deadline"],
    ["shop", "k", { delay_ms: 11 * 365 * 86_400_000 }, "deadline_out_of_range"],
    ["shop", "k", { delay_ms: 1, payload: "x".repeat(70_000) }, "payload_too_large"],
    ["shop", "k", { delay_ms: 1, callback: { url: "http://elsewhere.example/" } }, "callback_not_allowed"],
  ];
  for (const [tenant, key, timer, code] of cases) {
    const e = await rejects(c.put(tenant, key, timer));
    assert.ok(e instanceof ApiError, String(e));
    assert.equal(e.code, code);
  }
  assert.deepEqual(seen, []);
});

test("batch results in order, each failing alone", async () => {
  const c = new Client(open.url);
  const res = await c.batch("batch", [
    { key: "b1", delay_ms: 3_600_000 },
    { key: "b/2", delay_ms: 1 },
    { key: "b3", fire_at_ms: 1896084900000, payload: "x" },
    { key: "b1", delay_ms: 7_200_000 },
  ]);
  assert.deepEqual(res.map((r) => r.status), [201, 400, 201, 200]);
  assert.deepEqual(res.map((r) => r.key), ["b1", "b/2", "b3", "b1"]);
  assert.equal(res[1].error.code, "invalid_key");
  assert.equal((await rejects(c.batch("batch", []))).code, "empty_batch");
  assert.equal((await c.get("batch", "b3")).payload, "x");
});

test("dead letters: list, 409 on a re-drive over a pending timer, re-drive, discard", async () => {
  const c = new Client(open.url);
  let status = 400; // permanent: a dead letter at once
  const delivered = [];
  const hook = receiver.mount("/dead", (h, body) => (delivered.push(JSON.parse(body)), status));
  for (const k of ["d1", "d2", "d3"]) await c.put("deadt", k, { delay_ms: 0, callback: { url: hook }, payload: k });
  let dead = [];
  for (const end = Date.now() + 20_000; Date.now() < end && dead.length < 3; await sleep(50)) {
    dead = await c.deadLetters("deadt");
  }
  assert.deepEqual(dead.map((d) => d.key), ["d1", "d2", "d3"]);
  assert.equal(dead[0].last_status, 400);
  assert.equal(dead[0].callback.url, hook);
  assert.equal(dead[0].payload, "d1");
  assert.deepEqual((await c.deadLetters("deadt", { limit: 1, after: "d1" })).map((d) => d.key), ["d2"]);

  await c.put("deadt", "d1", { delay_ms: 3_600_000 });
  const conflict = await rejects(c.redrive("deadt", "d1"));
  assert.equal(conflict.status, 409);
  assert.equal(conflict.code, "timer_pending");
  await c.cancel("deadt", "d1");
  status = 204;
  delivered.length = 0;
  assert.equal((await c.redrive("deadt", "d1")).version, dead[0].version);
  for (const end = Date.now() + 20_000; Date.now() < end && delivered.length === 0; ) await sleep(20);
  assert.equal(delivered[0]?.key, "d1");
  await c.discard("deadt", "d2");
  assert.ok((await rejects(c.discard("deadt", "d2"))).notFound);
});

test("health, metrics, cluster", async () => {
  const c = new Client(open.url);
  const h = await c.health();
  assert.deepEqual([h.status, h.store, h.shards], ["ok", "journal", 2]);
  const m = await c.metrics();
  assert.ok(m.trimEnd().endsWith("# EOF") && m.includes("punctual_"));
  assert.ok((await rejects(c.cluster())).notFound);
});

test("tokens and unknown tenants", async () => {
  assert.equal((await rejects(new Client(tenants.url).put("acme", "k", { delay_ms: 1000 }))).code, "unauthorized");
  assert.equal((await rejects(new Client(tenants.url, { token: STD_TOKEN }).get("acme", "k"))).code, "unauthorized");
  assert.equal((await rejects(new Client(tenants.url).put("nobody", "k", { delay_ms: 1000 }))).code, "unknown_tenant");
  const c = new Client(tenants.url, { token: ACME_TOKEN });
  await c.put("acme", "k", { delay_ms: 3_600_000 });
  await c.cancel("acme", "k");
});

test("429 quota_exceeded carries Retry-After and is not retried", async () => {
  const { seen, retry } = recording();
  const c = new Client(tenants.url, { token: QUOTA_TOKEN, retry });
  await c.put("capped", "q1", { delay_ms: 3_600_000 });
  await c.put("capped", "q2", { delay_ms: 3_600_000 });
  const e = await rejects(c.put("capped", "q3", { delay_ms: 3_600_000 }));
  assert.deepEqual([e.status, e.code], [429, "quota_exceeded"]);
  assert.ok(e.retryAfterMs >= 1000);
  assert.deepEqual(seen, []);
  await c.put("capped", "q1", { delay_ms: 7_200_000 }); // a replacement past the quota
});

test("429 rate_limited: Retry-After, a short deadline, and retries that wait it out", async () => {
  const once = new Client(tenants.url, { token: SLOW_TOKEN, retry: NO_RETRY });
  let limited;
  for (let i = 0; i < 5 && !limited; i++) {
    try {
      await once.put("slow", "r", { delay_ms: 3_600_000 });
    } catch (e) {
      limited = e;
    }
  }
  assert.ok(limited instanceof ApiError && limited.code === "rate_limited" && limited.retryAfterMs >= 1000, String(limited));

  const start = Date.now();
  const e = await rejects(new Client(tenants.url, { token: SLOW_TOKEN }).put("slow", "r", { delay_ms: 1 }, { timeoutMs: 300 }));
  assert.equal(e.code, "rate_limited");
  assert.ok(Date.now() - start < 250);

  const { seen, retry } = recording();
  const c = new Client(tenants.url, { token: SLOW_TOKEN, retry });
  for (let i = 0; i < 3; i++) await c.put("slow", "r", { delay_ms: 3_600_000 });
  const waits = seen.filter((s) => s.error.code === "rate_limited").map((s) => s.waitMs);
  assert.ok(waits.length > 0 && Math.min(...waits) >= 1000, JSON.stringify(waits));
});

test("503 store_unavailable while the store is stopped: retried after Retry-After", async () => {
  const redis = await startRedis();
  const s = await startServer("", "--redis", redis.url);
  try {
    const { seen, retry } = recording();
    const c = new Client(s.url, { retry });
    await redis.signal("SIGSTOP");
    setTimeout(() => redis.signal("SIGCONT"), 2500);
    // The attempt answered 503 may still have become durable; the retry then replaces it.
    await c.put("shop", "k", { delay_ms: 3_600_000, payload: "after" });
    assert.equal((await c.get("shop", "k")).payload, "after");
    const first = seen[0];
    assert.ok(first.error instanceof ApiError, String(first?.error));
    assert.deepEqual([first.error.status, first.error.code], [503, "store_unavailable"]);
    assert.ok(first.error.retryAfterMs >= 1000 && first.waitMs >= first.error.retryAfterMs);
  } finally {
    await s.stop();
    await redis.stop();
  }
});

test("a SIGSTOPped server: the PUT retries until it is continued; deadlines and signals end calls", async () => {
  const { seen, retry } = recording({ attemptTimeoutMs: 300, maxAttempts: 20 });
  const c = new Client(open.url, { retry });
  await open.signal("SIGSTOP");
  setTimeout(() => open.child.kill("SIGCONT"), 1500);
  const start = Date.now();
  await c.put("stall", "k", { delay_ms: 3_600_000, payload: "after" });
  assert.ok(Date.now() - start >= 1400);
  assert.ok(seen.length >= 2 && seen[0].error instanceof TransportError, String(seen[0]?.error));
  // Every attempt that timed out was sent: the pending timer is one of them.
  assert.equal((await c.get("stall", "k")).payload, "after");

  await open.signal("SIGSTOP");
  try {
    let t0 = Date.now();
    const timedOut = await rejects(c.put("stall", "k", { delay_ms: 1 }, { timeoutMs: 800 }));
    assert.ok(Date.now() - t0 < 1500, String(timedOut));
    assert.ok(timedOut instanceof TransportError, String(timedOut));

    const ac = new AbortController();
    setTimeout(() => ac.abort(), 500);
    t0 = Date.now();
    const aborted = await rejects(c.put("stall", "k", { delay_ms: 1 }, { signal: ac.signal }));
    assert.equal(aborted.name, "AbortError");
    assert.ok(Date.now() - t0 < 1200);

    seen.length = 0;
    assert.ok((await rejects(c.redrive("stall", "nothing"))) instanceof TransportError);
    assert.deepEqual(seen, []);
  } finally {
    open.child.kill("SIGCONT");
  }
});

test("conditional writes and cancels", async () => {
  const c = new Client(open.url);
  const first = await c.put("shop", "cond", { delay_ms: 3_600_000, if: "absent" });
  assert.ok(first.created);
  let e = await rejects(c.put("shop", "cond", { delay_ms: 60_000, if: "absent" }));
  assert.ok(e instanceof ApiError && e.status === 409 && e.code === "exists" && e.conflict);
  assert.equal(e.version, first.version);
  assert.equal(e.fireAtUs, first.fire_at_us);
  e = await rejects(c.put("shop", "cond", { delay_ms: 60_000, if_version: first.version + 1 }));
  assert.equal(e.code, "version_mismatch");
  assert.equal(e.version, first.version);
  const second = await c.put("shop", "cond", { delay_ms: 3_600_000, if_version: first.version });
  assert.ok(!second.created && second.version > first.version);
  e = await rejects(c.put("shop", "cond-none", { delay_ms: 1, if_version: 7 }));
  assert.ok(e.notFound);
  e = await rejects(c.cancelIf("shop", "cond", { if_version: first.version }));
  assert.ok(e.conflict && e.version === second.version);
  await c.cancelIf("shop", "cond", { if_version: second.version });
  const results = await c.batch("shop", [
    { key: "cond-b", delay_ms: 3_600_000, if: "absent" },
    { key: "cond-b", delay_ms: 3_600_000, if: "absent" },
  ]);
  assert.deepEqual(results.map((r) => r.status), [201, 409]);
  assert.equal(results[1].error.code, "exists");
  assert.equal(results[1].error.version, results[0].version);
  for (const k of ["cond-l1", "cond-l2", "cond-l3"]) await c.put("shop", k, { delay_ms: 3_600_000, payload: k });
  let p = await c.list("shop", { prefix: "cond-l", limit: 2, payloads: true });
  assert.deepEqual(p.timers.map((t) => t.key), ["cond-l1", "cond-l2"]);
  assert.equal(p.next, "cond-l2");
  assert.equal(p.timers[0].payload, "cond-l1");
  p = await c.list("shop", { prefix: "cond-l", after: p.next });
  assert.deepEqual(p.timers.map((t) => t.key), ["cond-l3"]);
  assert.equal(p.next, undefined);
  const d = await c.put("shop", "cond-d", { delay_ms: 3_600_000, debounce: { max_wait_ms: 60_000 } });
  const got = await c.get("shop", "cond-d");
  assert.equal(got.debounce.max_wait_ms, 60_000);
  assert.equal(got.debounce.cap_us, got.debounce.first_at_us + 60_000_000);
  assert.equal(d.fire_at_us, got.debounce.cap_us);
});
