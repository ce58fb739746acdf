// A pull consumer's loop: receive, run the handlers, extend the leases of those still running,
// acknowledge or nack, stop cleanly.
import type { Client } from "./client.js";
import { ApiError } from "./errors.js";
import { backoff, DEFAULT_RETRY, retriable, sleep } from "./retry.js";
import type { QueueMessage, SettleResult } from "./types.js";

/** Handles one message: resolving acknowledges it, throwing (or rejecting) nacks it, ready
 * again after `nack_delay_ms`. `signal` aborts when the message's lease is lost (an extend
 * answered it expired: another consumer may have it now), not when the consumer stops: a
 * stopped consumer lets its running handlers finish. */
export type Handler = (message: QueueMessage, signal: AbortSignal) => unknown;

export interface ConsumeOptions {
  /** Handlers at once (1). A receive asks for as many messages as handlers are free. */
  concurrency?: number;
  /** Messages held leased beyond `concurrency`, waiting for a handler (0). With a prefetch a
   * receive waits until half of it is free, so that it brings a batch rather than the one
   * message a finished handler frees: fewer requests per message. Waiting messages' leases
   * are extended too; those not begun when the consumer stops are given back at once. */
  prefetch?: number;
  /** Each message's lease (30,000 ms), extended by as much again while its handler runs past
   * half of it. */
  visibility_ms?: number;
  /** A receive's long poll when no message is ready (20,000 ms, the server's most). */
  wait_ms?: number;
  /** How long a message whose handler failed waits before it is ready again (5,000 ms). */
  nack_delay_ms?: number;
  /** Stops the loop: no receive after it (one in flight is aborted, and what it leased comes
   * back when its lease ends), the running handlers finish and are settled, then it resolves. */
  signal?: AbortSignal;
  /** Observes what the loop goes on after: a handler's error, a receive it backs off from, a
   * settle that failed or a receipt no longer leased. */
  onError?: (error: Error) => void;
}

const TICK_MS = 20; // acks wait at most this long to be sent in a batch
const BATCH = 1000; // receipts per ack or extend, the server's most

interface Held {
  ends: number;
  lost: AbortController;
}

export async function consume(client: Client, tenant: string, handler: Handler, options: ConsumeOptions = {}): Promise<void> {
  const concurrency = Math.max(1, Math.floor(options.concurrency ?? 1));
  const prefetch = Math.max(0, Math.floor(options.prefetch ?? 0));
  const most = Math.min(concurrency + prefetch, BATCH);
  const low = Math.min(most, Math.max(1, Math.floor(prefetch / 2)));
  const visibility = Math.max(1, options.visibility_ms ?? 30_000);
  const wait = Math.min(20_000, Math.max(0, options.wait_ms ?? 20_000));
  const nackDelay = Math.max(0, options.nack_delay_ms ?? 5_000);
  const stop = options.signal;
  const report = (e: unknown) => options.onError?.(e instanceof Error ? e : new Error(String(e)));
  const retry = client.retry.maxDelayMs > 0 ? client.retry : DEFAULT_RETRY;

  const leases = new Map<string, Held>();
  let acks: string[] = [];
  const running = new Set<Promise<void>>();
  let free = most; // messages that may be received now
  let active = 0; // handlers running
  const waiting: (() => void)[] = []; // held messages waiting for a handler
  let wake: (() => void) | undefined;
  const onStop = () => wake?.();
  stop?.addEventListener("abort", onStop);

  async function settle(verb: "ack" | "nack" | "extend", receipts: string[], delayMs = 0): Promise<SettleResult[]> {
    try {
      const results =
        verb === "ack"
          ? await client.ack(tenant, receipts)
          : verb === "nack"
            ? await client.nack(tenant, { receipts, delay_ms: delayMs })
            : await client.extend(tenant, { receipts, visibility_ms: visibility });
      for (const r of results) {
        if (r.status !== 204) report(new ApiError(r.status, r.error?.code ?? "", `${verb} ${r.receipt}: ${r.error?.message ?? ""}`));
      }
      return results;
    } catch (e) {
      report(e); // the messages come back when their leases end
      return [];
    }
  }

  async function ackAll(): Promise<void> {
    while (acks.length > 0) {
      const batch = acks.slice(0, BATCH);
      acks = acks.slice(BATCH);
      await settle("ack", batch);
    }
  }

  async function extendDue(): Promise<void> {
    const now = Date.now();
    const due = [...leases].filter(([, h]) => h.ends - now <= visibility / 2).map(([r]) => r).slice(0, BATCH);
    if (due.length === 0) return;
    for (const r of await settle("extend", due)) {
      const h = leases.get(r.receipt);
      if (!h) continue;
      if (r.status === 204) h.ends = now + visibility;
      else if (r.status === 404 || r.status === 409) {
        leases.delete(r.receipt);
        h.lost.abort(new ApiError(r.status, r.error?.code ?? "", "the lease was lost"));
      }
    }
  }

  let settling: Promise<void> | undefined;
  const timer = setInterval(() => {
    settling ??= (async () => {
      await extendDue();
      await ackAll();
    })().finally(() => (settling = undefined));
  }, TICK_MS);

  async function run(m: QueueMessage, held: Held): Promise<void> {
    if (active < concurrency) active++;
    else await new Promise<void>((resolve) => waiting.push(resolve)); // handed a handler's place
    try {
      if (stop?.aborted) {
        // prefetched, not begun: given back
        leases.delete(m.receipt);
        await settle("nack", [m.receipt]);
        return;
      }
      await handler(m, held.lost.signal);
      leases.delete(m.receipt);
      acks.push(m.receipt);
    } catch (e) {
      leases.delete(m.receipt);
      report(e);
      await settle("nack", [m.receipt], nackDelay);
    } finally {
      const next = waiting.shift();
      if (next) next();
      else active--;
      free++;
      wake?.();
    }
  }

  let failures = 0;
  let error: unknown;
  try {
    while (!stop?.aborted) {
      if (free < low) {
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
        continue;
      }
      const n = Math.min(free, BATCH);
      free -= n;
      const sent = Date.now();
      let messages: QueueMessage[];
      try {
        messages = await client.receive(
          tenant,
          { max: n, wait_ms: wait, visibility_ms: visibility },
          { signal: stop, timeoutMs: wait + 30_000 },
        );
      } catch (e) {
        free += n;
        if (stop?.aborted) break;
        if (!retriable(e)) {
          error = e;
          break;
        }
        failures++;
        report(e);
        try {
          await sleep(backoff(retry, Math.min(failures, 30), e instanceof ApiError ? e.retryAfterMs : undefined), stop);
        } catch {
          break; // stopped
        }
        continue;
      }
      failures = 0;
      free += n - messages.length;
      if (stop?.aborted) {
        // received as it stopped: given back at once
        if (messages.length > 0) await settle("nack", messages.map((m) => m.receipt));
        free += messages.length;
        break;
      }
      // The leases began between the request and its answer: reckoned from a second before
      // the answer (from the request when it came sooner), an extend comes early, not late.
      const began = Math.max(sent, Date.now() - 1000);
      for (const m of messages) {
        const held = { ends: began + visibility, lost: new AbortController() };
        leases.set(m.receipt, held);
        const p = run(m, held);
        running.add(p);
        void p.then(() => running.delete(p));
      }
    }
  } finally {
    stop?.removeEventListener("abort", onStop);
    while (running.size > 0) await Promise.all([...running]);
    clearInterval(timer);
    await settling;
    await ackAll();
  }
  if (error !== undefined) throw error;
}
