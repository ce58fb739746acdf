package punctual

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

// DeadLetter is a webhook timer whose delivery failed for good.
type DeadLetter struct {
	Key        string          `json:"key"`
	Version    int64           `json:"version"`
	FireAtUs   int64           `json:"fire_at_us"`
	Attempts   int             `json:"attempts"`
	LastStatus int             `json:"last_status,omitempty"`
	LastError  string          `json:"last_error,omitempty"`
	Callback   *Callback       `json:"callback"`
	Payload    json.RawMessage `json:"payload"`
}

// DeadListOptions pages the dead-letter list: at most Limit (1 to 1,000; 0 for the server's
// 100) after the key After.
type DeadListOptions struct {
	Limit int    `url:"limit"`
	After string `url:"after"`
}

// DeadLetters lists the tenant's dead letters by key, one page. The next page is the one
// after the last key of this one; a page shorter than the limit is the last.
func (c *Client) DeadLetters(ctx context.Context, tenant string, o DeadListOptions) ([]DeadLetter, error) {
	a, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/dead/" + seg(tenant), query: pageQuery(o.Limit, o.After), safe: true})
	if err != nil {
		return nil, err
	}
	var r struct {
		Dead []DeadLetter `json:"dead"`
	}
	return r.Dead, c.decode(a, &r)
}

// pageQuery is a page's limit (when not zero) and the key it starts after (when not empty).
func pageQuery(limit int, after string) url.Values {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		q.Set("after", after)
	}
	return q
}

// Redrive makes the dead letter under (tenant, key) pending again, delivered now with a
// fresh attempt budget and its old version. Never retried: an attempt whose answer was
// lost may have re-driven it. A timer pending under the key is 409 timer_pending.
func (c *Client) Redrive(ctx context.Context, tenant, key string) (Scheduled, error) {
	a, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/dead/" + seg(tenant) + "/" + seg(key) + "/retry"})
	if err != nil {
		return Scheduled{}, err
	}
	var s Scheduled
	return s, c.decode(a, &s)
}

// Discard removes the dead letter under (tenant, key); IsNotFound(err) when there is none.
func (c *Client) Discard(ctx context.Context, tenant, key string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/dead/" + seg(tenant) + "/" + seg(key), safe: true})
	return err
}

// ListOptions pages the listing of pending timers: keys that start with Prefix, after the
// key After (the previous page's Next), at most Limit (1 to 10,000; 0 for the server's
// 1,000), with their payloads when Payloads.
type ListOptions struct {
	Prefix   string `url:"prefix"`
	After    string `url:"after"`
	Limit    int    `url:"limit"`
	Payloads bool   `url:"payloads"`
}

// ListedTimer is a pending timer as a listing shows it.
type ListedTimer struct {
	Key      string          `json:"key"`
	FireAtUs int64           `json:"fire_at_us"`
	Version  int64           `json:"version"`
	Payload  json.RawMessage `json:"payload,omitempty"`
}

// TimerPage is one page of a listing; Next is empty on the last page.
type TimerPage struct {
	Timers []ListedTimer `json:"timers"`
	Next   string        `json:"next,omitempty"`
}

// List lists the tenant's pending timers whose key starts with o.Prefix, by key, one page;
// the next page is asked with After set to this page's Next.
func (c *Client) List(ctx context.Context, tenant string, o ListOptions) (TimerPage, error) {
	q := url.Values{}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Payloads {
		q.Set("payloads", "true")
	}
	a, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/timers/" + seg(tenant), query: q, safe: true})
	if err != nil {
		return TimerPage{}, err
	}
	var p TimerPage
	return p, c.decode(a, &p)
}
