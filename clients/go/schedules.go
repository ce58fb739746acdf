package punctual

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Schedule is a recurring schedule's definition: exactly one of Cron and EveryMs (Cron and
// Every make one), every other field optional (docs/API.md, "Recurring schedules").
type Schedule struct {
	// Cron is 5 fields, or 6 with seconds first; names of months and days; @hourly-style
	// macros.
	Cron string `json:"cron,omitempty"`
	// EveryMs is a fixed period in absolute time, at least 1,000, anchored at StartAt.
	EveryMs int64 `json:"every_ms,omitempty"`
	// TimeZone is an IANA zone name ("Europe/London"), UTC when empty; with Cron only.
	TimeZone string `json:"time_zone,omitempty"`
	// StartAt and EndAt bound the occurrences, sent as RFC 3339.
	StartAt *time.Time `json:"start_at,omitempty"`
	EndAt   *time.Time `json:"end_at,omitempty"`
	// MaxOccurrences, when not zero, ends the schedule after that many fires.
	MaxOccurrences int64 `json:"max_occurrences,omitempty"`
	// CatchUp is what fires for occurrences missed (the server's "latest" within an hour
	// when nil).
	CatchUp *CatchUp `json:"catch_up,omitempty"`
	// DST is what a local time in a daylight-saving gap or overlap does (shift, first when
	// nil).
	DST *DST `json:"dst,omitempty"`
	// Payload is any value encoding/json can write, carried by every occurrence.
	Payload any `json:"payload,omitempty"`
	// Callback and Retry are as a timer's (the tenant's callback_url when nil).
	Callback *Callback      `json:"callback,omitempty"`
	Retry    *DeliveryRetry `json:"retry,omitempty"`
}

// Cron is a schedule firing at the times of expr, in UTC unless InZone names a zone.
func Cron(expr string) Schedule { return Schedule{Cron: expr} }

// Every is a schedule firing every d (rounded down to the millisecond; at least 1 s).
func Every(d time.Duration) Schedule { return Schedule{EveryMs: d.Milliseconds()} }

// InZone returns s with its cron read in the IANA zone tz.
func (s Schedule) InZone(tz string) Schedule { s.TimeZone = tz; return s }

// WithPayload returns s carrying payload in every occurrence.
func (s Schedule) WithPayload(payload any) Schedule { s.Payload = payload; return s }

// WithCallback returns s with every occurrence delivered to url.
func (s Schedule) WithCallback(url string) Schedule { s.Callback = &Callback{URL: url}; return s }

// CatchUp is a schedule's catch-up policy: Policy "skip", "latest" or "all" for the
// occurrences missed within WindowMs (at most 7 days; the server's hour when nil).
type CatchUp struct {
	Policy   string `json:"policy,omitempty"`
	WindowMs *int64 `json:"window_ms,omitempty"`
}

// DST is a schedule's daylight-saving policy: Gap "shift" or "skip" for a local time a
// spring-forward gap skips, Overlap "first", "last" or "both" for one a fall-back repeats.
type DST struct {
	Gap     string `json:"gap,omitempty"`
	Overlap string `json:"overlap,omitempty"`
}

// RecurringSchedule is a schedule as the server holds it: where it stands and its next
// occurrences.
type RecurringSchedule struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
	// Version changes with every write and every fire.
	Version int64 `json:"version"`
	Paused  bool  `json:"paused"`
	// Sequence counts the occurrences fired so far.
	Sequence int64 `json:"sequence"`
	// Definition is the body of the last PutSchedule, as sent.
	Definition json.RawMessage `json:"definition"`
	Next       []Occurrence    `json:"next"`
	// Created is true when PutSchedule created the schedule (201), false when it replaced
	// one (200) and on every other answer.
	Created bool `json:"-"`
}

// Occurrence is one of a schedule's next occurrences: its nominal UTC instant and its local
// time in the schedule's zone (RFC 3339 with the offset).
type Occurrence struct {
	OccurrenceUs int64  `json:"occurrence_us"`
	Local        string `json:"local"`
}

// At is the occurrence's instant as a time.
func (o Occurrence) At() time.Time { return time.UnixMicro(o.OccurrenceUs).UTC() }

// ScheduleOptions asks GetSchedule for Next occurrences (1 to 100; 0 for the server's 5).
type ScheduleOptions struct {
	Next int `url:"next"`
}

// ScheduleListOptions pages the listing of schedules: at most Limit (1 to 1,000; 0 for the
// server's 100) after the key After (the previous page's Next).
type ScheduleListOptions struct {
	Limit int    `url:"limit"`
	After string `url:"after"`
}

// ListedSchedule is a schedule as a listing shows it.
type ListedSchedule struct {
	Key      string `json:"key"`
	Version  int64  `json:"version"`
	Paused   bool   `json:"paused"`
	Sequence int64  `json:"sequence"`
}

// SchedulePage is one page of schedules; Next is empty on the last page.
type SchedulePage struct {
	Schedules []ListedSchedule `json:"schedules"`
	Next      string           `json:"next,omitempty"`
}

func schedulePath(tenant, key string) string { return "/v1/schedules/" + seg(tenant) + "/" + seg(key) }

// PutSchedule creates the schedule s under (tenant, key) or replaces the one there, which
// keeps its Sequence, its pause and what it has spent (an upsert, so it is retried). A
// definition that cannot fire is 400 invalid_field, the message naming the field.
func (c *Client) PutSchedule(ctx context.Context, tenant, key string, s Schedule) (RecurringSchedule, error) {
	r, a, err := call[RecurringSchedule](ctx, c, request{method: http.MethodPut, path: schedulePath(tenant, key), body: s, safe: true})
	if err != nil {
		return RecurringSchedule{}, err
	}
	r.Created = a.status == http.StatusCreated
	return r, nil
}

// GetSchedule reads the schedule under (tenant, key) with its next o.Next occurrences;
// IsNotFound(err) when there is none.
func (c *Client) GetSchedule(ctx context.Context, tenant, key string, o ScheduleOptions) (RecurringSchedule, error) {
	q := url.Values{}
	if o.Next > 0 {
		q.Set("next", strconv.Itoa(o.Next))
	}
	return c.scheduleCall(ctx, request{method: http.MethodGet, path: schedulePath(tenant, key), query: q, safe: true})
}

// DeleteSchedule removes the schedule under (tenant, key): no occurrence due after the
// answer fires. IsNotFound(err) when there is none, also when an earlier attempt of this
// call whose answer was lost removed it.
func (c *Client) DeleteSchedule(ctx context.Context, tenant, key string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: schedulePath(tenant, key), safe: true})
	return err
}

// PauseSchedule pauses the schedule under (tenant, key): no occurrence due after the answer
// fires until ResumeSchedule. Pausing a paused schedule changes nothing, so it is retried.
func (c *Client) PauseSchedule(ctx context.Context, tenant, key string) (RecurringSchedule, error) {
	return c.scheduleCall(ctx, request{method: http.MethodPost, path: schedulePath(tenant, key) + "/pause", safe: true})
}

// ResumeSchedule resumes the schedule under (tenant, key); what it missed while paused fires
// under its catch-up policy. Resuming a running schedule changes nothing, so it is retried.
func (c *Client) ResumeSchedule(ctx context.Context, tenant, key string) (RecurringSchedule, error) {
	return c.scheduleCall(ctx, request{method: http.MethodPost, path: schedulePath(tenant, key) + "/resume", safe: true})
}

func (c *Client) scheduleCall(ctx context.Context, r request) (RecurringSchedule, error) {
	s, _, err := call[RecurringSchedule](ctx, c, r)
	return s, err
}

// ListSchedules lists the tenant's schedules by key, one page; the next page is asked with
// After set to this page's Next.
func (c *Client) ListSchedules(ctx context.Context, tenant string, o ScheduleListOptions) (SchedulePage, error) {
	a, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/schedules/" + seg(tenant), query: pageQuery(o.Limit, o.After), safe: true})
	if err != nil {
		return SchedulePage{}, err
	}
	var p SchedulePage
	return p, c.decode(a, &p)
}
