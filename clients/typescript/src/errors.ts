/** Anything the client throws about a call: the server's answer or the transport. */
export class PunctualError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * An answer that is not a 2xx: its HTTP status, the stable error code and message of its body
 * (docs/API.md, "Errors"), and its Retry-After in milliseconds (undefined when absent).
 */
export class ApiError extends PunctualError {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly detail: string,
    readonly retryAfterMs?: number,
    /** A conflict's pending version (409 `exists`, `version_mismatch`). */
    readonly version?: number,
    /** 409 `exists`: the pending timer's deadline. */
    readonly fireAtUs?: number,
  ) {
    super(`${status} ${code}: ${detail}${retryAfterMs ? ` (retry after ${retryAfterMs} ms)` : ""}`);
  }

  /** A conditional write the key's state refused (409 `exists` or `version_mismatch`):
   * nothing changed; `version` names the pending timer. */
  get conflict(): boolean {
    return this.code === "exists" || this.code === "version_mismatch";
  }

  /** Nothing pending (or no dead letter) under the key; after a retried cancel it may mean an
   * earlier attempt removed it. */
  get notFound(): boolean {
    return this.code === "not_found";
  }
}

/** No answer: the connection failed, or an attempt ran out of time. */
export class TransportError extends PunctualError {}

/** A delivery whose signature does not verify, or whose timestamp is too far off. */
export class WebhookVerificationError extends PunctualError {}
