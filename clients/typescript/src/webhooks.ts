// Verification of the webhooks punctual delivers: Punctual-Signature (several secrets during
// a key rotation) and Standard Webhooks, compared in constant time, with a bound on the
// timestamp's distance from the receiver's clock.
import { createHmac, timingSafeEqual } from "node:crypto";
import { WebhookVerificationError } from "./errors.js";
import type { WebhookDelivery } from "./types.js";

export const DEFAULT_TOLERANCE_S = 300;

export interface VerifyOptions {
  /** How far the timestamp may be from now, in seconds (300). */
  toleranceS?: number;
  /** The receiver's clock, Unix seconds (now). */
  nowS?: number;
}

/** Headers as Node's http gives them, as fetch's Headers, or a plain record. */
export type HeaderSource = Headers | Record<string, string | string[] | undefined>;

/**
 * Checks a delivery's signature, Punctual-Signature or Standard Webhooks' (whichever it
 * carries), against every secret (for Standard Webhooks, those of the form whsec_<base64>: a list
 * may hold both kinds), refuses a timestamp
 * more than toleranceS from now, and returns the signed body. Throws WebhookVerificationError.
 */
export function verify(
  headers: HeaderSource,
  body: string | Uint8Array,
  secrets: string[],
  opts: VerifyOptions = {},
): WebhookDelivery {
  const get = header(headers);
  const raw = typeof body === "string" ? Buffer.from(body) : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const tolerance = opts.toleranceS ?? DEFAULT_TOLERANCE_S;
  const now = opts.nowS ?? Date.now() / 1000;
  const standard = get("webhook-signature");
  const punctual = get("punctual-signature");
  if (standard) verifyStandard(get, standard, raw, secrets, tolerance, now);
  else if (punctual) verifyPunctual(punctual, raw, secrets, tolerance, now);
  else throw new WebhookVerificationError("the delivery carries no signature header");
  try {
    const d = JSON.parse(raw.toString("utf8"));
    if (typeof d?.tenant !== "string" || typeof d?.key !== "string") throw new Error("no tenant or key");
    return d as WebhookDelivery;
  } catch (e) {
    throw new WebhookVerificationError(`the signed body is not a delivery: ${(e as Error).message}`);
  }
}

/** `<tenant>/<key>/<version>`: the same in every attempt, and signed; de-duplicate on it. */
export function deliveryId(d: WebhookDelivery): string {
  return `${d.tenant}/${d.key}/${d.version}`;
}

function header(h: HeaderSource): (name: string) => string | undefined {
  if (typeof (h as Headers).get === "function") return (n) => (h as Headers).get(n) ?? undefined;
  const lower: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) lower[k.toLowerCase()] = Array.isArray(v) ? v.join(", ") : v;
  return (n) => lower[n];
}

function fresh(t: number, tolerance: number, now: number) {
  if (Math.abs(now - t) > tolerance) {
    throw new WebhookVerificationError(`the timestamp is ${Math.round(now - t)} s from now, past the tolerance of ${tolerance} s`);
  }
}

/** Compares want with every candidate, each in constant time. */
function anyEqual(want: Buffer, candidates: Buffer[]): boolean {
  let found = false;
  for (const c of candidates) if (c.length === want.length && timingSafeEqual(c, want)) found = true;
  return found;
}

function verifyPunctual(h: string, body: Buffer, secrets: string[], tolerance: number, now: number) {
  let t: number | undefined;
  const sigs: Buffer[] = [];
  for (const part of h.split(",")) {
    const [k, v = ""] = part.trim().split("=", 2);
    if (k === "t" && /^\d+$/.test(v)) t = Number(v);
    else if (k === "v1" && /^[0-9a-fA-F]*$/.test(v) && v.length % 2 === 0) sigs.push(Buffer.from(v, "hex"));
  }
  if (t === undefined || sigs.length === 0) throw new WebhookVerificationError("Punctual-Signature is malformed");
  fresh(t, tolerance, now);
  for (const s of secrets) {
    const mac = createHmac("sha256", s).update(`${t}.`).update(body).digest();
    if (anyEqual(mac, sigs)) return;
  }
  throw new WebhookVerificationError("no signature matches any of the secrets");
}

function verifyStandard(
  get: (n: string) => string | undefined,
  h: string,
  body: Buffer,
  secrets: string[],
  tolerance: number,
  now: number,
) {
  const id = get("webhook-id");
  const ts = get("webhook-timestamp");
  if (!id || !ts || !/^\d+$/.test(ts)) {
    throw new WebhookVerificationError("webhook-id or webhook-timestamp is missing or malformed");
  }
  const sigs: Buffer[] = [];
  for (const part of h.split(/\s+/)) {
    const [version, value] = part.split(",", 2);
    if (version === "v1" && value && /^[A-Za-z0-9+/]+={0,2}$/.test(value)) sigs.push(Buffer.from(value, "base64"));
  }
  if (sigs.length === 0) throw new WebhookVerificationError("webhook-signature holds no v1 signature");
  fresh(Number(ts), tolerance, now);
  let usable = 0;
  for (const s of secrets) {
    const b64 = s.startsWith("whsec_") ? s.slice(6) : s;
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) continue; // a Punctual-Signature secret, in a list of both kinds
    usable++;
    const mac = createHmac("sha256", Buffer.from(b64, "base64")).update(`${id}.${ts}.`).update(body).digest();
    if (anyEqual(mac, sigs)) return;
  }
  if (usable === 0) throw new WebhookVerificationError("no Standard Webhooks secret (whsec_<base64>) among the secrets");
  throw new WebhookVerificationError("no signature matches any of the secrets");
}
