// The README's quick start, its consumer and the receiver example are type-checked against the
// client's declarations, and the first two run, as they are, against the test server
// (PUNCTUAL_URL; PUNCTUAL_QUEUE_URL and PUNCTUAL_TOKEN for a tenant with a queue).
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { startServer } from "./harness.mjs";

const HERE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const [block, consumer] = [...readFileSync(path.join(HERE, "README.md"), "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
const ORDERS_TOKEN = "orders-token-0123456789abcdef0123456789abcdef";

let server, queueServer, dir;
before(async () => {
  server = await startServer("");
  queueServer = await startServer(`[tenants.orders]\ntoken = "${ORDERS_TOKEN}"\nqueue = true\n`);
  // Inside the package, so that "punctual-client" resolves to it (its exports).
  dir = mkdtempSync(path.join(HERE, ".readme-"));
});
after(async () => {
  await server?.stop();
  await queueServer?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the quick start, the consumer and the receiver type-check", () => {
  assert.ok(block && consumer, "README.md lacks its two ```ts blocks");
  const quick = path.join(dir, "quickstart.ts");
  writeFileSync(quick, block);
  const consuming = path.join(dir, "consumer.ts");
  writeFileSync(consuming, consumer);
  const options = {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext, types: ["node"], skipLibCheck: true,
  };
  const program = ts.createProgram([quick, consuming, path.join(HERE, "examples", "receiver.ts")], options);
  const errors = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  assert.deepEqual(errors, []);
});

/** Runs a README block as a module; what it logs. */
async function run(source, name) {
  const js = ts.transpileModule(source, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } });
  const file = path.join(dir, name);
  writeFileSync(file, js.outputText);
  const lines = [];
  const log = console.log;
  console.log = (...a) => lines.push(a.join(" "));
  try {
    await import(file);
  } finally {
    console.log = log;
  }
  return lines.join("\n");
}

test("the quick start runs", async () => {
  process.env.PUNCTUAL_URL = server.url;
  assert.match(await run(block, "quickstart.mjs"), /^created: true version: \d+$/);
});

test("the consumer runs", async () => {
  process.env.PUNCTUAL_QUEUE_URL = queueServer.url;
  process.env.PUNCTUAL_TOKEN = ORDERS_TOKEN;
  assert.equal(await run(consumer, "consumer.mjs"), 'closing order-8813 {"order":8813}');
});
