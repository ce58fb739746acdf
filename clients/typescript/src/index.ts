// A client for the punctual timer service's HTTP API: timers, batches, dead letters, recurring
// schedules, pull queues, health, and verification of the webhooks punctual delivers.
export { Client } from "./client.js";
export type { CallOptions, ClientOptions } from "./client.js";
export type { ConsumeOptions, Handler } from "./consume.js";
export { ApiError, PunctualError, TransportError, WebhookVerificationError } from "./errors.js";
export { DEFAULT_RETRY, NO_RETRY } from "./retry.js";
export type { RetryPolicy } from "./retry.js";
export type * from "./types.js";
export { DEFAULT_TOLERANCE_S, deliveryId, verify } from "./webhooks.js";
export type { HeaderSource, VerifyOptions } from "./webhooks.js";
