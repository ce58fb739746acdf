// The API's bodies, each field named as in the JSON (docs/API.md).

/** Where a fired timer is POSTed. */
export interface Callback {
  url: string;
}

/** How punctual retries a webhook; a field left out takes the tenant's default. */
export interface DeliveryRetry {
  max_attempts?: number;
  base_delay_ms?: number;
  max_delay_ms?: number;
}

/** What to schedule: exactly one of `delay_ms`, `fire_at` (RFC 3339 or a Date) and `fire_at_ms`. */
export interface TimerSpec {
  delay_ms?: number;
  fire_at?: string | Date;
  fire_at_ms?: number;
  /** Any JSON value, at most 65,536 bytes of JSON; it comes back as sent. */
  payload?: unknown;
  callback?: Callback;
  retry?: DeliveryRetry;
  /** `"absent"`: create only; a pending timer refuses it with 409 `exists` (`ApiError.conflict`). */
  if?: "absent";
  /** Replace only the pending timer of this version: another is 409 `version_mismatch`, none
   * pending 404 `not_found`. */
  if_version?: number;
  /** Each write of the key moves its deadline, never past the burst's first arming plus
   * `max_wait_ms`. */
  debounce?: Debounce;
}

/** A burst of writes held to one deadline at most `max_wait_ms` after its first. */
export interface Debounce {
  max_wait_ms: number;
}

/** A debounced timer's burst, as `get` shows it; `cap_us` is the latest its deadline may move to. */
export interface DebounceState {
  first_at_us: number;
  max_wait_ms: number;
  cap_us: number;
}

/** One timer of a batch. */
export interface BatchItem extends TimerSpec {
  key: string;
}

/** The answer to a schedule: the deadline, and the version naming this scheduling. */
export interface Scheduled {
  tenant: string;
  key: string;
  fire_at_us: number;
  version: number;
  /** True when no timer was pending under the key (201), false when one was replaced (200). */
  created: boolean;
}

/** How far a pending webhook timer's delivery has got. */
export interface Delivery {
  state: "pending" | "in_flight" | "retrying";
  attempts: number;
  next_at_us: number;
  last_status?: number;
  last_error?: string;
}

/** A timer waiting to fire (or to be delivered). */
export interface PendingTimer {
  tenant: string;
  key: string;
  fire_at_us: number;
  version: number;
  payload: unknown;
  callback?: Callback;
  retry?: DeliveryRetry;
  delivery?: Delivery;
  debounce?: DebounceState;
}

export interface ErrorDetail {
  code: string;
  message: string;
  /** A conflict's (409 `exists`, `version_mismatch`): the pending timer's version. */
  version?: number;
  /** 409 `exists`: the pending timer's deadline. */
  fire_at_us?: number;
}

/** One batch item's outcome, in the items' order; `key` is null when the item had none. */
export interface BatchResult {
  key: string | null;
  status: number;
  fire_at_us?: number;
  version?: number;
  error?: ErrorDetail;
}

/** A webhook timer whose delivery failed for good. */
export interface DeadLetter {
  key: string;
  version: number;
  fire_at_us: number;
  attempts: number;
  last_status?: number;
  last_error?: string;
  callback: Callback | null;
  payload: unknown;
}

/** /healthz: `ok`, or why the server cannot take writes (`unavailable`, `draining`). */
export interface Health {
  status: "ok" | "degraded" | "unavailable" | "draining";
  shards?: number;
  store?: "journal" | "redis" | "memory";
  reason?: string;
  partitions?: number;
  /** On a degraded fleet node: the partitions held for over 5 s without being loaded, as ranges ("0-12,15"). */
  partitions_not_loaded?: string;
}

export interface ClusterPartitions {
  count: number;
  ranges: string;
}

export interface ClusterEpochs {
  min: number;
  max: number;
  partitions: Record<string, string>;
}

export interface ClusterHolder {
  id: string;
  advertise: string | null;
  started_at_us: number | null;
  partitions: ClusterPartitions;
  epochs: ClusterEpochs | null;
}

export interface ClusterThisNode {
  id: string;
  holds: ClusterPartitions;
  should_own: ClusterPartitions;
  /** The partitions held but not loaded within 5 s of their gain: an alert (their timers do not fire). */
  load_overdue?: ClusterPartitions;
}

/** /cluster on a node of a Redis Cluster fleet. */
export interface ClusterStatus {
  read_at_us: number;
  live: ClusterHolder[];
  unowned: ClusterPartitions;
  not_live: ClusterHolder[];
  unreadable: ClusterPartitions;
  this_node: ClusterThisNode;
}

/** The body punctual POSTs to a callback. */
export interface WebhookDelivery {
  tenant: string;
  key: string;
  version: number;
  fire_at_us: number;
  fired_at_us: number;
  attempt: number;
  payload: unknown;
}

/** The query of the dead-letter list: at most `limit` (1 to 1,000) after the key `after`. */
/** A page of a listing: keys that start with `prefix`, after `after` (the previous page's
 * `next`), at most `limit` (1 to 10,000; the server's 1,000 when left out). */
export interface ListOptions {
  prefix?: string;
  after?: string;
  limit?: number;
  payloads?: boolean;
}

/** A pending timer as a listing shows it; `payload` only when the listing asked for it. */
export interface ListedTimer {
  key: string;
  fire_at_us: number;
  version: number;
  payload?: unknown;
}

/** One page of a listing; `next` is left out on the last page. */
export interface TimerPage {
  timers: ListedTimer[];
  next?: string;
}

/** What a bulk cancel cancels: the keys that start with `prefix`; an empty prefix (or none)
 * cancels every pending timer of the tenant, and only with `all`. */
export interface CancelPrefixOptions {
  prefix?: string;
  all?: boolean;
}

/** The server's answer to a bulk cancel: the action's id. */
export interface ActionStarted {
  id: string;
}

/** A bulk cancel's progress: `matched` counts the timers listed under the prefix,
 * `cancelled` those the action cancelled; `error` says why it stopped before its end. */
export interface Action {
  id: string;
  state: "running" | "done";
  matched: number;
  cancelled: number;
  error?: string;
}

/** A conditional cancel: only the pending timer of `if_version`. */
export interface CancelOptions {
  if_version?: number;
}

export interface DeadListOptions {
  limit?: number;
  after?: string;
}

/** A page of the history: only `key`'s entries (all the tenant's when left out), at most
 * `limit` (1 to 1,000; the server's 100 when left out), older than the previous page (`after`,
 * its `next`; a cursor is valid until the server restarts). */
export interface HistoryOptions {
  key?: string;
  limit?: number;
  after?: string;
}

/** Where a fire ended, or is: `fired` (no webhook), `queued` (to the tenant's pull queue),
 * `retrying` (a delivery under way, or stopped by a cancel or a replacement), `delivered` (an
 * attempt answered 2xx), `dead_lettered`. */
export type HistoryOutcome = "fired" | "queued" | "retrying" | "delivered" | "dead_lettered";

/** One attempt of a fire's webhook delivery: when it ended, and either the receiver's HTTP
 * `status` or, when there was no answer, the class of the failure (`error`: `connect`,
 * `timeout`, `dns`, …); the other is null. */
export interface HistoryAttempt {
  at_us: number;
  status: number | null;
  error: string | null;
}

/** One fire of a timer (its key and version): its deadline, when it fired, its delivery's
 * attempts in order (the last 100) and its outcome. */
export interface HistoryEntry {
  key: string;
  version: number;
  fire_at_us: number;
  fired_at_us: number;
  lateness_us: number;
  outcome: HistoryOutcome;
  attempts: HistoryAttempt[];
}

/** One page of the history, newest first; `next` is left out on the last page. */
export interface HistoryPage {
  entries: HistoryEntry[];
  next?: string;
}

/** A recurring schedule's definition, the body of `putSchedule`: exactly one of `cron` and
 * `every_ms`; every other field optional (docs/API.md, "Recurring schedules"). */
export interface ScheduleSpec {
  /** 5 fields, or 6 with seconds first; names of months and days; `@hourly`-style macros. */
  cron?: string;
  /** A fixed period in absolute time (at least 1,000), anchored at `start_at`. */
  every_ms?: number;
  /** An IANA zone name, `UTC` by default; with `cron` only. */
  time_zone?: string;
  /** No occurrence before it (RFC 3339 or a Date). */
  start_at?: string | Date;
  /** No occurrence after it (RFC 3339 or a Date). */
  end_at?: string | Date;
  /** The schedule ends after this many fires. */
  max_occurrences?: number;
  catch_up?: CatchUp;
  dst?: DstPolicy;
  /** Any JSON value, carried by every occurrence's delivery; at most 65,536 bytes of JSON. */
  payload?: unknown;
  callback?: Callback;
  retry?: DeliveryRetry;
}

/** What fires for occurrences missed (a downtime, a pause, a forward clock step) within
 * `window_ms`; `latest` and an hour by default, the window at most 7 days. */
export interface CatchUp {
  policy?: "skip" | "latest" | "all";
  window_ms?: number;
}

/** A local time a spring-forward gap skips (`shift` by default) and one a fall-back overlap
 * repeats (`first` by default). */
export interface DstPolicy {
  gap?: "shift" | "skip";
  overlap?: "first" | "last" | "both";
}

/** One coming occurrence: its nominal UTC instant and the local time in the schedule's zone. */
export interface ScheduleOccurrence {
  occurrence_us: number;
  /** RFC 3339 with the zone's offset. */
  local: string;
}

/** A schedule as every schedule route answers it. */
export interface RecurringSchedule {
  tenant: string;
  key: string;
  /** Changes with every write and every fire. */
  version: number;
  paused: boolean;
  /** Occurrences fired so far. */
  sequence: number;
  /** The body of the last `putSchedule`, as sent. */
  definition: Record<string, unknown>;
  /** The next occurrences from where the schedule stands (`getSchedule`'s `next`, 5 by default). */
  next: ScheduleOccurrence[];
  /** True when no schedule was under the key (201), false when one was replaced (200); only
   * on `putSchedule`'s answer. */
  created?: boolean;
}

/** `getSchedule`'s query. */
export interface GetScheduleOptions {
  /** How many of the next occurrences to show, 1 to 100 (default 5). */
  next?: number;
}

/** `listSchedules`' query. */
export interface ScheduleListOptions {
  /** At most this many, 1 to 1,000 (default 100). */
  limit?: number;
  /** Only keys after this one: the previous page's `next`. */
  after?: string;
}

/** A schedule as a listing shows it. */
export interface ListedSchedule {
  key: string;
  version: number;
  paused: boolean;
  sequence: number;
}

/** One page of a tenant's schedules, by key; `next` is the `after` of the next page, `null`
 * on the last. */
export interface SchedulePage {
  schedules: ListedSchedule[];
  next: string | null;
}

/** A receive's options; each left out takes its default. */
export interface ReceiveOptions {
  /** At most this many messages, 1 to 1,000 (default 10). */
  max?: number;
  /** With none ready, wait up to this long for one, 0 to 20,000 (default 0). */
  wait_ms?: number;
  /** Each message received is leased this long, 1 to 43,200,000 (default 30,000). */
  visibility_ms?: number;
}

/** A message received from a tenant's pull queue: a fired timer, leased under `receipt`. */
export interface QueueMessage {
  /** Names this receive of this message, for `ack`, `nack` and `extend`. */
  receipt: string;
  key: string;
  version: number;
  /** The timer's deadline. */
  fire_at_us: number;
  /** When it fired. */
  fired_at_us: number;
  /** Receives of this message, this one included. */
  receive_count: number;
  /** The payload as it was sent, or null. */
  payload: unknown;
}

/** A nack: the messages are ready again after `delay_ms` (0 to 43,200,000, default 0). */
export interface NackRequest {
  receipts: string[];
  delay_ms?: number;
}

/** An extend: each lease now ends `visibility_ms` from now (1 to 43,200,000). */
export interface ExtendRequest {
  receipts: string[];
  visibility_ms: number;
}

/** The outcome for one receipt of an ack, nack or extend: `204` done, durably; `409`
 * `lease_expired`; `404` `unknown_receipt`; `503` the store did not take it. */
export interface SettleResult {
  receipt: string;
  status: 204 | 404 | 409 | 503;
  error?: { code: string; message: string };
}

/** A tenant's pull queue, counted on every shard. */
export interface QueueDepth {
  tenant: string;
  /** Messages not leased: `ready` plus `delayed`. */
  depth: number;
  ready: number;
  /** Nacked with a delay, not yet ready. */
  delayed: number;
  /** Leased and not acknowledged. */
  in_flight: number;
  /** The age of the oldest ready message, null when none is ready. */
  oldest_age_ms: number | null;
  max_receives: number;
}
