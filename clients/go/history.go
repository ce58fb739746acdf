package punctual

import (
	"context"
	"net/http"
)

// HistoryOutcome is where a fire ended, or is: one of the HistoryOutcome constants.
type HistoryOutcome string

// The outcomes of a fire.
const (
	// OutcomeFired: fired without a webhook (the Redis stream, a handler, or nothing).
	OutcomeFired HistoryOutcome = "fired"
	// OutcomeQueued: went to its tenant's pull queue.
	OutcomeQueued HistoryOutcome = "queued"
	// OutcomeRetrying: its webhook delivery is under way, or was stopped by a cancel or a
	// replacement.
	OutcomeRetrying HistoryOutcome = "retrying"
	// OutcomeDelivered: an attempt was answered 2xx.
	OutcomeDelivered HistoryOutcome = "delivered"
	// OutcomeDeadLettered: became a dead letter.
	OutcomeDeadLettered HistoryOutcome = "dead_lettered"
)

// HistoryAttempt is one attempt of a fire's webhook delivery: when it ended, and either the
// receiver's status (Status not nil) or the class of the failure when there was no answer
// (Error not nil: "connect", "timeout", "dns", …).
type HistoryAttempt struct {
	AtUs   int64   `json:"at_us"`
	Status *int    `json:"status"`
	Error  *string `json:"error"`
}

// HistoryEntry is one fire of a timer (its key and version): its deadline, when it fired,
// its delivery's attempts in order (the last 100) and its outcome.
type HistoryEntry struct {
	Key        string           `json:"key"`
	Version    int64            `json:"version"`
	FireAtUs   int64            `json:"fire_at_us"`
	FiredAtUs  int64            `json:"fired_at_us"`
	LatenessUs int64            `json:"lateness_us"`
	Outcome    HistoryOutcome   `json:"outcome"`
	Attempts   []HistoryAttempt `json:"attempts"`
}

// HistoryPage is one page of the history, newest first; Next is empty on the last page.
type HistoryPage struct {
	Entries []HistoryEntry `json:"entries"`
	Next    string         `json:"next,omitempty"`
}

// HistoryOptions selects a page of the history: only Key's entries (when not empty), at most
// Limit (1 to 1,000; 0 for the server's 100), older than the previous page (After, its Next;
// a cursor is valid until the server restarts).
type HistoryOptions struct {
	Key   string `url:"key"`
	Limit int    `url:"limit"`
	After string `url:"after"`
}

// History reads what became of the tenant's recent fires, newest first, one page; the next
// page is asked with After set to this page's Next. A server that keeps no history (the
// Redis store, or history_retention_s = 0) answers 501 not_implemented.
func (c *Client) History(ctx context.Context, tenant string, o HistoryOptions) (HistoryPage, error) {
	q := pageQuery(o.Limit, o.After)
	if o.Key != "" {
		q.Set("key", o.Key)
	}
	a, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/history/" + seg(tenant), query: q, safe: true})
	if err != nil {
		return HistoryPage{}, err
	}
	var p HistoryPage
	return p, c.decode(a, &p)
}
