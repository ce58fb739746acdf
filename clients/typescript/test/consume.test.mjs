// The pull consumer's loop against the real server: a tenant per test, each with a queue.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ApiError, Client } from "punctual-client";
import { ACME_TOKEN, startServer } from "./harness.mjs";

const TENANTS = ["work", "flaky", "slow", "stopping", "prefetched"];
const token = (name) => `${name}-token-0123456789abcdef0123456789abcdef`;

let server;
before(async () => {
  server = await startServer(
    TENANTS.map((n) => `[tenants.${n}]\ntoken = "${token(n)}"\nqueue = true\n`).join("") +
      `[tenants.acme]\ntoken = "${ACME_TOKEN}"\n` +
      // Two requests a second: a consumer's receives are refused 429 rate_limited.
      `[tenants.throttled]\ntoken = "${token("throttled")}"\nqueue = true\nmax_requests_per_s = 2\nburst = 2\n`,
  );
});
after(async () => {
  await server?.stop();
});

const client = (tenant) => new Client(server.url, { token: token(tenant) });
const pause = (ms) => new Promise((r) => setTimeout(r, ms));

/** n timers due at once, keyed `${prefix}-0` … in batches. */
async function putDue(c, tenant, prefix, n) {
  for (let start = 0; start < n; start += 2000) {
    const items = [];
    for (let i = start; i < Math.min(n, start + 2000); i++) items.push({ key: `${prefix}-${i}`, delay_ms: 0 });
    const results = await c.batch(tenant, items);
    assert.ok(results.every((r) => r.status === 200 || r.status === 201), JSON.stringify(results.find((r) => r.error)));
  }
}

async function waitFor(what, withinMs, cond) {
  const end = Date.now() + withinMs;
  while (!(await cond())) {
    if (Date.now() > end) assert.fail(`${what}: not within ${withinMs} ms`);
    await pause(10);
  }
}

/** c.consume until the returned stop(), which resolves when it has returned. */
function loop(c, tenant, handler, options = {}) {
  const ac = new AbortController();
  const done = c.consume(tenant, handler, { ...options, signal: ac.signal });
  const stop = async () => {
    ac.abort();
    await Promise.race([done, pause(30_000).then(() => assert.fail("consume did not return within 30 s of its stop"))]);
  };
  return { done, stop };
}

async function assertEmpty(c, tenant) {
  const d = await c.queue(tenant);
  assert.deepEqual([d.depth, d.in_flight], [0, 0], JSON.stringify(d));
}

test("two loops handle 10,000 messages, each exactly once", async () => {
  const c = client("work");
  const N = 10_000;
  await putDue(c, "work", "job", N);
  const seen = new Map();
  let handled = 0;
  const problems = [];
  const handle = (m) => {
    const id = `${m.key}/${m.version}`;
    seen.set(id, (seen.get(id) ?? 0) + 1);
    handled++;
  };
  const loops = [0, 1].map(() => loop(c, "work", handle, { visibility_ms: 60_000, onError: (e) => problems.push(e) }));
  await waitFor("10,000 messages handled", 60_000, () => handled >= N);
  for (const l of loops) await l.stop();
  assert.equal(handled, N);
  assert.equal(seen.size, N);
  assert.ok([...seen.values()].every((n) => n === 1));
  const keys = new Set([...seen.keys()].map((id) => id.split("/")[0]));
  for (let i = 0; i < N; i++) assert.ok(keys.has(`job-${i}`), `job-${i} was not handled`);
  assert.deepEqual(problems, []);
  await assertEmpty(c, "work");
});

test("a failed handler gets its message again after the nack delay, its second receive", async () => {
  const c = client("flaky");
  await c.put("flaky", "once", { delay_ms: 0 });
  const calls = [];
  const errors = [];
  const l = loop(
    c,
    "flaky",
    async (m) => {
      calls.push([m.receive_count, Date.now()]);
      if (calls.length === 1) throw new Error("the first try fails");
    },
    { concurrency: 2, nack_delay_ms: 300, onError: (e) => errors.push(e.message) },
  );
  await waitFor("the second handling", 20_000, () => calls.length >= 2);
  await l.stop();
  assert.deepEqual(calls.map(([n]) => n), [1, 2]);
  assert.ok(calls[1][1] - calls[0][1] >= 300, `came back after ${calls[1][1] - calls[0][1]} ms`);
  assert.deepEqual(errors, ["the first try fails"]);
  await assertEmpty(c, "flaky");
});

test("a slow handler keeps its lease: the other loop never gets its message", async () => {
  const c = client("slow");
  await c.put("slow", "long", { delay_ms: 0 });
  const handled = [];
  const errors = [];
  let lost = 0;
  const handle = async (m, signal) => {
    handled.push(m.receive_count);
    await pause(3000); // three times the visibility
    if (signal.aborted) lost++;
  };
  const loops = [0, 1].map(() => loop(c, "slow", handle, { visibility_ms: 1000, wait_ms: 200, onError: (e) => errors.push(e) }));
  await waitFor("the handling", 20_000, () => handled.length > 0);
  await pause(3500); // past its end, so that a second receive would have come
  for (const l of loops) await l.stop();
  assert.deepEqual(handled, [1]);
  assert.equal(lost, 0);
  assert.deepEqual(errors, []);
  await assertEmpty(c, "slow");
});

test("stop resolves once the running handlers finish, their messages acknowledged", async () => {
  const c = client("stopping");
  await putDue(c, "stopping", "s", 3);
  let release;
  const released = new Promise((r) => (release = r));
  const started = [];
  const finished = [];
  const l = loop(
    c,
    "stopping",
    async (m) => {
      started.push(m.key);
      await released;
      await pause(100);
      finished.push(m.key);
    },
    { concurrency: 3, visibility_ms: 60_000 },
  );
  await waitFor("three handlers running", 20_000, () => started.length === 3);
  await pause(100);
  let returned = false;
  const stopped = l.stop().then(() => (returned = true));
  await pause(300);
  assert.equal(returned, false, "consume returned while its handlers ran");
  await c.put("stopping", "after-stop", { delay_ms: 0 });
  release();
  await stopped;
  assert.equal(finished.length, 3);
  await waitFor("the message put after the stop, ready", 10_000, async () => (await c.queue("stopping")).ready === 1);
  const d = await c.queue("stopping");
  assert.deepEqual([d.in_flight, d.depth], [0, 1], JSON.stringify(d));
});

test("stop gives back the prefetched messages not begun", async () => {
  const c = client("prefetched");
  await putDue(c, "prefetched", "p", 5);
  let release;
  const released = new Promise((r) => (release = r));
  const started = [];
  const l = loop(
    c,
    "prefetched",
    async (m) => {
      started.push(m.key);
      await released;
    },
    { prefetch: 10, visibility_ms: 60_000 },
  );
  await waitFor("all five held", 20_000, async () => started.length === 1 && (await c.queue("prefetched")).in_flight === 5);
  const stopped = l.stop();
  await pause(100);
  release();
  await stopped;
  assert.equal(started.length, 1);
  const d = await c.queue("prefetched");
  assert.deepEqual([d.in_flight, d.ready], [0, 4], JSON.stringify(d));
});

test("a rate-limited receive is followed by the next only after its Retry-After", async () => {
  const log = []; // [when, "request" or the status, path, Retry-After]
  const recording = async (url, init) => {
    const path = new URL(url).pathname;
    log.push([Date.now(), "request", path]);
    const r = await fetch(url, init);
    log.push([Date.now(), r.status, path, r.headers.get("retry-after")]);
    return r;
  };
  const c = new Client(server.url, { token: token("throttled"), fetch: recording });
  await putDue(c, "throttled", "r", 3);
  const seen = new Map();
  const limited = [];
  const l = loop(c, "throttled", (m) => void seen.set(m.key, (seen.get(m.key) ?? 0) + 1), {
    visibility_ms: 60_000,
    wait_ms: 1000,
    onError: (e) => e instanceof ApiError && e.code === "rate_limited" && limited.push(e),
  });
  await waitFor("three messages handled and a receive refused", 30_000, () => seen.size === 3 && limited.length > 0);
  await l.stop();
  assert.ok([...seen.values()].every((n) => n === 1));
  const receives = log.filter((e) => e[2].endsWith("/receive"));
  let refused = 0;
  receives.forEach(([at, what, , retryAfter], i) => {
    if (what !== 429) return;
    const next = receives.slice(i + 1).find((e) => e[1] === "request");
    if (!next) return;
    refused++;
    assert.ok(next[0] - at >= Number(retryAfter) * 1000, `Retry-After ${retryAfter} s, the next receive ${next[0] - at} ms later`);
  });
  assert.ok(refused > 0, JSON.stringify(receives));
});

test("a receive that cannot succeed ends consume with its error", async () => {
  const c = new Client(server.url, { token: ACME_TOKEN });
  await assert.rejects(c.consume("acme", () => {}), (e) => e instanceof ApiError && e.notFound);
});
