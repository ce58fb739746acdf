import { ApiError, TransportError } from "./errors.js";

/**
 * How calls that are safe to repeat are retried. The wait before attempt n+1 is a uniform draw
 * from [0, min(maxDelayMs, baseDelayMs·2^(n−1))] ("full jitter"), raised to the answer's
 * Retry-After when that is longer. No wait outlasts the call's deadline: a call whose next wait
 * would pass it throws the last error at once.
 */
export interface RetryPolicy {
  /** Every attempt, the first included; 1 turns retries off. */
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  /** Bounds each attempt, so that a server that stopped answering is tried again. */
  attemptTimeoutMs?: number;
  /** Called before each wait with the attempt that failed (1 for the first), its error and the wait. */
  onRetry?: (attempt: number, error: Error, waitMs: number) => void;
}

export const DEFAULT_RETRY: RetryPolicy = {
  maxAttempts: 5,
  baseDelayMs: 100,
  maxDelayMs: 5000,
  attemptTimeoutMs: 10_000,
};

export const NO_RETRY: RetryPolicy = { maxAttempts: 1, baseDelayMs: 0, maxDelayMs: 0 };

export function backoff(p: RetryPolicy, attempt: number, retryAfterMs?: number): number {
  const ceiling = Math.min(p.maxDelayMs, p.baseDelayMs * 2 ** Math.min(attempt - 1, 32));
  const wait = ceiling > 0 ? Math.random() * ceiling : 0;
  return Math.max(wait, retryAfterMs ?? 0);
}

/**
 * Whether a failed attempt may be made again: the server did not take it (503, 429
 * rate_limited, 408) or the transport failed. quota_exceeded is not retried: a quota frees
 * itself only when the tenant's timers fire or are cancelled, which no wait brings about.
 */
export function retriable(e: unknown): boolean {
  if (e instanceof ApiError) {
    return e.status === 503 || e.status === 408 || (e.status === 429 && e.code === "rate_limited");
  }
  return e instanceof TransportError;
}

export function parseRetryAfter(v: string | null): number | undefined {
  if (!v) return undefined;
  if (/^\s*\d+\s*$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** Resolves after ms, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * A signal that aborts when any of `parents` does, or after `timeoutMs` (its reason then a
 * TimeoutError). `done()` removes its listeners and clears its timer, so that a call that
 * ended leaves nothing behind (AbortSignal.timeout's timers stay until they fire).
 */
export function linkedSignal(
  parents: (AbortSignal | undefined)[],
  timeoutMs?: number,
): { signal: AbortSignal; done: () => void } {
  const c = new AbortController();
  const listeners: [AbortSignal, () => void][] = [];
  for (const s of parents) {
    if (!s) continue;
    if (s.aborted) {
      c.abort(s.reason);
      break;
    }
    const l = () => c.abort(s.reason);
    s.addEventListener("abort", l, { once: true });
    listeners.push([s, l]);
  }
  const timer =
    timeoutMs === undefined || c.signal.aborted
      ? undefined
      : setTimeout(() => c.abort(new DOMException("the time ran out", "TimeoutError")), timeoutMs);
  return {
    signal: c.signal,
    done: () => {
      clearTimeout(timer);
      for (const [s, l] of listeners) s.removeEventListener("abort", l);
    },
  };
}
