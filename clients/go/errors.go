package punctual

import (
	"errors"
	"fmt"
	"time"
)

// Error codes the server answers (docs/API.md, "Errors"). Code is a string so that a code
// added by a newer server still reaches the caller.
const (
	CodeMalformedJSON      = "malformed_json"
	CodeInvalidField       = "invalid_field"
	CodeInvalidDeadline    = "invalid_deadline"
	CodeDeadlineOutOfRange = "deadline_out_of_range"
	CodeInvalidTenant      = "invalid_tenant"
	CodeInvalidKey         = "invalid_key"
	CodeEmptyBatch         = "empty_batch"
	CodeCallbackNotAllowed = "callback_not_allowed"
	CodeUnauthorized       = "unauthorized"
	CodeUnknownTenant      = "unknown_tenant"
	CodeNotFound           = "not_found"
	CodeTimerPending       = "timer_pending"
	CodeExists             = "exists"
	CodeVersionMismatch    = "version_mismatch"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeRequestTimeout     = "request_timeout"
	CodeBodyTooLarge       = "body_too_large"
	CodePayloadTooLarge    = "payload_too_large"
	CodeTooManyItems       = "too_many_items"
	CodeQuotaExceeded      = "quota_exceeded"
	CodeRateLimited        = "rate_limited"
	CodeOverloaded         = "overloaded"
	CodeCapacityExceeded   = "capacity_exceeded"
	CodeStoreUnavailable   = "store_unavailable"
	CodeShuttingDown       = "shutting_down"
	CodeTooManyConnections = "too_many_connections"
	CodePeerUnavailable    = "peer_unavailable"
	CodeInternal           = "internal"
	CodeNotImplemented     = "not_implemented"
	CodeLeaseExpired       = "lease_expired"
	CodeUnknownReceipt     = "unknown_receipt"
)

// Error is an answer of the server that is not a success: its HTTP status, the stable code
// and the message of its error body, and its Retry-After (zero when absent).
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
	// Version is a conflict's (409 exists, 409 version_mismatch) pending version, else 0.
	Version int64
	// FireAtUs is the pending timer's deadline of a 409 exists, else 0.
	FireAtUs int64
}

func (e *Error) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("punctual: %d %s: %s (retry after %s)", e.Status, e.Code, e.Message, e.RetryAfter)
	}
	return fmt.Sprintf("punctual: %d %s: %s", e.Status, e.Code, e.Message)
}

// ErrorCode is the server's error code in err's chain, or "" when err holds no *Error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsNotFound reports whether err is the server's 404 not_found: nothing pending (or no dead
// letter) under the key. After a retried Cancel it may mean an earlier attempt removed it.
func IsNotFound(err error) bool { return ErrorCode(err) == CodeNotFound }

// IsConflict reports whether err is a conditional write the key's state refused: 409 exists
// or 409 version_mismatch. Nothing changed; the *Error names the pending Version.
func IsConflict(err error) bool {
	c := ErrorCode(err)
	return c == CodeExists || c == CodeVersionMismatch
}

// RetryAfter is the Retry-After of the *Error in err's chain, zero when there is none.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}
