package punctual_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
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

// The quick start in README.md is the body of Example_quickstart, line for line.
func TestReadmeQuickstartIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(readme, []byte("```go\n"))
	end := bytes.Index(readme[start+6:], []byte("```"))
	if start < 0 || end < 0 {
		t.Fatal("README.md has no ```go block")
	}
	block := strings.Split(strings.TrimSpace(string(readme[start+6:start+6+end])), "\n")
	body := string(src[bytes.Index(src, []byte("func Example_quickstart() {")):])
	lines := strings.Split(body, "\n")[1:]
	for i, want := range block {
		if i >= len(lines) || strings.TrimSpace(lines[i]) != strings.TrimSpace(want) {
			t.Fatalf("README line %d %q is not the example's %q", i+1, want, lines[min(i, len(lines)-1)])
		}
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
