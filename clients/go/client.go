package punctual

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client talks to one punctual server (or a load balancer in front of several). It is safe
// for concurrent use; keep one and reuse it, so that its connections are kept alive.
type Client struct {
	base         string
	http         *http.Client
	token        string
	metricsToken string
	retry        RetryPolicy
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer <token>" on the tenant routes (/v1/...), for a
// tenant configured with a token.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithMetricsToken sends "Authorization: Bearer <token>" to /metrics and /cluster, for a
// server run with metrics_token.
func WithMetricsToken(token string) Option { return func(c *Client) { c.metricsToken = token } }

// WithHTTPClient replaces the http.Client (its Transport, proxies, TLS). Its Timeout, if
// any, bounds each attempt; prefer RetryPolicy.AttemptTimeout and the call's context.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetry replaces the retry policy (DefaultRetry).
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// New returns a client of the server at baseURL ("http://127.0.0.1:7480").
func New(baseURL string, opts ...Option) *Client {
	c := &Client{
		base:  strings.TrimRight(baseURL, "/"),
		http:  &http.Client{Transport: newTransport()},
		retry: DefaultRetry,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// One host: keep as many idle connections as callers run at once.
	t.MaxIdleConnsPerHost = 256
	return t
}

// request is one call: its method, path (already escaped), query, body, and whether it may
// be repeated.
type request struct {
	method  string
	path    string
	query   url.Values
	body    any
	safe    bool
	metrics bool
	// waits is how long the server may hold the request before it answers (a receive's
	// long poll), added to the attempt's timeout.
	waits time.Duration
}

// answer is a 2xx answer, its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do runs r under the retry policy and returns its 2xx answer, or the last error.
func (c *Client) do(ctx context.Context, r request) (answer, error) {
	var body []byte
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return answer{}, fmt.Errorf("punctual: encoding the request: %w", err)
		}
		body = b
	}
	attempts := c.retry.MaxAttempts
	if !r.safe || attempts < 1 {
		attempts = 1
	}
	for attempt := 1; ; attempt++ {
		a, err := c.once(ctx, r, body)
		if err == nil {
			return a, nil
		}
		if ctx.Err() != nil || attempt >= attempts || !retriable(err) {
			return a, err
		}
		wait := c.retry.backoff(attempt, RetryAfter(err))
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return a, err // the wait would outlast the caller's deadline
		}
		if c.retry.OnRetry != nil {
			c.retry.OnRetry(attempt, err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return a, err
		case <-t.C:
		}
	}
}

// once makes one attempt: a 2xx answer, an *Error for any other status, or the transport's
// error.
func (c *Client) once(ctx context.Context, r request, body []byte) (answer, error) {
	if c.retry.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.retry.AttemptTimeout+r.waits)
		defer cancel()
	}
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, rd)
	if err != nil {
		return answer{}, fmt.Errorf("punctual: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	token := c.token
	if r.metrics {
		token = c.metricsToken
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: b}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return a, nil
	}
	return a, errorFrom(resp, b)
}

// errorFrom reads an error answer: its code and message from the body when it is the
// server's error body, else the status text.
func errorFrom(resp *http.Response, body []byte) *Error {
	e := &Error{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	var eb struct {
		Error struct {
			Code     string `json:"code"`
			Message  string `json:"message"`
			Version  int64  `json:"version"`
			FireAtUs int64  `json:"fire_at_us"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message = eb.Error.Code, eb.Error.Message
		e.Version, e.FireAtUs = eb.Error.Version, eb.Error.FireAtUs
	} else {
		e.Message = strings.TrimSpace(string(body))
		if e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
	}
	return e
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date; zero when absent or unreadable.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// retriable reports whether a failed attempt of a call that is safe to repeat may be made
// again: the server did not take it (503, 429 rate_limited, 408) or the transport failed.
// quota_exceeded is not retried: a quota frees itself only when the tenant's timers fire or
// are cancelled, which no wait of the client's brings about.
func retriable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		switch {
		case e.Status == http.StatusServiceUnavailable, e.Status == http.StatusRequestTimeout:
			return true
		case e.Status == http.StatusTooManyRequests:
			return e.Code == CodeRateLimited
		default:
			return false
		}
	}
	return true // the transport: a refused or reset connection, an attempt's timeout
}

func (c *Client) decode(a answer, v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("punctual: reading a %d answer: %w", a.status, err)
	}
	return nil
}

// call runs r and reads its 2xx answer as a T.
func call[T any](ctx context.Context, c *Client, r request) (T, answer, error) {
	var v T
	a, err := c.do(ctx, r)
	if err != nil {
		return v, a, err
	}
	if err := c.decode(a, &v); err != nil {
		return v, a, err
	}
	return v, a, nil
}

// seg escapes one path segment (tenant, key) as the server decodes it.
func seg(s string) string { return url.PathEscape(s) }
