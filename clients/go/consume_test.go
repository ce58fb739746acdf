package punctual_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	punctual "punctual/client"
)

// The consumers' tenants, one per test so that no test sees another's messages: each has a
// queue and a token of its own.
var consumeNames = []string{"orders", "work", "flaky", "lingering", "stopping", "prefetched", "panicky"}

func queueToken(name string) string { return name + "-token-0123456789abcdef0123456789abcdef" }

func consumeTenants() string {
	var b strings.Builder
	for _, n := range consumeNames {
		fmt.Fprintf(&b, "[tenants.%s]\ntoken = %q\nqueue = true\n", n, queueToken(n))
	}
	// Two requests a second: a consumer's receives are refused 429 rate_limited.
	fmt.Fprintf(&b, "[tenants.throttled]\ntoken = %q\nqueue = true\nmax_requests_per_s = 2\nburst = 2\n", queueToken("throttled"))
	return b.String()
}

func queueClient(name string) *punctual.Client {
	return punctual.New(tenants.URL, punctual.WithToken(queueToken(name)))
}

// putDue puts n timers due at once, keyed prefix-0 … prefix-(n-1), in batches.
func putDue(t *testing.T, c *punctual.Client, tenant, prefix string, n int) {
	t.Helper()
	for start := 0; start < n; start += 2000 {
		var items []punctual.BatchItem
		for i := start; i < n && i < start+2000; i++ {
			items = append(items, punctual.BatchItem{Key: fmt.Sprintf("%s-%d", prefix, i), Timer: punctual.After(0)})
		}
		res, err := c.Batch(ctx(t), tenant, items)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err() != nil {
				t.Fatalf("batch item: %v", r.Err())
			}
		}
	}
}

// consumeAsync runs c.Consume until the returned stop is called; stop waits for it to return
// and gives its error.
func consumeAsync(c *punctual.Client, tenant string, h punctual.Handler, o punctual.ConsumeOptions) (stop func() error) {
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Consume(cctx, tenant, h, o) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Consume did not return within 30 s of its stop")
		}
	}
}

// waitFor polls cond every 10 ms, failing the test after an absurdly long bound.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

func emptyQueue(t *testing.T, c *punctual.Client, tenant string) {
	t.Helper()
	d, err := c.Queue(ctx(t), tenant)
	if err != nil || d.Depth != 0 || d.InFlight != 0 {
		t.Fatalf("queue after the consumers: %+v %v", d, err)
	}
}

// 10,000 messages, two consumer loops: each handled exactly once, all acknowledged.
func TestConsumeTwoLoopsExactlyOnce(t *testing.T) {
	c := queueClient("work")
	const n = 10000
	putDue(t, c, "work", "job", n)
	type id struct {
		key     string
		version int64
	}
	var mu sync.Mutex
	seen := map[id]int{}
	var handled atomic.Int64
	var problems []error
	h := func(ctx context.Context, m punctual.Message) error {
		mu.Lock()
		seen[id{m.Key, m.Version}]++
		mu.Unlock()
		handled.Add(1)
		return nil
	}
	o := punctual.ConsumeOptions{Concurrency: 1, Visibility: time.Minute, OnError: func(err error) {
		mu.Lock()
		problems = append(problems, err)
		mu.Unlock()
	}}
	stopA := consumeAsync(c, "work", h, o)
	stopB := consumeAsync(c, "work", h, o)
	waitFor(t, "10,000 messages handled", 60*time.Second, func() bool { return handled.Load() >= n })
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n || handled.Load() != n {
		t.Fatalf("%d distinct messages, %d handlings, of %d", len(seen), handled.Load(), n)
	}
	byKey := map[string]int{}
	for k, times := range seen {
		byKey[k.key] += times
	}
	for i := 0; i < n; i++ {
		if key := fmt.Sprintf("job-%d", i); byKey[key] != 1 {
			t.Fatalf("%s handled %d times", key, byKey[key])
		}
	}
	if len(problems) > 0 {
		t.Fatalf("the loops reported: %v", problems[0])
	}
	emptyQueue(t, c, "work")
}

// A handler that fails once: its message comes back after the nack delay, its second
// receive, and is acknowledged then.
func TestConsumeNackedMessageComesBack(t *testing.T) {
	c := queueClient("flaky")
	if _, err := c.Put(ctx(t), "flaky", "once", punctual.After(0)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var counts []int
	var times []time.Time
	stop := consumeAsync(c, "flaky", func(ctx context.Context, m punctual.Message) error {
		mu.Lock()
		defer mu.Unlock()
		counts = append(counts, m.ReceiveCount)
		times = append(times, time.Now())
		if len(counts) == 1 {
			return errors.New("the first try fails")
		}
		return nil
	}, punctual.ConsumeOptions{Concurrency: 2, NackDelay: 300 * time.Millisecond, Visibility: time.Minute})
	waitFor(t, "the second handling", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(counts) >= 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(counts) != 2 || counts[0] != 1 || counts[1] != 2 {
		t.Fatalf("receive counts: %v", counts)
	}
	if gap := times[1].Sub(times[0]); gap < 300*time.Millisecond {
		t.Fatalf("came back %s after its nack with a delay of 300 ms", gap)
	}
	emptyQueue(t, c, "flaky")
}

// A handler that panics does not take the loop (or the process) down: its message is nacked
// as for an error, comes back with its receive count one higher, and the loop goes on to
// acknowledge it on the next handling.
func TestConsumeAPanickingHandlerIsNackedAndTheLoopGoesOn(t *testing.T) {
	c := queueClient("panicky")
	if _, err := c.Put(ctx(t), "panicky", "boom", punctual.After(0)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var counts []int
	var observed []error
	o := punctual.ConsumeOptions{Concurrency: 2, NackDelay: 100 * time.Millisecond, Visibility: time.Minute,
		OnError: func(err error) { mu.Lock(); observed = append(observed, err); mu.Unlock() }}
	stop := consumeAsync(c, "panicky", func(ctx context.Context, m punctual.Message) error {
		mu.Lock()
		counts = append(counts, m.ReceiveCount)
		first := len(counts) == 1
		mu.Unlock()
		if first {
			panic("the handler's own bug")
		}
		return nil
	}, o)
	waitFor(t, "the second handling", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(counts) >= 2 })
	if err := stop(); err != nil {
		t.Fatalf("the loop ended with %v after a handler's panic", err)
	}
	if len(counts) != 2 || counts[0] != 1 || counts[1] != 2 {
		t.Fatalf("receive counts: %v", counts)
	}
	if len(observed) == 0 || !strings.Contains(observed[0].Error(), "the handler's own bug") {
		t.Fatalf("OnError saw %v, not the panic", observed)
	}
	emptyQueue(t, c, "panicky")
}

// A handler running three times its visibility keeps its lease: the other loop never gets
// the message, which is received once and acknowledged.
func TestConsumeExtendsASlowHandler(t *testing.T) {
	c := queueClient("lingering")
	if _, err := c.Put(ctx(t), "lingering", "long", punctual.After(0)); err != nil {
		t.Fatal(err)
	}
	var handlings, lost atomic.Int64
	h := func(ctx context.Context, m punctual.Message) error {
		handlings.Add(1)
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
			lost.Add(1)
		}
		return nil
	}
	var reported atomic.Value
	o := punctual.ConsumeOptions{Visibility: time.Second, Wait: 200 * time.Millisecond, OnError: func(err error) { reported.Store(err) }}
	stopA := consumeAsync(c, "lingering", h, o)
	stopB := consumeAsync(c, "lingering", h, o)
	waitFor(t, "the handling", 20*time.Second, func() bool { return handlings.Load() >= 1 })
	time.Sleep(3500 * time.Millisecond) // past its end, so that a second receive would have come
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if handlings.Load() != 1 || lost.Load() != 0 || reported.Load() != nil {
		t.Fatalf("handlings %d, leases lost %d, reported %v", handlings.Load(), lost.Load(), reported.Load())
	}
	emptyQueue(t, c, "lingering")
}

// Stopping while handlers run: Consume returns only once they are done, with their
// messages acknowledged, and receives no more.
func TestConsumeStopWaitsForRunningHandlers(t *testing.T) {
	c := queueClient("stopping")
	putDue(t, c, "stopping", "s", 3)
	release := make(chan struct{})
	var started, finished atomic.Int64
	stop := consumeAsync(c, "stopping", func(ctx context.Context, m punctual.Message) error {
		started.Add(1)
		<-release
		time.Sleep(100 * time.Millisecond)
		finished.Add(1)
		return nil
	}, punctual.ConsumeOptions{Concurrency: 3, Visibility: time.Minute})
	waitFor(t, "three handlers running", 20*time.Second, func() bool { return started.Load() == 3 })
	returned := make(chan error, 1)
	go func() { returned <- stop() }()
	select {
	case err := <-returned:
		t.Fatalf("Consume returned while its handlers ran: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := c.Put(ctx(t), "stopping", "after-stop", punctual.After(0)); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	if finished.Load() != 3 || started.Load() != 3 {
		t.Fatalf("started %d, finished %d when Consume returned", started.Load(), finished.Load())
	}
	waitFor(t, "the message put after the stop, ready", 10*time.Second, func() bool {
		d, err := c.Queue(ctx(t), "stopping")
		return err == nil && d.Ready == 1
	})
	d, err := c.Queue(ctx(t), "stopping")
	if err != nil || d.InFlight != 0 || d.Depth != 1 {
		t.Fatalf("after the stop: %+v %v", d, err)
	}
}

// Stopping with prefetched messages not begun gives them back at once.
func TestConsumeStopGivesBackPrefetchedMessages(t *testing.T) {
	c := queueClient("prefetched")
	putDue(t, c, "prefetched", "p", 5)
	release := make(chan struct{})
	var started atomic.Int64
	stop := consumeAsync(c, "prefetched", func(ctx context.Context, m punctual.Message) error {
		started.Add(1)
		<-release
		return nil
	}, punctual.ConsumeOptions{Prefetch: 10, Visibility: time.Minute})
	waitFor(t, "all five held", 20*time.Second, func() bool {
		d, err := c.Queue(ctx(t), "prefetched")
		return err == nil && d.InFlight == 5 && started.Load() == 1
	})
	done := make(chan error, 1)
	go func() { done <- stop() }()
	time.Sleep(100 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if started.Load() != 1 {
		t.Fatalf("%d handlers began", started.Load())
	}
	if d, err := c.Queue(ctx(t), "prefetched"); err != nil || d.InFlight != 0 || d.Ready != 4 {
		t.Fatalf("after the stop: %+v %v", d, err)
	}
}

// exchange is one request the consumer made: when, its route and its answer.
type exchange struct {
	at         time.Time
	path       string
	status     int
	retryAfter string
}

type recorder struct {
	mu  sync.Mutex
	log []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	at := time.Now()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.log = append(r.log, exchange{at, req.URL.Path, resp.StatusCode, resp.Header.Get("Retry-After")})
		r.mu.Unlock()
	}
	return resp, err
}

// A receive refused 429 rate_limited is not repeated at once: the next comes after its
// Retry-After, and every message is still handled once.
func TestConsumeBacksOffAfterRateLimitedReceives(t *testing.T) {
	rec := &recorder{}
	c := punctual.New(tenants.URL, punctual.WithToken(queueToken("throttled")), punctual.WithHTTPClient(&http.Client{Transport: rec}))
	putDue(t, c, "throttled", "r", 3)
	var mu sync.Mutex
	seen := map[string]int{}
	var limited atomic.Int64
	stop := consumeAsync(c, "throttled", func(ctx context.Context, m punctual.Message) error {
		mu.Lock()
		seen[m.Key]++
		mu.Unlock()
		return nil
	}, punctual.ConsumeOptions{Visibility: time.Minute, Wait: time.Second, OnError: func(err error) {
		if punctual.ErrorCode(err) == punctual.CodeRateLimited {
			limited.Add(1)
		}
	}})
	waitFor(t, "three messages handled and a receive refused", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 3 && limited.Load() > 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s handled %d times", k, n)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var receives []exchange
	for _, e := range rec.log {
		if strings.HasSuffix(e.path, "/receive") {
			receives = append(receives, e)
		}
	}
	refused := 0
	for i, e := range receives {
		if e.status != 429 || i+1 == len(receives) {
			continue
		}
		refused++
		wait, err := time.ParseDuration(e.retryAfter + "s")
		if err != nil || wait <= 0 {
			t.Fatalf("a 429 with Retry-After %q", e.retryAfter)
		}
		// The request's start is before the server's answer: the bound is loose by the
		// request's own time, never short of what a backoff of Retry-After gives.
		if gap := receives[i+1].at.Sub(e.at); gap < wait {
			t.Fatalf("the receive after a 429 with Retry-After %s came %s later", e.retryAfter, gap)
		}
	}
	if refused == 0 {
		t.Fatalf("no receive was refused and followed by another: %+v", receives)
	}
}

// A tenant without a queue stops the loop with the receive's error.
func TestConsumeReturnsAFailedReceive(t *testing.T) {
	acme := punctual.New(tenants.URL, punctual.WithToken(acmeToken))
	err := acme.Consume(ctx(t), "acme", func(context.Context, punctual.Message) error { return nil }, punctual.ConsumeOptions{})
	if !punctual.IsNotFound(err) {
		t.Fatalf("Consume of a tenant without a queue: %v", err)
	}
}
