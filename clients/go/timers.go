package punctual

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Timer is what to schedule: exactly one deadline (After, At or AtUnixMilli make one), an
// optional payload, and an optional webhook with its retry policy.
type Timer struct {
	// FireAt is an absolute deadline, sent as RFC 3339 (truncated to the microsecond).
	FireAt *time.Time `json:"fire_at,omitempty"`
	// FireAtMs is an absolute deadline in milliseconds since the Unix epoch.
	FireAtMs *int64 `json:"fire_at_ms,omitempty"`
	// DelayMs counts from the request's arrival, on the server's clock.
	DelayMs *int64 `json:"delay_ms,omitempty"`
	// Payload is any value encoding/json can write, at most 65,536 bytes of JSON; it comes
	// back byte for byte. A json.RawMessage is sent as it is.
	Payload any `json:"payload,omitempty"`
	// Callback is where the fired timer is POSTed (the tenant's callback_url when nil).
	Callback *Callback `json:"callback,omitempty"`
	// Retry is the webhook's retry policy (the tenant's defaults when nil).
	Retry *DeliveryRetry `json:"retry,omitempty"`
	// If is "absent" to create only: a pending timer under the key refuses the write with
	// 409 exists (IsConflict), whose Error carries its Version and FireAtUs.
	If string `json:"if,omitempty"`
	// IfVersion, when not zero, replaces only the pending timer of that version: another
	// is 409 version_mismatch with the current Version, none pending IsNotFound.
	IfVersion int64 `json:"if_version,omitempty"`
	// Debounce makes the writes of the key one burst: each moves the deadline, never past
	// the burst's first arming plus MaxWaitMs.
	Debounce *Debounce `json:"debounce,omitempty"`
}

// Debounce holds a burst of writes to one deadline at most MaxWaitMs after its first.
type Debounce struct {
	MaxWaitMs int64 `json:"max_wait_ms"`
}

// DebounceState is a debounced timer's burst, as Get shows it.
type DebounceState struct {
	FirstAtUs int64 `json:"first_at_us"`
	MaxWaitMs int64 `json:"max_wait_ms"`
	// CapUs is the latest the deadline may move to: FirstAtUs + MaxWaitMs.
	CapUs int64 `json:"cap_us"`
}

// After is a timer due d from the request's arrival (rounded down to the millisecond).
func After(d time.Duration) Timer {
	ms := d.Milliseconds()
	return Timer{DelayMs: &ms}
}

// At is a timer due at t.
func At(t time.Time) Timer {
	t = t.UTC()
	return Timer{FireAt: &t}
}

// AtUnixMilli is a timer due at ms milliseconds since the Unix epoch.
func AtUnixMilli(ms int64) Timer { return Timer{FireAtMs: &ms} }

// WithPayload returns t carrying payload.
func (t Timer) WithPayload(payload any) Timer { t.Payload = payload; return t }

// WithCallback returns t delivered to url when it fires.
func (t Timer) WithCallback(url string) Timer { t.Callback = &Callback{URL: url}; return t }

// WithDebounce makes the write part of a burst held to maxWait after its first write.
func (t Timer) WithDebounce(maxWait time.Duration) Timer {
	t.Debounce = &Debounce{MaxWaitMs: maxWait.Milliseconds()}
	return t
}

// IfAbsent makes the write create only (see Timer.If).
func (t Timer) IfAbsent() Timer { t.If = "absent"; return t }

// IfVersionIs makes the write replace only the pending timer of version v (see Timer.IfVersion).
func (t Timer) IfVersionIs(v int64) Timer { t.IfVersion = v; return t }

// WithDeliveryRetry returns t with its webhook retried by r.
func (t Timer) WithDeliveryRetry(r DeliveryRetry) Timer { t.Retry = &r; return t }

// Callback is a webhook's address.
type Callback struct {
	URL string `json:"url"`
}

// DeliveryRetry is how punctual retries a webhook; zero fields take the tenant's defaults.
type DeliveryRetry struct {
	MaxAttempts int   `json:"max_attempts,omitempty"`
	BaseDelayMs int64 `json:"base_delay_ms,omitempty"`
	MaxDelayMs  int64 `json:"max_delay_ms,omitempty"`
}

// Scheduled is the answer to a schedule: the timer's deadline and its version, which names
// this one scheduling of (tenant, key).
type Scheduled struct {
	Tenant   string `json:"tenant"`
	Key      string `json:"key"`
	FireAtUs int64  `json:"fire_at_us"`
	Version  int64  `json:"version"`
	// Created is true when no timer was pending under the key (201), false when a pending
	// one was replaced (200).
	Created bool `json:"-"`
}

// FireAt is the deadline as a time.
func (s Scheduled) FireAt() time.Time { return time.UnixMicro(s.FireAtUs).UTC() }

// PendingTimer is a timer waiting to fire (or to be delivered).
type PendingTimer struct {
	Tenant   string          `json:"tenant"`
	Key      string          `json:"key"`
	FireAtUs int64           `json:"fire_at_us"`
	Version  int64           `json:"version"`
	Payload  json.RawMessage `json:"payload"`
	Callback *Callback       `json:"callback,omitempty"`
	Retry    *DeliveryRetry  `json:"retry,omitempty"`
	Delivery *Delivery       `json:"delivery,omitempty"`
	Debounce *DebounceState  `json:"debounce,omitempty"`
}

// FireAt is the deadline as a time.
func (t PendingTimer) FireAt() time.Time { return time.UnixMicro(t.FireAtUs).UTC() }

// Delivery is how far a pending webhook timer's delivery has got.
type Delivery struct {
	// State is "pending", "in_flight" or "retrying".
	State      string `json:"state"`
	Attempts   int    `json:"attempts"`
	NextAtUs   int64  `json:"next_at_us"`
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
}

// Put schedules t under (tenant, key), replacing the timer pending there (an upsert, so it
// is retried). The answer says whether it created or replaced one.
func (c *Client) Put(ctx context.Context, tenant, key string, t Timer) (Scheduled, error) {
	s, a, err := call[Scheduled](ctx, c, request{method: http.MethodPut, path: "/v1/timers/" + seg(tenant) + "/" + seg(key), body: t, safe: true})
	if err != nil {
		return Scheduled{}, err
	}
	s.Created = a.status == http.StatusCreated
	return s, nil
}

// Get reads the timer pending under (tenant, key); IsNotFound(err) when none is.
func (c *Client) Get(ctx context.Context, tenant, key string) (PendingTimer, error) {
	a, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/timers/" + seg(tenant) + "/" + seg(key), safe: true})
	if err != nil {
		return PendingTimer{}, err
	}
	var t PendingTimer
	return t, c.decode(a, &t)
}

// Cancel cancels the timer pending under (tenant, key): it will not fire. IsNotFound(err)
// when nothing is pending: never scheduled, fired, cancelled, or removed by an earlier
// attempt of this call whose answer was lost.
func (c *Client) Cancel(ctx context.Context, tenant, key string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/timers/" + seg(tenant) + "/" + seg(key), safe: true})
	return err
}

// CancelOptions makes a cancel conditional: with IfVersion not zero, only the pending timer
// of that version is cancelled; another is 409 version_mismatch (IsConflict).
type CancelOptions struct {
	IfVersion int64 `url:"if_version"`
}

// CancelIf cancels the timer pending under (tenant, key) only if its version is o.IfVersion
// (any version when zero, as Cancel).
func (c *Client) CancelIf(ctx context.Context, tenant, key string, o CancelOptions) error {
	q := url.Values{}
	if o.IfVersion != 0 {
		q.Set("if_version", strconv.FormatInt(o.IfVersion, 10))
	}
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/timers/" + seg(tenant) + "/" + seg(key), query: q, safe: true})
	return err
}

// BatchItem is one timer of a batch.
type BatchItem struct {
	Key string `json:"key"`
	Timer
}

// BatchResult is one item's outcome, in the items' order.
type BatchResult struct {
	// Key is the item's key, nil when the item had none.
	Key      *string      `json:"key"`
	Status   int          `json:"status"`
	FireAtUs int64        `json:"fire_at_us,omitempty"`
	Version  int64        `json:"version,omitempty"`
	Error    *ErrorDetail `json:"error,omitempty"`
}

// Err is the item's failure as an *Error, nil when it was scheduled.
func (r BatchResult) Err() error {
	if r.Error == nil {
		return nil
	}
	return &Error{Status: r.Status, Code: r.Error.Code, Message: r.Error.Message, Version: r.Error.Version, FireAtUs: r.Error.FireAtUs}
}

// ErrorDetail is an error body's content; a conflict's also names the pending timer.
type ErrorDetail struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	Version  int64  `json:"version,omitempty"`
	FireAtUs int64  `json:"fire_at_us,omitempty"`
}

// Batch schedules up to 10,000 timers of one tenant in one request, applied in order; each
// item fails alone (see BatchResult.Err). Every item is an upsert, so the batch is retried
// as a whole when the server did not take it.
func (c *Client) Batch(ctx context.Context, tenant string, items []BatchItem) ([]BatchResult, error) {
	if items == nil {
		items = []BatchItem{} // "timers": [], which the server refuses as empty_batch
	}
	body := struct {
		Timers []BatchItem `json:"timers"`
	}{items}
	a, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/timers/" + seg(tenant), body: body, safe: true})
	if err != nil {
		return nil, err
	}
	var r struct {
		Results []BatchResult `json:"results"`
	}
	return r.Results, c.decode(a, &r)
}
