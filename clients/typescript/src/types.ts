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

/** A conditional cancel: only the pending timer of `if_version`. */
export interface CancelOptions {
  if_version?: number;
}

export interface DeadListOptions {
  limit?: number;
  after?: string;
}
