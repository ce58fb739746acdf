package punctual

import (
	"context"
	"net/http"
	"net/url"
)

// CancelPrefixOptions names what a bulk cancel cancels: the pending timers whose key starts
// with Prefix. An empty Prefix cancels every pending timer of the tenant, and only with All.
type CancelPrefixOptions struct {
	Prefix string `url:"prefix"`
	All    bool   `url:"all"`
}

// ActionStarted is the server's answer to a bulk cancel: the action's id.
type ActionStarted struct {
	ID string `json:"id"`
}

// Action is a bulk cancel's progress: State is "running" or "done"; Matched counts the
// timers listed under the prefix, Cancelled those the action cancelled; Error says why it
// stopped before its end, if it did.
type Action struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Matched   int64  `json:"matched"`
	Cancelled int64  `json:"cancelled"`
	Error     string `json:"error,omitempty"`
}

// CancelPrefix starts a bulk cancel of the tenant's pending timers whose key starts with
// o.Prefix, and returns the action's id at once; Action gives its progress. It is not
// retried: a second call starts a second action.
func (c *Client) CancelPrefix(ctx context.Context, tenant string, o CancelPrefixOptions) (string, error) {
	q := url.Values{}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.All {
		q.Set("all", "true")
	}
	a, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/timers/" + seg(tenant), query: q})
	if err != nil {
		return "", err
	}
	var s ActionStarted
	return s.ID, c.decode(a, &s)
}

// Action reads a bulk cancel's progress; IsNotFound(err) for an unknown action (a restart
// forgets every action, and each tenant keeps its last 64).
func (c *Client) Action(ctx context.Context, tenant, id string) (Action, error) {
	a, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/actions/" + seg(tenant) + "/" + seg(id), safe: true})
	if err != nil {
		return Action{}, err
	}
	var p Action
	return p, c.decode(a, &p)
}
