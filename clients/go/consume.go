package punctual

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Handler handles one received message. Nil acknowledges it; an error (or a panic) nacks it,
// ready again after ConsumeOptions.NackDelay. Its context is cancelled when the message's
// lease is lost (an extend answered it expired: another consumer may have it now), not when
// the consumer stops: a stopped consumer lets its running handlers finish.
type Handler func(ctx context.Context, m Message) error

// ConsumeOptions shapes Consume; zero fields take the defaults.
type ConsumeOptions struct {
	// Concurrency is the most handlers run at once (1). A receive asks for as many messages
	// as handlers are free, so no message waits leased for a handler.
	Concurrency int
	// Prefetch is how many messages more than Concurrency it may hold leased, waiting for a
	// handler (0). With a prefetch a receive waits until half of it is free, so that it brings
	// a batch rather than the one message a finished handler frees: fewer requests per
	// message. The leases of waiting messages are extended as a running handler's are, and
	// those not begun when the consumer stops are given back at once.
	Prefetch int
	// Visibility is each message's lease (30 s): a handler still running when half of it is
	// left has its lease extended by Visibility again, for as long as it runs.
	Visibility time.Duration
	// Wait is a receive's long poll when no message is ready (20 s, the server's most).
	Wait time.Duration
	// NackDelay is how long a message whose handler failed waits before it is ready again
	// (5 s); negative is no delay.
	NackDelay time.Duration
	// OnError, when set, observes what the loop goes on after: a receive it backs off from,
	// an ack, nack or extend that failed, a receipt that was no longer leased.
	OnError func(err error)
}

// settleTimeout bounds each ack, nack and extend of a consumer, retries included.
const settleTimeout = 30 * time.Second

func (o ConsumeOptions) withDefaults() ConsumeOptions {
	if o.Concurrency < 1 {
		o.Concurrency = 1
	}
	if o.Prefetch < 0 {
		o.Prefetch = 0
	}
	if o.Visibility <= 0 {
		o.Visibility = 30 * time.Second
	} else if o.Visibility < time.Millisecond {
		o.Visibility = time.Millisecond // the server's least
	}
	if o.Wait <= 0 || o.Wait > 20*time.Second {
		o.Wait = 20 * time.Second
	}
	if o.NackDelay == 0 {
		o.NackDelay = 5 * time.Second
	} else if o.NackDelay < 0 {
		o.NackDelay = 0
	}
	return o
}

// Consume receives the tenant's messages and runs handle on each, up to o.Concurrency at
// once, until ctx is cancelled: it long-polls a receive for as many messages as handlers are
// free, extends the lease of a handler still running at half its visibility, acknowledges
// (in batches) each message handled without error and nacks the others with o.NackDelay.
// A receive that fails with 503, 429 rate_limited, 408 or a transport error is not repeated
// but followed, after a backoff of the client's RetryPolicy (never shorter than
// Retry-After), by a new one: the messages a lost answer leased come back when their leases
// end. When ctx is cancelled it receives no more (a receive in flight is abandoned, and what
// it leased comes back when its lease ends; messages received as it stopped are given back
// at once), waits for the running handlers, acknowledges or nacks their messages, and
// returns nil. Any other failure of a receive (401, 404 for a tenant without a queue, 501
// on Redis) stops it the same way and is returned.
func (c *Client) Consume(ctx context.Context, tenant string, handle Handler, o ConsumeOptions) error {
	o = o.withDefaults()
	bg, stopBg := context.WithCancel(context.Background())
	defer stopBg()
	l := &consumer{c: c, tenant: tenant, handle: handle, o: o, bg: bg, stopped: ctx.Done(),
		gate: make(chan struct{}, o.Concurrency), leases: map[string]*held{}, flush: make(chan struct{}, 1)}
	settled := make(chan struct{})
	stopSettler := make(chan struct{})
	go func() { l.settler(stopSettler); close(settled) }()
	err := l.receiveLoop(ctx)
	l.running.Wait()
	close(stopSettler)
	<-settled
	return err
}

type consumer struct {
	c       *Client
	tenant  string
	handle  Handler
	o       ConsumeOptions
	bg      context.Context // settles and handlers: not cancelled by the caller's stop
	stopped <-chan struct{}
	gate    chan struct{} // a token per running handler
	running sync.WaitGroup

	mu     sync.Mutex
	leases map[string]*held // the messages held, running or waiting, by receipt
	acks   []string
	flush  chan struct{}
}

// held is a held message's lease: when it ends, and how to tell the handler it is lost.
type held struct {
	ends time.Time
	lost context.CancelFunc
}

func (l *consumer) report(err error) {
	if l.o.OnError != nil && err != nil {
		l.o.OnError(err)
	}
}

func (l *consumer) receiveLoop(ctx context.Context) error {
	most := l.o.Concurrency + l.o.Prefetch
	if most > 1000 {
		most = 1000
	}
	low := l.o.Prefetch / 2
	if low < 1 {
		low = 1
	} else if low > most {
		low = most
	}
	slots := make(chan struct{}, most) // a token per message held
	failures, free := 0, 0
	for {
	more:
		for free < most {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		if free < low {
			select {
			case slots <- struct{}{}:
				free++
				continue
			case <-ctx.Done():
				return nil
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		sent := time.Now()
		msgs, err := l.c.Receive(ctx, l.tenant, ReceiveOptions{Max: free, WaitMs: l.o.Wait.Milliseconds(), VisibilityMs: l.o.Visibility.Milliseconds()})
		if ctx.Err() != nil {
			l.giveBack(msgs)
			return nil
		}
		if err != nil {
			if !retriable(err) {
				return err
			}
			failures++
			l.report(err)
			wait := l.backoff(failures, RetryAfter(err))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		failures = 0
		free -= len(msgs)
		// The leases began between the request and its answer: reckoned from a second
		// before the answer (from the request when it came sooner), an extend comes early
		// rather than late.
		began := time.Now().Add(-time.Second)
		if began.Before(sent) {
			began = sent
		}
		for _, m := range msgs {
			l.start(m, began.Add(l.o.Visibility), slots)
		}
	}
}

func (l *consumer) backoff(failures int, retryAfter time.Duration) time.Duration {
	p := l.c.retry
	if p.MaxDelay <= 0 {
		p = DefaultRetry
	}
	if failures > 30 {
		failures = 30
	}
	return p.backoff(failures, retryAfter)
}

// giveBack nacks without delay the messages a receive brought as the consumer stopped.
func (l *consumer) giveBack(msgs []Message) {
	receipts := make([]string, 0, len(msgs))
	for _, m := range msgs {
		receipts = append(receipts, m.Receipt)
	}
	if len(receipts) > 0 {
		l.settle("nack", receipts, 0)
	}
}

func (l *consumer) start(m Message, ends time.Time, slots chan struct{}) {
	hctx, lost := context.WithCancel(l.bg)
	l.mu.Lock()
	l.leases[m.Receipt] = &held{ends: ends, lost: lost}
	l.mu.Unlock()
	l.running.Add(1)
	go func() {
		defer l.running.Done()
		defer func() { <-slots }()
		l.gate <- struct{}{}
		defer func() { <-l.gate }()
		select {
		case <-l.stopped: // prefetched, not begun: given back
			l.mu.Lock()
			delete(l.leases, m.Receipt)
			l.mu.Unlock()
			lost()
			l.settle("nack", []string{m.Receipt}, 0)
			return
		default:
		}
		err := l.call(hctx, m)
		l.mu.Lock()
		delete(l.leases, m.Receipt)
		l.mu.Unlock()
		lost()
		if err != nil {
			l.report(fmt.Errorf("punctual: handling %s/%s: %w", l.tenant, m.Key, err))
			l.settle("nack", []string{m.Receipt}, l.o.NackDelay)
			return
		}
		l.mu.Lock()
		l.acks = append(l.acks, m.Receipt)
		full := len(l.acks) >= 100
		l.mu.Unlock()
		if full {
			select {
			case l.flush <- struct{}{}:
			default:
			}
		}
	}()
}

// call runs the handler, a panic being its failure.
func (l *consumer) call(ctx context.Context, m Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return l.handle(ctx, m)
}

// settler acknowledges the handled messages in batches (every 20 ms, or at 100) and extends
// the leases of running handlers that have half their visibility left, until stop; then it
// acknowledges what is left.
func (l *consumer) settler(stop chan struct{}) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			l.ackPending()
			return
		case <-l.flush:
		case <-tick.C:
			l.extendDue()
		}
		l.ackPending()
	}
}

func (l *consumer) ackPending() {
	for {
		l.mu.Lock()
		n := len(l.acks)
		if n > 1000 {
			n = 1000
		}
		batch := append([]string(nil), l.acks[:n]...)
		l.acks = l.acks[n:]
		l.mu.Unlock()
		if n == 0 {
			return
		}
		l.settle("ack", batch, 0)
	}
}

func (l *consumer) extendDue() {
	now := time.Now()
	var due []string
	l.mu.Lock()
	for r, h := range l.leases {
		if h.ends.Sub(now) <= l.o.Visibility/2 && len(due) < 1000 {
			due = append(due, r)
		}
	}
	l.mu.Unlock()
	if len(due) == 0 {
		return
	}
	results := l.settle("extend", due, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range results {
		h := l.leases[r.Receipt]
		if h == nil {
			continue
		}
		if r.Status == 204 {
			h.ends = now.Add(l.o.Visibility)
		} else if r.Status == 409 || r.Status == 404 {
			delete(l.leases, r.Receipt)
			h.lost()
		}
	}
}

// settle acks, nacks (with delay) or extends receipts, reporting each failure; the results
// of a call that failed as a whole are nil.
func (l *consumer) settle(route string, receipts []string, delay time.Duration) []SettleResult {
	ctx, cancel := context.WithTimeout(l.bg, settleTimeout)
	defer cancel()
	var results []SettleResult
	var err error
	switch route {
	case "ack":
		results, err = l.c.Ack(ctx, l.tenant, receipts)
	case "nack":
		results, err = l.c.Nack(ctx, l.tenant, NackRequest{Receipts: receipts, DelayMs: delay.Milliseconds()})
	default:
		results, err = l.c.Extend(ctx, l.tenant, ExtendRequest{Receipts: receipts, VisibilityMs: l.o.Visibility.Milliseconds()})
	}
	if err != nil {
		l.report(fmt.Errorf("punctual: %s of %d receipts: %w", route, len(receipts), err))
		return nil
	}
	for _, r := range results {
		if e := r.Err(); e != nil {
			l.report(fmt.Errorf("punctual: %s: %w", route, e))
		}
	}
	return results
}
