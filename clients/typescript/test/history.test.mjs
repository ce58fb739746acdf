// The history of fires against the real server: each fire's attempts and where it ended.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "punctual-client";
import { allow, startReceiver, startServer } from "./harness.mjs";

let receiver, open;
before(async () => {
  receiver = await startReceiver();
  open = await startServer(allow(receiver) + "retry_base_delay_ms = 50\nretry_max_delay_ms = 200\n");
});
after(async () => {
  await open?.stop();
  await receiver?.close();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("history shows attempts and outcome by key", async () => {
  // A webhook answered 503 then 204 is delivered after two attempts; one refused with 400 is
  // a dead letter after one.
  const answered = new Map();
  const hook = receiver.mount("/history", (_, body) => {
    const key = JSON.parse(body).key;
    const n = (answered.get(key) ?? 0) + 1;
    answered.set(key, n);
    if (key === "refused") return 400;
    return n === 1 ? 503 : 204;
  });
  const c = new Client(open.url);
  const versions = {};
  for (const k of ["refused", "late-ok"]) versions[k] = (await c.put("histt", k, { delay_ms: 0, callback: { url: hook } })).version;

  // The outcome is written off the fire path: wait for it.
  async function settled(key, outcome) {
    let page;
    for (const end = Date.now() + 20_000; Date.now() < end; await sleep(50)) {
      page = await c.history("histt", { key });
      if (page.entries.length === 1 && page.entries[0].outcome === outcome) break;
    }
    assert.deepEqual(page.entries.map((e) => [e.key, e.outcome]), [[key, outcome]]);
    return page.entries[0];
  }

  const ok = await settled("late-ok", "delivered");
  assert.equal(ok.version, versions["late-ok"]);
  assert.ok(ok.fired_at_us >= ok.fire_at_us);
  assert.equal(ok.lateness_us, ok.fired_at_us - ok.fire_at_us);
  assert.deepEqual(ok.attempts.map((a) => [a.status, a.error]), [[503, null], [204, null]]);
  assert.ok(ok.attempts[0].at_us <= ok.attempts[1].at_us);

  const dead = await settled("refused", "dead_lettered");
  assert.equal(dead.version, versions.refused);
  assert.deepEqual(dead.attempts.map((a) => [a.status, a.error]), [[400, null]]);

  // All the tenant's entries, one a page, through the cursor.
  const first = await c.history("histt", { limit: 1 });
  assert.equal(first.entries.length, 1);
  assert.ok(first.next);
  const second = await c.history("histt", { limit: 1, after: first.next });
  assert.deepEqual(new Set([first.entries[0].key, second.entries[0].key]), new Set(["refused", "late-ok"]));
  if (second.next !== undefined) {
    // A full last page may still name a cursor: nothing follows it.
    const rest = await c.history("histt", { after: second.next });
    assert.deepEqual(rest.entries, []);
    assert.equal(rest.next, undefined);
  }
});
