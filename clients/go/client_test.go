package punctual_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	punctual "punctual/client"
)

func TestPutGetCancelRoundTrip(t *testing.T) {
	c := punctual.New(open.URL)
	s, err := c.Put(ctx(t), "shop", "order:8812", punctual.After(15*time.Minute).WithPayload(map[string]int{"order": 8812}))
	if err != nil || !s.Created || s.Key != "order:8812" || s.Tenant != "shop" {
		t.Fatalf("first put: %+v %v", s, err)
	}
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	r, err := c.Put(ctx(t), "shop", "order:8812", punctual.At(at).WithPayload(json.RawMessage(`{"order": 8812,  "v":2}`)))
	if err != nil || r.Created || r.Version <= s.Version || !r.FireAt().Equal(at) {
		t.Fatalf("replacement: %+v %v (first %+v, at %v)", r, err, s, at)
	}
	got, err := c.Get(ctx(t), "shop", "order:8812")
	if err != nil || got.Version != r.Version || string(got.Payload) != `{"order":8812,"v":2}` || got.FireAtUs != at.UnixMicro() {
		t.Fatalf("get: %+v %v", got, err)
	}
	ms, err := c.Put(ctx(t), "shop", "ms", punctual.AtUnixMilli(at.UnixMilli()))
	if err != nil || ms.FireAtUs != at.UnixMilli()*1000 {
		t.Fatalf("fire_at_ms: %+v %v", ms, err)
	}
	if err := c.Cancel(ctx(t), "shop", "order:8812"); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx(t), "shop", "order:8812"); !punctual.IsNotFound(err) {
		t.Fatalf("second cancel: %v", err)
	}
	_, err = c.Get(ctx(t), "shop", "order:8812")
	var e *punctual.Error
	if !errors.As(err, &e) || e.Status != 404 || e.Code != punctual.CodeNotFound || e.Message == "" {
		t.Fatalf("get after cancel: %#v", err)
	}
}

func TestBadInputIsATypedErrorAndNotRetried(t *testing.T) {
	retries := 0
	p := punctual.DefaultRetry
	p.OnRetry = func(int, error, time.Duration) { retries++ }
	c := punctual.New(open.URL, punctual.WithRetry(p))
	cases := []struct {
		tenant, key string
		timer       punctual.Timer
		code        string
	}{
		{"a b", "k", punctual.After(time.Second), punctual.CodeInvalidTenant},
		{"shop", "a/b", punctual.After(time.Second), punctual.CodeInvalidKey},
		{"shop", "k", punctual.Timer{}, punctual.CodeInvalidDeadline},
		{"shop", "k", punctual.After(11 * 365 * 24 * time.Hour), punctual.CodeDeadlineOutOfRange},
		{"shop", "k", punctual.After(time.Second).WithPayload(strings.Repeat("x", 70000)), punctual.CodePayloadTooLarge},
		{"shop", "k", punctual.After(time.Second).WithCallback("http://elsewhere.example/"), punctual.CodeCallbackNotAllowed},
	}
	for _, tc := range cases {
		_, err := c.Put(ctx(t), tc.tenant, tc.key, tc.timer)
		if punctual.ErrorCode(err) != tc.code {
			t.Errorf("%s/%s: want %s, got %v", tc.tenant, tc.key, tc.code, err)
		}
	}
	if retries != 0 {
		t.Fatalf("a 4xx was retried %d times", retries)
	}
}

func TestBatchResultsInOrderEachFailingAlone(t *testing.T) {
	c := punctual.New(open.URL)
	items := []punctual.BatchItem{
		{Key: "b1", Timer: punctual.After(time.Hour)},
		{Key: "b/2", Timer: punctual.After(time.Hour)},
		{Key: "b3", Timer: punctual.AtUnixMilli(1896084900000).WithPayload("x")},
		{Key: "b1", Timer: punctual.After(2 * time.Hour)},
	}
	res, err := c.Batch(ctx(t), "batch", items)
	if err != nil || len(res) != 4 {
		t.Fatalf("%+v %v", res, err)
	}
	want := []int{201, 400, 201, 200}
	for i, r := range res {
		if r.Status != want[i] || r.Key == nil || *r.Key != items[i].Key {
			t.Errorf("item %d: %+v", i, r)
		}
	}
	if punctual.ErrorCode(res[1].Err()) != punctual.CodeInvalidKey || res[0].Err() != nil || res[0].Version == 0 {
		t.Errorf("results: %+v", res)
	}
	if _, err := c.Batch(ctx(t), "batch", nil); punctual.ErrorCode(err) != punctual.CodeEmptyBatch {
		t.Errorf("empty batch: %v", err)
	}
	got, err := c.Get(ctx(t), "batch", "b3")
	if err != nil || string(got.Payload) != `"x"` || got.FireAtUs != 1896084900000000 {
		t.Errorf("b3: %+v %v", got, err)
	}
}

// A webhook that the receiver refuses becomes a dead letter; re-driving it while a timer is
// pending under its key is 409 timer_pending; re-driven, it is delivered again; discarded, it
// is gone.
func TestDeadLettersListRedriveConflictDiscard(t *testing.T) {
	c := punctual.New(open.URL)
	var mu sync.Mutex
	status := http.StatusBadRequest // permanent: a dead letter at once
	delivered := make(chan punctual.WebhookDelivery, 8)
	hook := mount("/dead", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d punctual.WebhookDelivery
		_ = json.NewDecoder(r.Body).Decode(&d)
		mu.Lock()
		st := status
		mu.Unlock()
		w.WriteHeader(st)
		delivered <- d
	}))
	for _, k := range []string{"d1", "d2", "d3"} {
		if _, err := c.Put(ctx(t), "deadt", k, punctual.After(0).WithCallback(hook).WithPayload(k)); err != nil {
			t.Fatal(err)
		}
	}
	var dead []punctual.DeadLetter
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		var err error
		if dead, err = c.DeadLetters(ctx(t), "deadt", punctual.DeadListOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(dead) == 3 {
			break
		}
	}
	if len(dead) != 3 || dead[0].Key != "d1" || dead[0].LastStatus != 400 || dead[0].Callback == nil || dead[0].Callback.URL != hook || string(dead[0].Payload) != `"d1"` {
		t.Fatalf("dead letters: %+v", dead)
	}
	page, err := c.DeadLetters(ctx(t), "deadt", punctual.DeadListOptions{Limit: 1, After: "d1"})
	if err != nil || len(page) != 1 || page[0].Key != "d2" {
		t.Fatalf("page after d1: %+v %v", page, err)
	}

	if _, err := c.Put(ctx(t), "deadt", "d1", punctual.After(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Redrive(ctx(t), "deadt", "d1")
	var e *punctual.Error
	if !errors.As(err, &e) || e.Status != 409 || e.Code != punctual.CodeTimerPending {
		t.Fatalf("re-drive over a pending timer: %v", err)
	}
	if err := c.Cancel(ctx(t), "deadt", "d1"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	status = http.StatusNoContent
	mu.Unlock()
	for len(delivered) > 0 {
		<-delivered
	}
	s, err := c.Redrive(ctx(t), "deadt", "d1")
	if err != nil || s.Version != dead[0].Version {
		t.Fatalf("re-drive: %+v %v", s, err)
	}
	select {
	case d := <-delivered:
		if d.Key != "d1" || d.Version != dead[0].Version {
			t.Fatalf("re-driven delivery: %+v", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the re-driven dead letter was not delivered")
	}
	if err := c.Discard(ctx(t), "deadt", "d2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Discard(ctx(t), "deadt", "d2"); !punctual.IsNotFound(err) {
		t.Fatalf("second discard: %v", err)
	}
	if _, err := c.Redrive(ctx(t), "deadt", "d2"); !punctual.IsNotFound(err) {
		t.Fatalf("re-drive of a discarded letter: %v", err)
	}
}

func TestHealthMetricsCluster(t *testing.T) {
	c := punctual.New(open.URL)
	h, err := c.Health(ctx(t))
	if err != nil || h.Status != "ok" || h.Store != "journal" || h.Shards != 2 {
		t.Fatalf("%+v %v", h, err)
	}
	m, err := c.Metrics(ctx(t))
	if err != nil || !strings.HasSuffix(strings.TrimSpace(m), "# EOF") || !strings.Contains(m, "punctual_") {
		t.Fatalf("metrics: %v %.200s", err, m)
	}
	if _, err := c.Cluster(ctx(t)); !punctual.IsNotFound(err) {
		t.Fatalf("cluster on a single node: %v", err)
	}
}

func TestTokensAndUnknownTenants(t *testing.T) {
	anon := punctual.New(tenants.URL)
	_, err := anon.Put(ctx(t), "acme", "k", punctual.After(time.Hour))
	if punctual.ErrorCode(err) != punctual.CodeUnauthorized {
		t.Fatalf("no token: %v", err)
	}
	wrong := punctual.New(tenants.URL, punctual.WithToken(stdToken))
	if _, err := wrong.Get(ctx(t), "acme", "k"); punctual.ErrorCode(err) != punctual.CodeUnauthorized {
		t.Fatalf("another tenant's token: %v", err)
	}
	if _, err := anon.Put(ctx(t), "nobody", "k", punctual.After(time.Hour)); punctual.ErrorCode(err) != punctual.CodeUnknownTenant {
		t.Fatalf("unknown tenant: %v", err)
	}
	c := punctual.New(tenants.URL, punctual.WithToken(acmeToken))
	if _, err := c.Put(ctx(t), "acme", "k", punctual.After(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx(t), "acme", "k"); err != nil {
		t.Fatal(err)
	}
}

// 429 quota_exceeded carries Retry-After and is not retried: only a fire or a cancel frees
// a slot.
func TestQuotaExceededIsNotRetried(t *testing.T) {
	retries := 0
	p := punctual.DefaultRetry
	p.OnRetry = func(int, error, time.Duration) { retries++ }
	c := punctual.New(tenants.URL, punctual.WithToken(quotaToken), punctual.WithRetry(p))
	for _, k := range []string{"q1", "q2"} {
		if _, err := c.Put(ctx(t), "capped", k, punctual.After(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Put(ctx(t), "capped", "q3", punctual.After(time.Hour))
	var e *punctual.Error
	if !errors.As(err, &e) || e.Status != 429 || e.Code != punctual.CodeQuotaExceeded || e.RetryAfter < time.Second {
		t.Fatalf("past the quota: %#v", err)
	}
	if retries != 0 {
		t.Fatalf("quota_exceeded was retried %d times", retries)
	}
	if _, err := c.Put(ctx(t), "capped", "q1", punctual.After(2*time.Hour)); err != nil {
		t.Fatalf("a replacement past the quota: %v", err)
	}
}

// 429 rate_limited: without retries the caller gets Retry-After; with them the call waits at
// least that long and succeeds; a deadline shorter than the wait ends the call at once.
func TestRateLimitedWaitsRetryAfter(t *testing.T) {
	once := punctual.New(tenants.URL, punctual.WithToken(slowToken), punctual.WithRetry(punctual.NoRetry))
	var limited *punctual.Error
	for i := 0; i < 5 && limited == nil; i++ {
		_, err := once.Put(ctx(t), "slow", "r", punctual.After(time.Hour))
		errors.As(err, &limited)
	}
	if limited == nil || limited.Status != 429 || limited.Code != punctual.CodeRateLimited || limited.RetryAfter < time.Second {
		t.Fatalf("5 calls at once on a rate of 1/s: %#v", limited)
	}

	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	c := punctual.New(tenants.URL, punctual.WithToken(slowToken))
	_, err := c.Put(short, "slow", "r", punctual.After(time.Hour))
	if punctual.ErrorCode(err) != punctual.CodeRateLimited || time.Since(start) > 250*time.Millisecond {
		t.Fatalf("a deadline shorter than Retry-After: %v after %v", err, time.Since(start))
	}

	var waits []time.Duration
	p := punctual.DefaultRetry
	p.OnRetry = func(_ int, err error, wait time.Duration) {
		if punctual.ErrorCode(err) == punctual.CodeRateLimited {
			waits = append(waits, wait)
		}
	}
	c = punctual.New(tenants.URL, punctual.WithToken(slowToken), punctual.WithRetry(p))
	for i := 0; i < 3; i++ {
		if _, err := c.Put(ctx(t), "slow", "r", punctual.After(time.Hour)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if len(waits) == 0 {
		t.Fatal("three PUTs at a rate of 1/s were never limited")
	}
	for _, w := range waits {
		if w < time.Second {
			t.Fatalf("waited %v, less than Retry-After", waits)
		}
	}
}

// The store stopped by SIGSTOP: punctual answers 503 store_unavailable with Retry-After
// after its 2-second bound; the PUT waits at least that long, is tried again, and succeeds
// once the store is continued.
func TestStoreUnavailableIsRetriedAfterRetryAfter(t *testing.T) {
	redis, err := startRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer redis.stop()
	s, err := startServer("", "--redis", redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	var mu sync.Mutex
	var seen []error
	var waited time.Duration
	p := punctual.DefaultRetry
	p.OnRetry = func(_ int, err error, wait time.Duration) {
		mu.Lock()
		seen = append(seen, err)
		waited += wait
		mu.Unlock()
	}
	c := punctual.New(s.URL, punctual.WithRetry(p))
	redis.signal(t, syscall.SIGSTOP)
	resumed := time.AfterFunc(2500*time.Millisecond, func() { redis.signal(t, syscall.SIGCONT) })
	defer resumed.Stop()
	r, err := c.Put(ctx(t), "shop", "k", punctual.After(time.Hour))
	if err != nil {
		t.Fatalf("%+v %v (retries after %v)", r, err, seen)
	}
	mu.Lock()
	defer mu.Unlock()
	var e *punctual.Error
	if len(seen) == 0 || !errors.As(seen[0], &e) || e.Status != 503 || e.Code != punctual.CodeStoreUnavailable || e.RetryAfter < time.Second || waited < e.RetryAfter {
		t.Fatalf("retried after %v, waiting %v", seen, waited)
	}
}

// A server stopped by SIGSTOP answers nothing: each attempt times out, the PUT is tried again,
// and succeeds once the server is continued. A re-drive, never retried, makes one attempt.
func TestStoppedServerPutRetriesUntilContinued(t *testing.T) {
	var mu sync.Mutex
	var seen []error
	p := punctual.DefaultRetry
	p.AttemptTimeout = 300 * time.Millisecond
	p.MaxAttempts = 20
	p.OnRetry = func(_ int, err error, _ time.Duration) { mu.Lock(); seen = append(seen, err); mu.Unlock() }
	c := punctual.New(open.URL, punctual.WithRetry(p))

	open.signal(t, syscall.SIGSTOP)
	resumed := time.AfterFunc(1500*time.Millisecond, func() { _ = open.cmd.Process.Signal(syscall.SIGCONT) })
	defer func() { resumed.Stop(); open.signal(t, syscall.SIGCONT) }()
	start := time.Now()
	r, err := c.Put(ctx(t), "stall", "k", punctual.After(time.Hour).WithPayload("after"))
	if err != nil || time.Since(start) < 1400*time.Millisecond {
		t.Fatalf("%+v %v after %v (%v)", r, err, time.Since(start), seen)
	}
	mu.Lock()
	n := len(seen)
	first := seen[0]
	mu.Unlock()
	if n < 2 || !errors.Is(first, context.DeadlineExceeded) {
		t.Fatalf("attempts before the server came back: %v", seen)
	}
	// The attempts that timed out were sent too: the server applies each once it runs again,
	// so the pending timer is one of them (an upsert each, the same deadline and payload),
	// not necessarily the one whose answer came back.
	got, err := punctual.New(open.URL).Get(ctx(t), "stall", "k")
	if err != nil || string(got.Payload) != `"after"` {
		t.Fatalf("%+v %v", got, err)
	}

	// The caller's deadline bounds the retries.
	open.signal(t, syscall.SIGSTOP)
	short, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := c.Put(short, "stall", "k", punctual.After(time.Hour)); err == nil || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("deadline 800 ms: %v after %v", err, time.Since(start))
	}
	mu.Lock()
	seen = nil
	mu.Unlock()
	if _, err := c.Redrive(ctx(t), "stall", "nothing"); err == nil {
		t.Fatal("a re-drive to a stopped server succeeded")
	}
	mu.Lock()
	if len(seen) != 0 {
		t.Fatalf("a re-drive was retried: %v", seen)
	}
	mu.Unlock()
	open.signal(t, syscall.SIGCONT)
}

func TestConditionalWritesAndCancels(t *testing.T) {
	c := punctual.New(open.URL)
	first, err := c.Put(ctx(t), "shop", "cond", punctual.After(time.Hour).IfAbsent())
	if err != nil || !first.Created {
		t.Fatalf("create only: %+v %v", first, err)
	}
	_, err = c.Put(ctx(t), "shop", "cond", punctual.After(time.Minute).IfAbsent())
	var e *punctual.Error
	if !errors.As(err, &e) || !punctual.IsConflict(err) || e.Code != punctual.CodeExists || e.Version != first.Version || e.FireAtUs != first.FireAtUs {
		t.Fatalf("exists: %#v (first %+v)", err, first)
	}
	_, err = c.Put(ctx(t), "shop", "cond", punctual.After(time.Minute).IfVersionIs(first.Version+1))
	if !errors.As(err, &e) || e.Code != punctual.CodeVersionMismatch || e.Version != first.Version {
		t.Fatalf("version_mismatch: %#v", err)
	}
	second, err := c.Put(ctx(t), "shop", "cond", punctual.After(time.Hour).IfVersionIs(first.Version))
	if err != nil || second.Created || second.Version <= first.Version {
		t.Fatalf("compare and set: %+v %v", second, err)
	}
	if _, err := c.Put(ctx(t), "shop", "cond-none", punctual.After(time.Hour).IfVersionIs(7)); !punctual.IsNotFound(err) {
		t.Fatalf("if_version on an absent key: %v", err)
	}
	if err := c.CancelIf(ctx(t), "shop", "cond", punctual.CancelOptions{IfVersion: first.Version}); !punctual.IsConflict(err) {
		t.Fatalf("cancel of an old version: %v", err)
	}
	if err := c.CancelIf(ctx(t), "shop", "cond", punctual.CancelOptions{IfVersion: second.Version}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Batch(ctx(t), "shop", []punctual.BatchItem{
		{Key: "cond-b", Timer: punctual.After(time.Hour).IfAbsent()},
		{Key: "cond-b", Timer: punctual.After(time.Hour).IfAbsent()},
	})
	if err != nil || len(res) != 2 || res[0].Status != 201 || res[1].Status != 409 || !punctual.IsConflict(res[1].Err()) || res[1].Error.Version != res[0].Version {
		t.Fatalf("batch: %+v %v", res, err)
	}
	for _, k := range []string{"cond-l1", "cond-l2", "cond-l3"} {
		if _, err := c.Put(ctx(t), "shop", k, punctual.After(time.Hour).WithPayload(k)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.List(ctx(t), "shop", punctual.ListOptions{Prefix: "cond-l", Limit: 2, Payloads: true})
	if err != nil || len(p.Timers) != 2 || p.Timers[0].Key != "cond-l1" || p.Next != "cond-l2" || string(p.Timers[0].Payload) != `"cond-l1"` {
		t.Fatalf("list: %+v %v", p, err)
	}
	p, err = c.List(ctx(t), "shop", punctual.ListOptions{Prefix: "cond-l", After: p.Next})
	if err != nil || len(p.Timers) != 1 || p.Timers[0].Key != "cond-l3" || p.Next != "" {
		t.Fatalf("list, last page: %+v %v", p, err)
	}
	d, err := c.Put(ctx(t), "shop", "cond-d", punctual.After(time.Hour).WithDebounce(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx(t), "shop", "cond-d")
	if err != nil || got.Debounce == nil || got.Debounce.MaxWaitMs != 60000 || got.Debounce.CapUs != got.Debounce.FirstAtUs+60_000_000 || d.FireAtUs != got.Debounce.CapUs {
		t.Fatalf("debounce: %+v %+v %v", d, got.Debounce, err)
	}
}
