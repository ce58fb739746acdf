import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Webhook, WebhookVerificationError as OfficialError } from "standardwebhooks";
import { Client, WebhookVerificationError, deliveryId, verify } from "punctual-client";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { ACME_TOKEN, NEW_SECRET, OLD_SECRET, STD_TOKEN, WHSEC, WHSEC_OLD, freePort, startReceiver, startServer, tenantsToml } from "./harness.mjs";

let receiver, server, examplePort;
before(async () => {
  receiver = await startReceiver();
  examplePort = await freePort();
  server = await startServer(tenantsToml(receiver, examplePort));
});
after(async () => {
  await server?.stop();
  await receiver?.close();
});

/** Schedules tenant/key due now with a callback to a receiver on Node's http that verifies
 * with secrets; the first attempt's { headers, body, delivery | error }. */
async function deliver(token, tenant, key, secrets) {
  let got;
  const arrived = new Promise((resolve) => (got = resolve));
  const hook = receiver.mount(`/hook/${tenant}/${key}`, (headers, body) => {
    try {
      got({ headers, body, d: verify(headers, body, secrets) });
      return 204;
    } catch (e) {
      got({ headers, body, d: e });
      return 401;
    }
  });
  const s = await new Client(server.url, { token }).put(tenant, key, { delay_ms: 0, callback: { url: hook }, payload: { order: key } });
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("no delivery in 20 s")), 20_000).unref());
  const r = await Promise.race([arrived, timeout]);
  if (!(r.d instanceof Error)) {
    assert.deepEqual([r.d.key, r.d.version, r.d.payload, r.d.attempt], [key, s.version, { order: key }, 1]);
  }
  return r;
}

test("Punctual-Signature verifies with either secret of a rotation", async () => {
  for (const [i, secrets] of [[OLD_SECRET], [NEW_SECRET], ["not-this-one-0123456789abcdef0123456", NEW_SECRET]].entries()) {
    const { headers, d } = await deliver(ACME_TOKEN, "acme", `rot${i}`, secrets);
    assert.ok(!(d instanceof Error), String(d));
    assert.equal(deliveryId(d), headers["idempotency-key"]);
  }
  const { d } = await deliver(ACME_TOKEN, "acme", "stale", ["stale-secret-0123456789abcdef0123456789"]);
  assert.ok(d instanceof WebhookVerificationError);
});

test("tampering, old timestamps and missing headers are refused", async () => {
  const { headers, body, d } = await deliver(ACME_TOKEN, "acme", "tamper", [NEW_SECRET]);
  assert.ok(!(d instanceof Error));
  const other = Buffer.from(body.toString().replace('"tamper"', '"tamperX"'));
  assert.throws(() => verify(headers, other, [NEW_SECRET]), /no signature matches/);
  const t = Number(headers["punctual-signature"].split(",")[0].slice(2));
  assert.throws(() => verify(headers, body, [NEW_SECRET], { nowS: t + 301 }), /tolerance/);
  assert.equal(verify(headers, body, [NEW_SECRET], { nowS: t + 299 }).key, "tamper");
  assert.throws(() => verify({}, body, [NEW_SECRET]), /no signature header/);
  assert.throws(() => verify({ "punctual-signature": "v1=00" }, body, [NEW_SECRET]), /malformed/);
  assert.equal(verify(new Headers(headers), body, [NEW_SECRET]).key, "tamper"); // fetch's Headers too
});

test("a Standard Webhooks delivery verifies here and with the official library", async () => {
  for (const secret of [WHSEC, WHSEC_OLD]) {
    const { headers, body, d } = await deliver(STD_TOKEN, "std", `s${secret.slice(-4)}`, [secret]);
    assert.ok(!(d instanceof Error), String(d));
    assert.equal(headers["webhook-id"], deliveryId(d));
    const official = new Webhook(secret);
    assert.equal(official.verify(body, headers).key, d.key);
    const tampered = Buffer.concat([body, Buffer.from(" ")]);
    assert.throws(() => official.verify(tampered, headers), OfficialError);
    assert.throws(() => verify(headers, tampered, [secret]), WebhookVerificationError);
  }
});

test("Standard Webhooks: the same verdicts as the official library on its own signatures", () => {
  const wh = new Webhook(WHSEC);
  const now = Math.floor(Date.now() / 1000);
  const body = '{"tenant":"t","key":"k","version":7,"fire_at_us":1,"fired_at_us":2,"attempt":1,"payload":{"a":[1,"é"]}}';
  const good = { "webhook-id": "t/k/7", "webhook-timestamp": String(now), "webhook-signature": wh.sign("t/k/7", new Date(now * 1000), body) };
  const variants = {
    "as signed": [good, body, WHSEC, true],
    "other id": [{ ...good, "webhook-id": "t/k/8" }, body, WHSEC, false],
    "other timestamp": [{ ...good, "webhook-timestamp": String(now + 1) }, body, WHSEC, false],
    "other body": [good, body.replace("7", "8"), WHSEC, false],
    "other secret": [good, body, WHSEC_OLD, false],
    "two signatures": [{ ...good, "webhook-signature": "v1,bm90LXRoaXMtb25l " + good["webhook-signature"] }, body, WHSEC, true],
    "old": [{ ...good, "webhook-timestamp": String(now - 400), "webhook-signature": wh.sign("t/k/7", new Date((now - 400) * 1000), body) }, body, WHSEC, false],
  };
  for (const [name, [headers, b, secret, want]] of Object.entries(variants)) {
    let official = true;
    try {
      new Webhook(secret).verify(b, headers);
    } catch {
      official = false;
    }
    let ours = true;
    try {
      verify(headers, b, [secret], { nowS: now });
    } catch {
      ours = false;
    }
    assert.equal(ours, official, name);
    assert.equal(ours, want, name);
  }
});

test("examples/receiver.ts, run as it is, verifies deliveries of both schemes and processes each once", async () => {
  const here = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
  const dir = mkdtempSync(path.join(here, ".readme-")); // inside the package: "punctual-client" resolves
  const src = readFileSync(path.join(here, "examples", "receiver.ts"), "utf8");
  const js = ts.transpileModule(src, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } });
  writeFileSync(path.join(dir, "receiver.mjs"), js.outputText);
  const child = spawn(process.execPath, [path.join(dir, "receiver.mjs"), `127.0.0.1:${examplePort}`], {
    env: { ...process.env, PUNCTUAL_WEBHOOK_SECRETS: `${OLD_SECRET},${WHSEC}` },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  try {
    for (const end = Date.now() + 10_000; ; await new Promise((r) => setTimeout(r, 20))) {
      const up = await new Promise((r) => {
        const s = net.connect(examplePort, "127.0.0.1", () => (s.end(), r(true)));
        s.on("error", () => r(false));
      });
      if (up) break;
      assert.ok(Date.now() < end, "the example did not listen");
    }
    const hook = `http://127.0.0.1:${examplePort}/hook`;
    for (const [token, tenant] of [[ACME_TOKEN, "acme"], [STD_TOKEN, "std"]]) {
      await new Client(server.url, { token }).put(tenant, "example", { delay_ms: 0, callback: { url: hook }, payload: 1 });
      const want = `timer ${tenant}/example fired (attempt 1): 1`;
      for (const end = Date.now() + 20_000; !out.includes(want); await new Promise((r) => setTimeout(r, 20))) {
        assert.ok(Date.now() < end, `no "${want}" in: ${out}`);
      }
    }
    assert.equal(out.match(/fired/g).length, 2, out);
  } finally {
    child.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});
