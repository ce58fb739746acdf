package punctual_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"testing"
	"time"

	punctual "punctual/client"
)

// The README's quick start, run by `go test` against the test server (PUNCTUAL_URL).
func Example_quickstart() {
	ctx := context.Background()
	c := punctual.New(os.Getenv("PUNCTUAL_URL")) // e.g. http://127.0.0.1:7480
	// An order is created: close it in 15 minutes unless it is paid.
	s, err := c.Put(ctx, "shop", "order-8812", punctual.After(15*time.Minute).WithPayload(map[string]int{"order": 8812}))
	if err != nil {
		panic(err) // an *punctual.Error: its Code, Status and RetryAfter
	}
	fmt.Println("created:", s.Created)
	// It is paid: cancel. IsNotFound means it already fired (or was cancelled).
	if err := c.Cancel(ctx, "shop", "order-8812"); err != nil && !punctual.IsNotFound(err) {
		panic(err)
	}
	// Output: created: true
}

// The README's pull consumer, run against the test server's tenant "orders"
// (PUNCTUAL_QUEUE_URL, PUNCTUAL_TOKEN).
func Example_consume() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt) // Ctrl-C stops it cleanly
	defer stop()
	c := punctual.New(os.Getenv("PUNCTUAL_QUEUE_URL"), punctual.WithToken(os.Getenv("PUNCTUAL_TOKEN")))
	if _, err := c.Put(ctx, "orders", "order-8813", punctual.After(0).WithPayload(map[string]int{"order": 8813})); err != nil {
		panic(err)
	}
	err := c.Consume(ctx, "orders", func(ctx context.Context, m punctual.Message) error {
		fmt.Println("closing", m.Key, string(m.Payload))
		stop()     // a real consumer runs until it is stopped
		return nil // an error nacks the message: it comes back after NackDelay
	}, punctual.ConsumeOptions{Concurrency: 8, Visibility: time.Minute})
	if err != nil {
		panic(err)
	}
	// Output: closing order-8813 {"order":8813}
}

// Each ```go block of README.md is the body of its example, line for line.
func TestReadmeExamplesAreTheExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	rest := readme
	for _, name := range []string{"Example_quickstart", "Example_consume"} {
		start := bytes.Index(rest, []byte("```go\n"))
		if start < 0 {
			t.Fatalf("README.md has no ```go block for %s", name)
		}
		end := bytes.Index(rest[start+6:], []byte("```"))
		if end < 0 {
			t.Fatal("README.md has an unclosed ```go block")
		}
		block := strings.Split(strings.TrimSpace(string(rest[start+6:start+6+end])), "\n")
		rest = rest[start+6+end+3:]
		body := string(src[bytes.Index(src, []byte("func "+name+"() {")):])
		lines := strings.Split(body, "\n")[1:]
		for i, want := range block {
			if i >= len(lines) || strings.TrimSpace(lines[i]) != strings.TrimSpace(want) {
				t.Fatalf("README line %d %q is not %s's %q", i+1, want, name, lines[min(i, len(lines)-1)])
			}
		}
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
