package punctual

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// A tenant with `queue = true` (journal and memory stores) keeps each of its fired timers
// without a callback as a message, until a consumer receives and acknowledges it
// (docs/API.md, "Pull queues"). A route for a tenant without a queue is 404 not_found; on
// the Redis store 501 not_implemented.

// ReceiveOptions shapes a receive; zero fields take the server's defaults.
type ReceiveOptions struct {
	// Max is at most this many messages (1 to 1,000; the server's 10 when zero).
	Max int `json:"max,omitempty"`
	// WaitMs waits up to this long (at most 20,000) for a message when none is ready.
	WaitMs int64 `json:"wait_ms,omitempty"`
	// VisibilityMs leases each message received this long (at most 12 h; the server's
	// 30,000 when zero).
	VisibilityMs int64 `json:"visibility_ms,omitempty"`
}

// Message is a fired timer received from the queue, leased to the receiver until its
// visibility ends.
type Message struct {
	// Receipt names this receive of the message, for Ack, Nack and Extend.
	Receipt  string `json:"receipt"`
	Key      string `json:"key"`
	Version  int64  `json:"version"`
	FireAtUs int64  `json:"fire_at_us"`
	// FiredAtUs is when the timer fired.
	FiredAtUs int64 `json:"fired_at_us"`
	// ReceiveCount counts the receives of the message, this one included.
	ReceiveCount int             `json:"receive_count"`
	Payload      json.RawMessage `json:"payload"`
}

// FiredAt is when the timer fired, as a time.
func (m Message) FiredAt() time.Time { return time.UnixMicro(m.FiredAtUs).UTC() }

// NackRequest gives received messages back, ready again after DelayMs (0 to 12 h).
type NackRequest struct {
	Receipts []string `json:"receipts"`
	DelayMs  int64    `json:"delay_ms,omitempty"`
}

// ExtendRequest makes each lease of Receipts end VisibilityMs (1 to 12 h) from now.
type ExtendRequest struct {
	Receipts     []string `json:"receipts"`
	VisibilityMs int64    `json:"visibility_ms"`
}

// SettleResult is one receipt's outcome of an ack, a nack or an extend, in the receipts'
// order: Status 204 done (durably), 409 lease_expired, 404 unknown_receipt, or 503.
type SettleResult struct {
	Receipt string       `json:"receipt"`
	Status  int          `json:"status"`
	Error   *ErrorDetail `json:"error,omitempty"`
}

// Err is the receipt's failure as an *Error, nil when it was settled.
func (r SettleResult) Err() error {
	if r.Error == nil {
		return nil
	}
	return &Error{Status: r.Status, Code: r.Error.Code, Message: r.Error.Message}
}

// QueueDepth counts a tenant's queue.
type QueueDepth struct {
	Tenant string `json:"tenant"`
	// Depth is every message not leased: Ready plus Delayed (nacked with a delay).
	Depth   int64 `json:"depth"`
	Ready   int64 `json:"ready"`
	Delayed int64 `json:"delayed"`
	// InFlight counts the messages leased and not acknowledged.
	InFlight int64 `json:"in_flight"`
	// OldestAgeMs is the age of the oldest ready message, nil when none is ready.
	OldestAgeMs *int64 `json:"oldest_age_ms"`
	// MaxReceives is the receives of a message before it becomes a dead letter.
	MaxReceives int `json:"max_receives"`
}

func queuePath(tenant string) string { return "/v1/queues/" + seg(tenant) }

// Queue counts the tenant's queue, from every shard: for monitoring, not for a loop.
func (c *Client) Queue(ctx context.Context, tenant string) (QueueDepth, error) {
	a, err := c.do(ctx, request{method: http.MethodGet, path: queuePath(tenant), safe: true})
	if err != nil {
		return QueueDepth{}, err
	}
	var d QueueDepth
	return d, c.decode(a, &d)
}

// Receive leases up to o.Max ready messages, waiting up to o.WaitMs for the first; an empty
// list once the wait passes with none ready. The attempt's timeout (RetryPolicy.AttemptTimeout)
// runs from the end of the wait. Never retried: an attempt whose answer was
// lost leased its messages, which come back only when their leases end.
func (c *Client) Receive(ctx context.Context, tenant string, o ReceiveOptions) ([]Message, error) {
	a, err := c.do(ctx, request{method: http.MethodPost, path: queuePath(tenant) + "/receive", body: o,
		waits: time.Duration(o.WaitMs) * time.Millisecond})
	if err != nil {
		return nil, err
	}
	var r struct {
		Messages []Message `json:"messages"`
	}
	return r.Messages, c.decode(a, &r)
}

// Ack removes the received messages of receipts for good (1 to 1,000), one result each.
// Retried when the server did not take it: a result of 409 lease_expired after a retry may
// be a message that an attempt whose answer was lost removed.
func (c *Client) Ack(ctx context.Context, tenant string, receipts []string) ([]SettleResult, error) {
	body := struct {
		Receipts []string `json:"receipts"`
	}{receipts}
	return c.settle(ctx, tenant, "/ack", body)
}

// Nack gives received messages back, ready again after n.DelayMs; a message on its last
// receive becomes a dead letter. Retried as Ack is.
func (c *Client) Nack(ctx context.Context, tenant string, n NackRequest) ([]SettleResult, error) {
	return c.settle(ctx, tenant, "/nack", n)
}

// Extend makes each lease of e.Receipts end e.VisibilityMs from now; the receipts stay
// valid. Retried: extending twice ends the lease where once would.
func (c *Client) Extend(ctx context.Context, tenant string, e ExtendRequest) ([]SettleResult, error) {
	return c.settle(ctx, tenant, "/extend", e)
}

func (c *Client) settle(ctx context.Context, tenant, route string, body any) ([]SettleResult, error) {
	a, err := c.do(ctx, request{method: http.MethodPost, path: queuePath(tenant) + route, body: body, safe: true})
	if err != nil {
		return nil, err
	}
	var r struct {
		Results []SettleResult `json:"results"`
	}
	return r.Results, c.decode(a, &r)
}
