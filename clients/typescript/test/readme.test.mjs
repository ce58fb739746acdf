// The README's quick start and the receiver example are type-checked against the client's
// declarations, and the quick start runs, as it is, against the test server (PUNCTUAL_URL).
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { startServer } from "./harness.mjs";

const HERE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const block = /```ts\n([\s\S]*?)```/.exec(readFileSync(path.join(HERE, "README.md"), "utf8"))?.[1];

let server, dir;
before(async () => {
  server = await startServer("");
  // Inside the package, so that "punctual-client" resolves to it (its exports).
  dir = mkdtempSync(path.join(HERE, ".readme-"));
});
after(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the quick start and the receiver type-check", () => {
  assert.ok(block, "README.md has no ```ts block");
  const quick = path.join(dir, "quickstart.ts");
  writeFileSync(quick, block);
  const options = {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext, types: ["node"], skipLibCheck: true,
  };
  const program = ts.createProgram([quick, path.join(HERE, "examples", "receiver.ts")], options);
  const errors = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  assert.deepEqual(errors, []);
});

test("the quick start runs", async () => {
  const js = ts.transpileModule(block, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } });
  const file = path.join(dir, "quickstart.mjs");
  writeFileSync(file, js.outputText);
  process.env.PUNCTUAL_URL = server.url;
  const lines = [];
  const log = console.log;
  console.log = (...a) => lines.push(a.join(" "));
  try {
    await import(file);
  } finally {
    console.log = log;
  }
  assert.match(lines.join("\n"), /^created: true version: \d+$/);
});
