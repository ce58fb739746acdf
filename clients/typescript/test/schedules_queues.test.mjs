// Recurring schedules and pull queues against the real server.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ApiError, Client } from "punctual-client";
import { ACME_TOKEN, startServer } from "./harness.mjs";

const QUEUE_TOKEN = "queue-token-0123456789abcdef0123456789a";

let server;
before(async () => {
  server = await startServer(`
[tenants.shop]
token = "${QUEUE_TOKEN}"
queue = true
queue_max_receives = 3
[tenants.acme]
token = "${ACME_TOKEN}"
`);
});
after(async () => {
  await server?.stop();
});

async function rejects(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("resolved where it should reject");
}

test("schedule put, get with next, pause, resume, list, delete round trip", async () => {
  const c = new Client(server.url, { token: QUEUE_TOKEN });
  const start = new Date(Date.UTC(2030, 0, 1, 0, 0, 0));
  const spec = {
    cron: "30 2 * * *",
    time_zone: "America/New_York",
    start_at: start,
    catch_up: { policy: "latest", window_ms: 3_600_000 },
    dst: { gap: "shift", overlap: "first" },
    payload: { job: "reconcile" },
  };
  const made = await c.putSchedule("shop", "nightly", spec);
  assert.equal(made.created, true);
  assert.equal(made.tenant, "shop");
  assert.equal(made.key, "nightly");
  assert.equal(made.paused, false);
  assert.equal(made.sequence, 0);
  assert.equal(made.definition.cron, "30 2 * * *");
  assert.equal(made.definition.start_at, start.toISOString(), "a Date is sent as RFC 3339");
  assert.deepEqual(made.definition.payload, { job: "reconcile" });

  const got = await c.getSchedule("shop", "nightly", { next: 3 });
  assert.equal(got.next.length, 3);
  // 02:30 in New York, EST (UTC-5) in January: 07:30 UTC, a day apart.
  const first = Date.UTC(2030, 0, 1, 7, 30) * 1000;
  assert.deepEqual(
    got.next.map((o) => o.occurrence_us),
    [first, first + 86_400_000_000, first + 2 * 86_400_000_000],
  );
  assert.equal(got.next[0].local, "2030-01-01T02:30:00-05:00");
  assert.equal((await c.getSchedule("shop", "nightly")).next.length, 5, "5 by default");

  const replaced = await c.putSchedule("shop", "nightly", { ...spec, payload: { job: "reconcile", v: 2 } });
  assert.equal(replaced.created, false);
  assert.notEqual(replaced.version, made.version);

  const paused = await c.pauseSchedule("shop", "nightly");
  assert.equal(paused.paused, true);
  assert.equal((await c.getSchedule("shop", "nightly")).paused, true);
  const resumed = await c.resumeSchedule("shop", "nightly");
  assert.equal(resumed.paused, false);

  await c.putSchedule("shop", "hourly", { every_ms: 3_600_000 });
  const page = await c.listSchedules("shop", { limit: 1 });
  assert.deepEqual(page.schedules.map((s) => s.key), ["hourly"]);
  assert.equal(page.next, "hourly");
  const rest = await c.listSchedules("shop", { after: page.next });
  assert.deepEqual(rest.schedules.map((s) => [s.key, s.paused]), [["nightly", false]]);
  assert.equal(rest.next, null);

  await c.deleteSchedule("shop", "nightly");
  await c.deleteSchedule("shop", "hourly");
  const gone = await rejects(c.getSchedule("shop", "nightly"));
  assert.ok(gone instanceof ApiError && gone.status === 404, String(gone));
  const again = await rejects(c.deleteSchedule("shop", "nightly"));
  assert.ok(again instanceof ApiError && again.status === 404, String(again));
});

test("a definition that cannot fire is an ApiError naming the field", async () => {
  const c = new Client(server.url, { token: QUEUE_TOKEN });
  const e = await rejects(c.putSchedule("shop", "never", { cron: "0 0 30 2 *" }));
  assert.ok(e instanceof ApiError, String(e));
  assert.equal(e.status, 400);
  assert.equal(e.code, "invalid_field");
  assert.match(e.detail, /^cron/);
});

test("queue receive, extend, nack, receive again, ack round trip", async () => {
  const c = new Client(server.url, { token: QUEUE_TOKEN });
  const s = await c.put("shop", "order-1", { delay_ms: 1, payload: { order: 1 } });
  const msgs = await c.receive("shop", { max: 10, wait_ms: 10_000, visibility_ms: 30_000 });
  assert.equal(msgs.length, 1);
  const [m] = msgs;
  assert.equal(m.key, "order-1");
  assert.equal(m.version, s.version);
  assert.equal(m.receive_count, 1);
  assert.deepEqual(m.payload, { order: 1 });
  assert.ok(m.fired_at_us >= m.fire_at_us);

  const depth = await c.queue("shop");
  assert.equal(depth.tenant, "shop");
  assert.equal(depth.in_flight, 1);
  assert.equal(depth.depth, 0);
  assert.equal(depth.oldest_age_ms, null);
  assert.equal(depth.max_receives, 3);

  assert.deepEqual(await c.extend("shop", { receipts: [m.receipt], visibility_ms: 60_000 }), [{ receipt: m.receipt, status: 204 }]);
  assert.deepEqual(await c.nack("shop", { receipts: [m.receipt] }), [{ receipt: m.receipt, status: 204 }]);
  const second = await c.receive("shop", { max: 1, wait_ms: 10_000, visibility_ms: 1 });
  assert.deepEqual(second.map((x) => [x.key, x.receive_count]), [["order-1", 2]]);
  // That lease ended within 1 ms: the message is ready again, received a third time.
  await new Promise((r) => setTimeout(r, 20));
  const [again] = await c.receive("shop", { wait_ms: 10_000 });
  assert.equal(again.key, "order-1");
  assert.equal(again.receive_count, 3);

  const stale = await c.ack("shop", [m.receipt]);
  assert.equal(stale[0].status, 409);
  assert.equal(stale[0].error.code, "lease_expired");
  assert.deepEqual(await c.ack("shop", [again.receipt]), [{ receipt: again.receipt, status: 204 }]);
  assert.deepEqual(await c.receive("shop", { wait_ms: 100 }), [], "an acknowledged message never comes back");
  const none = await rejects(c.get("shop", "order-1"));
  assert.ok(none instanceof ApiError && none.status === 404, String(none));
  assert.equal((await c.queue("shop")).in_flight, 0);
});

test("a long poll outlasts the attempt timeout: an empty list once wait_ms passes", async () => {
  const c = new Client(server.url, { token: QUEUE_TOKEN, retry: { attemptTimeoutMs: 200 } });
  const t0 = Date.now();
  assert.deepEqual(await c.receive("shop", { wait_ms: 800 }), []);
  assert.ok(Date.now() - t0 >= 800, "the server held the receive for wait_ms");
});

test("a tenant without a queue is not_found", async () => {
  const c = new Client(server.url, { token: ACME_TOKEN });
  const e = await rejects(c.receive("acme"));
  assert.ok(e instanceof ApiError, String(e));
  assert.equal(e.status, 404);
  assert.equal(e.code, "not_found");
});
