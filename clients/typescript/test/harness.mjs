// The real punctual binary on free ports for the tests: PUNCTUAL_BIN, else the repository's
// target/release/punctual, built first (cargo build --release --locked).
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export const ACME_TOKEN = "acme-token-0123456789abcdef0123456789";
export const STD_TOKEN = "std-token-0123456789abcdef0123456789ab";
export const SLOW_TOKEN = "slow-token-0123456789abcdef0123456789ab";
export const QUOTA_TOKEN = "quota-token-0123456789abcdef0123456789a";
export const NEW_SECRET = "rotation-new-0123456789abcdef0123456789";
export const OLD_SECRET = "rotation-old-0123456789abcdef0123456789";
export const WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
export const WHSEC_OLD = "whsec_dGhpcy1pcy10aGUtb2xkLWtleS0wMTIzNDU2Nzg5";

let bin;
export function binary() {
  if (!bin) {
    bin = process.env.PUNCTUAL_BIN;
    if (!bin) {
      execFileSync("cargo", ["build", "--release", "--locked", "--bin", "punctual"], { cwd: ROOT, stdio: "ignore" });
      bin = path.join(ROOT, "target", "release", "punctual");
    }
  }
  return bin;
}

// Abstract sockets claiming the ports given out, held while the process lives: the
// repository's Rust tests claim theirs the same way (tests/support/ports.rs), so no two tests
// running side by side get one port.
async function listen(server, opts) {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

export async function freePort() {
  for (let i = 0; i < 1000; i++) {
    const probe = net.createServer();
    await listen(probe, { host: "127.0.0.1", port: 0 });
    const port = probe.address().port;
    await new Promise((r) => probe.close(r));
    const claim = net.createServer();
    try {
      await listen(claim, { path: `\0punctual-test-port-${port}` });
      claim.unref();
      return port;
    } catch {
      // claimed by another test
    }
  }
  throw new Error("no unclaimed port in 1,000 binds of port 0");
}

export class Proc {
  constructor(argv, url, dir) {
    this.dir = dir;
    const log = openSync(path.join(dir, "log"), "w");
    this.child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", log, log] });
    this.url = url;
  }

  /** Sends sig; after SIGSTOP, waits until every thread of the process is stopped. */
  async signal(sig) {
    this.child.kill(sig);
    if (sig !== "SIGSTOP") return;
    const end = Date.now() + 10_000;
    while (Date.now() < end) {
      const dir = `/proc/${this.child.pid}/task`;
      const states = readdirSync(dir).map((t) => readFileSync(`${dir}/${t}/stat`, "utf8").split(")").pop().trim()[0]);
      if (states.length > 0 && states.every((s) => s === "T")) return;
      await new Promise((r) => setTimeout(r, 5));
    }
    throw new Error("the process's threads did not all stop within 10 s");
  }

  async stop() {
    this.child.kill("SIGCONT");
    const exited = new Promise((r) => this.child.once("exit", r));
    this.child.kill("SIGTERM");
    const t = setTimeout(() => this.child.kill("SIGKILL"), 15_000);
    if (this.child.exitCode === null && this.child.signalCode === null) await exited;
    clearTimeout(t);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** `punctual serve` on a free port, toml as its configuration, a journal in a temporary
 * directory (unless args name --redis); waits for /healthz 200. */
export async function startServer(toml, ...args) {
  const dir = mkdtempSync(path.join(tmpdir(), "punctual-ts-client-"));
  const config = path.join(dir, "punctual.toml");
  writeFileSync(config, toml);
  const port = await freePort();
  const argv = [binary(), "serve", "--listen", `127.0.0.1:${port}`, "--config", config, "--shards", "2",
    "--pinning", "none", "--spin-us", "0", "--shard-capacity", "100000"];
  if (!args.includes("--redis")) {
    argv.push("--store", "journal", "--data-dir", path.join(dir, "journal"), "--fsync", "everysec");
  }
  const p = new Proc([...argv, ...args], `http://127.0.0.1:${port}`, dir);
  const end = Date.now() + 30_000;
  while (Date.now() < end) {
    try {
      const r = await fetch(p.url + "/healthz");
      await r.text();
      if (r.status === 200) return p;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  await p.stop();
  throw new Error("punctual did not answer /healthz 200 within 30 s");
}

export async function startRedis() {
  const dir = mkdtempSync(path.join(tmpdir(), "punctual-ts-redis-"));
  const port = await freePort();
  const p = new Proc(["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
    "--dir", dir], `redis://127.0.0.1:${port}`, dir);
  const end = Date.now() + 10_000;
  while (Date.now() < end) {
    const ok = await new Promise((r) => {
      const s = net.connect(port, "127.0.0.1", () => (s.end(), r(true)));
      s.on("error", () => r(false));
    });
    if (ok) return p;
    await new Promise((r) => setTimeout(r, 20));
  }
  await p.stop();
  throw new Error("redis-server did not listen within 10 s");
}

/** The tests' webhook endpoint on Node's http: each test mounts a handler (headers, body) →
 * status under a path of its own. */
export async function startReceiver() {
  const handlers = new Map();
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const h = handlers.get(req.url);
      res.writeHead(h ? h(req.headers, Buffer.concat(chunks)) : 404).end();
    });
  });
  await listen(server, { host: "127.0.0.1", port: await freePort() });
  const base = `http://127.0.0.1:${server.address().port}`;
  return {
    base,
    mount: (p, h) => (handlers.set(p, h), base + p),
    close: () => (server.closeAllConnections(), new Promise((r) => server.close(r))),
  };
}

/** allow(receiver, extraPort): callbacks may go to the receiver (and to 127.0.0.1:extraPort). */
export function allow(receiver, extraPort) {
  const extra = extraPort ? `, "http://127.0.0.1:${extraPort}/"` : "";
  return `callback_allow = ["${receiver.base}/"${extra}]\ncallback_allow_networks = ["127.0.0.1/32"]\n`;
}

export function tenantsToml(receiver, extraPort) {
  return allow(receiver, extraPort) + `
[tenants.acme]
token = "${ACME_TOKEN}"
webhook_secrets = ["${NEW_SECRET}", "${OLD_SECRET}"]
[tenants.std]
token = "${STD_TOKEN}"
webhook_signature = "standard"
webhook_secrets = ["${WHSEC}", "${WHSEC_OLD}"]
[tenants.slow]
token = "${SLOW_TOKEN}"
max_requests_per_s = 1
burst = 1
[tenants.capped]
token = "${QUOTA_TOKEN}"
max_pending = 2
`;
}
