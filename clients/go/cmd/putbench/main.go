// putbench: PUTs per second through the client and through net/http alone, on one
// connection and on 16, against a running server (clients/bench/run.sh starts one).
//
//	go run ./cmd/putbench http://127.0.0.1:7480 3s
//
// Each variant runs for the given time, three times, alternated (client, raw, client, raw,
// …), and prints one JSON line per run: PUTs per second and this process's CPU per PUT.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	punctual "punctual/client"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: putbench URL DURATION")
		os.Exit(2)
	}
	base := os.Args[1]
	d, err := time.ParseDuration(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for round := 0; round < 3; round++ {
		for _, conns := range []int{1, 16} {
			for _, kind := range []string{"client", "raw"} {
				before := cpu()
				n := run(base, kind, conns, d)
				used := cpu() - before
				out, _ := json.Marshal(map[string]any{"lang": "go", "kind": kind, "conns": conns,
					"puts_per_s": float64(n) / d.Seconds(), "cpu_us_per_put": float64(used.Microseconds()) / float64(n)})
				fmt.Println(string(out))
			}
		}
	}
}

// cpu is the process's CPU time so far, user and system.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(base, kind string, conns int, d time.Duration) int64 {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	hc := &http.Client{Transport: tr}
	c := punctual.New(base, punctual.WithHTTPClient(hc))
	defer tr.CloseIdleConnections()
	var done int64
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; time.Now().Before(end); i++ {
				key := fmt.Sprintf("w%d-%d", w, i%1000)
				var err error
				if kind == "client" {
					_, err = c.Put(ctx, "bench", key, punctual.After(time.Hour).WithPayload(map[string]int{"order": i}))
				} else {
					err = rawPut(hc, base, key, i)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				atomic.AddInt64(&done, 1)
			}
		}(w)
	}
	wg.Wait()
	return done
}

func rawPut(hc *http.Client, base, key string, i int) error {
	body, _ := json.Marshal(map[string]any{"delay_ms": 3600000, "payload": map[string]int{"order": i}})
	req, err := http.NewRequest(http.MethodPut, base+"/v1/timers/bench/"+key, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var s struct {
		Version int64 `json:"version"`
	}
	if resp.StatusCode/100 != 2 || json.Unmarshal(b, &s) != nil {
		return fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	return nil
}
