package punctual

import (
	"math/rand"
	"sync"
	"time"
)

// RetryPolicy says how calls that are safe to repeat are retried. The wait before attempt
// n+1 is a uniform draw from [0, min(MaxDelay, BaseDelay·2^(n−1))] ("full jitter"), raised to
// the answer's Retry-After when that is longer. No wait outlasts the call's context: a call
// whose next wait would pass its deadline returns the last error at once.
type RetryPolicy struct {
	// MaxAttempts counts every attempt, the first included; 1 turns retries off.
	MaxAttempts int
	BaseDelay   time.Duration
	MaxDelay    time.Duration
	// AttemptTimeout bounds each attempt (0: only the context bounds it), so that a server
	// that stopped answering is tried again rather than waited on.
	AttemptTimeout time.Duration
	// OnRetry, when set, is called before each wait with the attempt that failed (1 for the
	// first), its error and the wait.
	OnRetry func(attempt int, err error, wait time.Duration)
}

// DefaultRetry: 5 attempts, waits from 100 ms up to 5 s, 10 s per attempt.
var DefaultRetry = RetryPolicy{
	MaxAttempts:    5,
	BaseDelay:      100 * time.Millisecond,
	MaxDelay:       5 * time.Second,
	AttemptTimeout: 10 * time.Second,
}

// NoRetry makes every call a single attempt.
var NoRetry = RetryPolicy{MaxAttempts: 1}

func (p RetryPolicy) backoff(attempt int, retryAfter time.Duration) time.Duration {
	ceiling := p.MaxDelay
	if p.BaseDelay > 0 && attempt < 32 {
		if d := p.BaseDelay << (attempt - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	var wait time.Duration
	if ceiling > 0 {
		jitter.Lock()
		wait = time.Duration(jitter.r.Int63n(int64(ceiling) + 1))
		jitter.Unlock()
	}
	if retryAfter > wait {
		wait = retryAfter
	}
	return wait
}

// jitter is seeded per process (Go 1.19's global source is not), so that clients restarted
// together do not retry in step.
var jitter = struct {
	sync.Mutex
	r *rand.Rand
}{r: rand.New(rand.NewSource(time.Now().UnixNano()))}
