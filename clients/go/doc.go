// Package punctual is a client for the punctual timer service's HTTP API (docs/API.md in the
// punctual repository): schedule, read and cancel timers, schedule batches, manage dead
// letters, and verify the webhooks punctual delivers.
//
// Every call takes a context: its deadline bounds the whole call, retries included, and its
// cancellation stops it. Calls that are safe to repeat (PUT, GET, DELETE, a batch, listing)
// are retried on 503, 429 rate_limited, 408 and connection failures, with capped exponential
// backoff, full jitter and at least the server's Retry-After; a re-drive of a dead letter is
// never retried. A failed call returns an *Error carrying the status, the stable error code
// and Retry-After.
//
// The package uses the standard library only.
package punctual
