import { consume, type ConsumeOptions, type Handler } from "./consume.js";
import { ApiError, PunctualError, TransportError } from "./errors.js";
import { backoff, DEFAULT_RETRY, parseRetryAfter, retriable, RetryPolicy, sleep, linkedSignal } from "./retry.js";
import type {
  Action,
  ActionStarted,
  CancelOptions,
  CancelPrefixOptions,
  BatchItem,
  BatchResult,
  ClusterStatus,
  DeadLetter,
  DeadListOptions,
  ExtendRequest,
  GetScheduleOptions,
  Health,
  HistoryOptions,
  HistoryPage,
  ListOptions,
  NackRequest,
  PendingTimer,
  QueueDepth,
  QueueMessage,
  ReceiveOptions,
  RecurringSchedule,
  Scheduled,
  ScheduleListOptions,
  SchedulePage,
  ScheduleSpec,
  SettleResult,
  TimerPage,
  TimerSpec,
} from "./types.js";

export interface ClientOptions {
  /** Sent as "Authorization: Bearer <token>" on the tenant routes (/v1/...). */
  token?: string;
  /** Sent to /metrics and /cluster, for a server run with metrics_token. */
  metricsToken?: string;
  /** Replaces fields of DEFAULT_RETRY. */
  retry?: Partial<RetryPolicy>;
  /** Milliseconds for a whole call, retries included, when the call names none (30,000;
   * Infinity for none). */
  timeoutMs?: number;
  /** The fetch to use (the global one by default). */
  fetch?: typeof fetch;
}

/** Per call: a signal that cancels it, and its deadline in milliseconds (retries included). */
export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

interface Call<T> {
  method: string;
  path: string;
  query?: Record<string, string>;
  body?: unknown;
  /** Safe to repeat: retried under the policy. */
  safe?: boolean;
  metrics?: boolean;
  /** Reads every answer, not only a 2xx (and throws what it does not read). */
  readsErrors?: boolean;
  /** Milliseconds the server may hold the request on purpose (a receive's long poll): added
   * to the attempt's timeout. */
  holdMs?: number;
  read: (status: number, text: string, headers: Headers) => T;
}

const seg = encodeURIComponent;

/** A client of one punctual server, on fetch; connections are kept alive between calls. */
export class Client {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  private readonly token?: string;
  private readonly metricsToken?: string;
  private readonly timeoutMs?: number;
  private readonly fetch: typeof fetch;

  constructor(baseUrl: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.token = options.token;
    this.metricsToken = options.metricsToken;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /** Schedules `timer` under (tenant, key), replacing the one pending there (an upsert, so it
   * is retried). `created` says whether none was pending. */
  put(tenant: string, key: string, timer: TimerSpec, opts?: CallOptions): Promise<Scheduled> {
    return this.run(
      {
        method: "PUT",
        path: `/v1/timers/${seg(tenant)}/${seg(key)}`,
        body: timerBody(timer),
        safe: true,
        read: (status, text) => ({ ...JSON.parse(text), created: status === 201 }),
      },
      opts,
    );
  }

  /** The timer pending under (tenant, key); ApiError not_found when none is. */
  get(tenant: string, key: string, opts?: CallOptions): Promise<PendingTimer> {
    return this.run({ method: "GET", path: `/v1/timers/${seg(tenant)}/${seg(key)}`, safe: true, read: json }, opts);
  }

  /** Cancels the pending timer; ApiError not_found when nothing is pending (fired, cancelled,
   * or removed by an earlier attempt of this call whose answer was lost). */
  cancel(tenant: string, key: string, opts?: CallOptions): Promise<void> {
    return this.run({ method: "DELETE", path: `/v1/timers/${seg(tenant)}/${seg(key)}`, safe: true, read: none }, opts);
  }

  /** Cancels the pending timer only if its version is `query.if_version` (any, when left
   * out): another is ApiError `version_mismatch` (`conflict`), nothing cancelled. */
  cancelIf(tenant: string, key: string, query: CancelOptions, opts?: CallOptions): Promise<void> {
    const q: Record<string, string> = {};
    if (query.if_version !== undefined) q.if_version = String(query.if_version);
    return this.run(
      { method: "DELETE", path: `/v1/timers/${seg(tenant)}/${seg(key)}`, query: q, safe: true, read: none },
      opts,
    );
  }

  /** Schedules up to 10,000 timers in order; each item fails alone (its result's `error`). */
  batch(tenant: string, items: BatchItem[], opts?: CallOptions): Promise<BatchResult[]> {
    const timers = items.map(({ key, ...t }) => ({ key, ...timerBody(t) }));
    return this.run(
      {
        method: "POST",
        path: `/v1/timers/${seg(tenant)}`,
        body: { timers },
        safe: true,
        read: (_, text) => JSON.parse(text).results,
      },
      opts,
    );
  }

  /** One page of the tenant's pending timers whose key starts with `query.prefix`, by key;
   * the next page is after the page's `next` (left out on the last page). */
  list(tenant: string, query: ListOptions = {}, opts?: CallOptions): Promise<TimerPage> {
    const q: Record<string, string> = {};
    if (query.prefix) q.prefix = query.prefix;
    if (query.after !== undefined) q.after = query.after;
    if (query.limit !== undefined) q.limit = String(query.limit);
    if (query.payloads) q.payloads = "true";
    return this.run({ method: "GET", path: `/v1/timers/${seg(tenant)}`, query: q, safe: true, read: json }, opts);
  }

  /** Starts a bulk cancel of the tenant's pending timers whose key starts with
   * `query.prefix` (an empty prefix needs `all`) and resolves to the action's id at once;
   * `action` reads its progress. Never retried: a second call is a second action. */
  cancelPrefix(tenant: string, query: CancelPrefixOptions, opts?: CallOptions): Promise<string> {
    const q: Record<string, string> = {};
    if (query.prefix) q.prefix = query.prefix;
    if (query.all) q.all = "true";
    return this.run(
      {
        method: "DELETE",
        path: `/v1/timers/${seg(tenant)}`,
        query: q,
        read: (_, text) => (JSON.parse(text) as ActionStarted).id,
      },
      opts,
    );
  }

  /** A bulk cancel's progress; ApiError `notFound` for an unknown action (a restart forgets
   * every action, and each tenant keeps its last 64). */
  action(tenant: string, id: string, opts?: CallOptions): Promise<Action> {
    return this.run({ method: "GET", path: `/v1/actions/${seg(tenant)}/${seg(id)}`, safe: true, read: json }, opts);
  }

  /** One page of the tenant's dead letters by key; the next page is after the last key. */
  deadLetters(tenant: string, query: DeadListOptions = {}, opts?: CallOptions): Promise<DeadLetter[]> {
    const q: Record<string, string> = {};
    if (query.limit !== undefined) q.limit = String(query.limit);
    if (query.after !== undefined) q.after = query.after;
    return this.run(
      { method: "GET", path: `/v1/dead/${seg(tenant)}`, query: q, safe: true, read: (_, text) => JSON.parse(text).dead },
      opts,
    );
  }

  /** One page of what became of the tenant's recent fires (only `query.key`'s when given),
   * newest first: each entry's attempts and outcome; the next page is after the page's `next`
   * (left out on the last page). ApiError not_implemented where the server keeps no history. */
  history(tenant: string, query: HistoryOptions = {}, opts?: CallOptions): Promise<HistoryPage> {
    const q: Record<string, string> = {};
    if (query.key !== undefined) q.key = query.key;
    if (query.limit !== undefined) q.limit = String(query.limit);
    if (query.after !== undefined) q.after = query.after;
    return this.run({ method: "GET", path: `/v1/history/${seg(tenant)}`, query: q, safe: true, read: json }, opts);
  }

  /** Delivers the dead letter again now. Never retried: an attempt whose answer was lost may
   * have re-driven it. 409 timer_pending while a timer is pending under the key. */
  redrive(tenant: string, key: string, opts?: CallOptions): Promise<Omit<Scheduled, "created">> {
    return this.run({ method: "POST", path: `/v1/dead/${seg(tenant)}/${seg(key)}/retry`, read: json }, opts);
  }

  /** Removes the dead letter; ApiError not_found when there is none. */
  discard(tenant: string, key: string, opts?: CallOptions): Promise<void> {
    return this.run({ method: "DELETE", path: `/v1/dead/${seg(tenant)}/${seg(key)}`, safe: true, read: none }, opts);
  }

  /** Creates or replaces the recurring schedule under (tenant, key) (an upsert, so it is
   * retried). A replacement keeps the schedule's `sequence`, its pause and what it has spent;
   * `created` says whether none was there. */
  putSchedule(tenant: string, key: string, schedule: ScheduleSpec, opts?: CallOptions): Promise<RecurringSchedule> {
    return this.run(
      {
        method: "PUT",
        path: `/v1/schedules/${seg(tenant)}/${seg(key)}`,
        body: scheduleBody(schedule),
        safe: true,
        read: (status, text) => ({ ...JSON.parse(text), created: status === 201 }),
      },
      opts,
    );
  }

  /** The schedule, where it stands, and its next `query.next` occurrences (5 by default);
   * ApiError not_found when there is none. */
  getSchedule(tenant: string, key: string, query: GetScheduleOptions = {}, opts?: CallOptions): Promise<RecurringSchedule> {
    const q: Record<string, string> = {};
    if (query.next !== undefined) q.next = String(query.next);
    return this.run(
      { method: "GET", path: `/v1/schedules/${seg(tenant)}/${seg(key)}`, query: q, safe: true, read: json },
      opts,
    );
  }

  /** Removes the schedule: no occurrence due after the answer fires. ApiError not_found when
   * there is none (or an earlier attempt of this call, whose answer was lost, removed it). */
  deleteSchedule(tenant: string, key: string, opts?: CallOptions): Promise<void> {
    return this.run({ method: "DELETE", path: `/v1/schedules/${seg(tenant)}/${seg(key)}`, safe: true, read: none }, opts);
  }

  /** Pauses the schedule (no occurrence due after the answer fires); pausing a paused one
   * changes nothing, so it is retried. */
  pauseSchedule(tenant: string, key: string, opts?: CallOptions): Promise<RecurringSchedule> {
    return this.run(
      { method: "POST", path: `/v1/schedules/${seg(tenant)}/${seg(key)}/pause`, safe: true, read: json },
      opts,
    );
  }

  /** Resumes the schedule: what it missed while paused fires under its `catch_up` policy. */
  resumeSchedule(tenant: string, key: string, opts?: CallOptions): Promise<RecurringSchedule> {
    return this.run(
      { method: "POST", path: `/v1/schedules/${seg(tenant)}/${seg(key)}/resume`, safe: true, read: json },
      opts,
    );
  }

  /** One page of the tenant's schedules by key; the next page is after the page's `next`
   * (null on the last). */
  listSchedules(tenant: string, query: ScheduleListOptions = {}, opts?: CallOptions): Promise<SchedulePage> {
    const q: Record<string, string> = {};
    if (query.limit !== undefined) q.limit = String(query.limit);
    if (query.after !== undefined) q.after = query.after;
    return this.run({ method: "GET", path: `/v1/schedules/${seg(tenant)}`, query: q, safe: true, read: json }, opts);
  }

  /** Leases up to `options.max` ready messages of the tenant's pull queue, waiting up to
   * `options.wait_ms` for the first; an empty list when none became ready. Never retried: the
   * messages an attempt whose answer was lost leased come back when their lease ends. The
   * attempt's timeout (`attemptTimeoutMs`) counts from the end of `wait_ms`; the call's
   * `timeoutMs` (30 s by default) bounds the whole wait. */
  receive(tenant: string, options: ReceiveOptions = {}, opts?: CallOptions): Promise<QueueMessage[]> {
    const body: Record<string, number> = {};
    if (options.max !== undefined) body.max = options.max;
    if (options.wait_ms !== undefined) body.wait_ms = options.wait_ms;
    if (options.visibility_ms !== undefined) body.visibility_ms = options.visibility_ms;
    return this.run(
      {
        method: "POST",
        path: `/v1/queues/${seg(tenant)}/receive`,
        body,
        holdMs: options.wait_ms,
        read: (_, text) => JSON.parse(text).messages,
      },
      opts,
    );
  }

  /** Acknowledges received messages: each gone for good once its result is `204`. One result
   * per receipt, in order. Retried: a receipt an attempt whose answer was lost acknowledged
   * reads `409 lease_expired` on the retry. */
  ack(tenant: string, receipts: string[], opts?: CallOptions): Promise<SettleResult[]> {
    return this.settle(tenant, "ack", { receipts }, opts);
  }

  /** Gives received messages back, ready after `request.delay_ms` (0 by default); a message on
   * its last receive becomes a dead letter. One result per receipt, in order; retried as
   * `ack`. */
  nack(tenant: string, request: NackRequest, opts?: CallOptions): Promise<SettleResult[]> {
    const body: Record<string, unknown> = { receipts: request.receipts };
    if (request.delay_ms !== undefined) body.delay_ms = request.delay_ms;
    return this.settle(tenant, "nack", body, opts);
  }

  /** Each lease now ends `request.visibility_ms` from now; the receipts stay valid. One result
   * per receipt, in order. */
  extend(tenant: string, request: ExtendRequest, opts?: CallOptions): Promise<SettleResult[]> {
    return this.settle(tenant, "extend", { receipts: request.receipts, visibility_ms: request.visibility_ms }, opts);
  }

  /** The tenant's pull queue counted on every shard (for monitoring, not for a loop);
   * ApiError not_found for a tenant without a queue. */
  queue(tenant: string, opts?: CallOptions): Promise<QueueDepth> {
    return this.run({ method: "GET", path: `/v1/queues/${seg(tenant)}`, safe: true, read: json }, opts);
  }

  /** A pull consumer's loop until `options.signal` aborts: long-polled receives for as many
   * messages as handlers are free (up to `concurrency`), each lease extended at half its
   * `visibility_ms` while its handler runs, acks in batches, a nack with `nack_delay_ms` when a
   * handler throws. A receive is never repeated: after a 503, 429 rate_limited, 408 or no
   * answer it waits (the retry backoff, at least Retry-After) and receives anew, and what a
   * lost answer leased comes back when its lease ends; any other ApiError ends the loop and
   * rejects. On abort it receives no more, lets the running handlers finish, settles their
   * messages and resolves. */
  consume(tenant: string, handler: Handler, options?: ConsumeOptions): Promise<void> {
    return consume(this, tenant, handler, options);
  }

  private settle(tenant: string, verb: string, body: Record<string, unknown>, opts?: CallOptions): Promise<SettleResult[]> {
    return this.run(
      {
        method: "POST",
        path: `/v1/queues/${seg(tenant)}/${verb}`,
        body,
        safe: true,
        read: (_, text) => JSON.parse(text).results,
      },
      opts,
    );
  }

  /** /healthz, not retried: a server that cannot take writes answers its Health too, with its
   * status `unavailable` or `draining` and the reason. */
  health(opts?: CallOptions): Promise<Health> {
    return this.run(
      {
        method: "GET",
        path: "/healthz",
        readsErrors: true,
        read: (status, text, headers) => {
          let body: unknown;
          try {
            body = JSON.parse(text);
          } catch {
            body = undefined;
          }
          if ((status === 200 || status === 503) && typeof body === "object" && body !== null && "status" in body) {
            return body as Health;
          }
          throw errorFrom(status, text, headers);
        },
      },
      opts,
    );
  }

  /** The OpenMetrics exposition, as text. */
  metrics(opts?: CallOptions): Promise<string> {
    return this.run({ method: "GET", path: "/metrics", safe: true, metrics: true, read: (_, text) => text }, opts);
  }

  /** /cluster on a node of a Redis Cluster fleet; ApiError not_found elsewhere. */
  cluster(opts?: CallOptions): Promise<ClusterStatus> {
    return this.run({ method: "GET", path: "/cluster", safe: true, metrics: true, read: json }, opts);
  }

  private async run<T>(call: Call<T>, opts: CallOptions = {}): Promise<T> {
    const given = opts.timeoutMs ?? this.timeoutMs;
    const timeoutMs = given !== undefined && Number.isFinite(given) ? given : undefined; // Infinity: no deadline
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    const overall = linkedSignal([opts.signal], timeoutMs);
    const attempts = call.safe ? Math.max(1, this.retry.maxAttempts) : 1;
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          return await this.once(call, overall.signal, opts.signal);
        } catch (e) {
          if (overall.signal.aborted || attempt >= attempts || !retriable(e)) throw e;
          const wait = backoff(this.retry, attempt, e instanceof ApiError ? e.retryAfterMs : undefined);
          if (deadline !== undefined && Date.now() + wait >= deadline) throw e;
          this.retry.onRetry?.(attempt, e as Error, wait);
          try {
            await sleep(wait, overall.signal);
          } catch {
            throw e;
          }
        }
      }
    } finally {
      overall.done();
    }
  }

  /** One attempt. `signal` ends the call (the caller's `callerSignal` or the deadline): the
   * caller's abort rejects with its reason, the deadline with a TransportError. */
  private async once<T>(call: Call<T>, signal: AbortSignal, callerSignal?: AbortSignal): Promise<T> {
    const attemptMs = this.retry.attemptTimeoutMs ? this.retry.attemptTimeoutMs + (call.holdMs ?? 0) : undefined;
    const attempt = linkedSignal([signal], attemptMs);
    const headers: Record<string, string> = {};
    const token = call.metrics ? this.metricsToken : this.token;
    if (token) headers.authorization = `Bearer ${token}`;
    if (call.body !== undefined) headers["content-type"] = "application/json";
    let url = this.baseUrl + call.path;
    if (call.query && Object.keys(call.query).length > 0) url += "?" + new URLSearchParams(call.query).toString();
    let status: number, text: string, rh: Headers;
    try {
      const r = await this.fetch(url, {
        method: call.method,
        headers,
        body: call.body === undefined ? undefined : JSON.stringify(call.body),
        signal: attempt.signal,
      });
      status = r.status;
      rh = r.headers;
      text = await r.text();
    } catch (e) {
      if (callerSignal?.aborted) throw callerSignal.reason ?? e;
      if (signal.aborted) throw new TransportError(`${call.method} ${call.path}: no answer within the call's deadline`, { cause: e });
      throw new TransportError(`${call.method} ${call.path}: ${(e as Error).message}`, { cause: e });
    } finally {
      attempt.done();
    }
    if (!call.readsErrors && (status < 200 || status >= 300)) throw errorFrom(status, text, rh);
    try {
      return call.read(status, text, rh);
    } catch (e) {
      if (e instanceof PunctualError) throw e;
      throw new PunctualError(`reading a ${status} answer: ${(e as Error).message}`, { cause: e });
    }
  }
}

function json(_: number, text: string) {
  return JSON.parse(text);
}

function none(): void {}

function errorFrom(status: number, text: string, headers: Headers): ApiError {
  const retryAfter = parseRetryAfter(headers.get("retry-after"));
  try {
    const e = JSON.parse(text).error;
    if (typeof e?.code === "string") {
      return new ApiError(status, e.code, String(e.message), retryAfter, e.version, e.fire_at_us);
    }
  } catch {
    // not the error body
  }
  return new ApiError(status, "", text.trim() || `HTTP ${status}`, retryAfter);
}

function timerBody(t: TimerSpec): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  if (t.delay_ms !== undefined) body.delay_ms = t.delay_ms;
  if (t.fire_at !== undefined) body.fire_at = t.fire_at instanceof Date ? t.fire_at.toISOString() : t.fire_at;
  if (t.fire_at_ms !== undefined) body.fire_at_ms = t.fire_at_ms;
  if (t.payload !== undefined) body.payload = t.payload;
  if (t.callback !== undefined) body.callback = t.callback;
  if (t.retry !== undefined) body.retry = t.retry;
  if (t.if !== undefined) body.if = t.if;
  if (t.if_version !== undefined) body.if_version = t.if_version;
  if (t.debounce !== undefined) body.debounce = t.debounce;
  return body;
}

function scheduleBody(s: ScheduleSpec): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const time = (t: string | Date) => (t instanceof Date ? t.toISOString() : t);
  if (s.cron !== undefined) body.cron = s.cron;
  if (s.every_ms !== undefined) body.every_ms = s.every_ms;
  if (s.time_zone !== undefined) body.time_zone = s.time_zone;
  if (s.start_at !== undefined) body.start_at = time(s.start_at);
  if (s.end_at !== undefined) body.end_at = time(s.end_at);
  if (s.max_occurrences !== undefined) body.max_occurrences = s.max_occurrences;
  if (s.catch_up !== undefined) body.catch_up = s.catch_up;
  if (s.dst !== undefined) body.dst = s.dst;
  if (s.payload !== undefined) body.payload = s.payload;
  if (s.callback !== undefined) body.callback = s.callback;
  if (s.retry !== undefined) body.retry = s.retry;
  return body;
}
