package punctual_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	punctual "punctual/client"
)

// The history shows each fire's delivery attempts and where it ended: a webhook answered
// 503 then 204 is delivered after two attempts, one refused with 400 is a dead letter after
// one; the key selects one timer's entries, and the cursor pages through the rest.
func TestHistoryShowsAttemptsAndOutcomeByKey(t *testing.T) {
	c := punctual.New(open.URL)
	var mu sync.Mutex
	answered := map[string]int{}
	hook := mount("/history", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d punctual.WebhookDelivery
		_ = json.NewDecoder(r.Body).Decode(&d)
		key := d.Key
		mu.Lock()
		answered[key]++
		n := answered[key]
		mu.Unlock()
		switch {
		case key == "refused":
			w.WriteHeader(http.StatusBadRequest)
		case n == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	versions := map[string]int64{}
	for _, k := range []string{"refused", "late-ok"} {
		s, err := c.Put(ctx(t), "histt", k, punctual.After(0).WithCallback(hook))
		if err != nil {
			t.Fatal(err)
		}
		versions[k] = s.Version
	}

	// The outcome is written off the fire path: wait for both to settle.
	settled := func(k string, want punctual.HistoryOutcome) punctual.HistoryEntry {
		t.Helper()
		var page punctual.HistoryPage
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			var err error
			if page, err = c.History(ctx(t), "histt", punctual.HistoryOptions{Key: k}); err != nil {
				t.Fatal(err)
			}
			if len(page.Entries) == 1 && page.Entries[0].Outcome == want {
				return page.Entries[0]
			}
		}
		t.Fatalf("history of %s: %+v, want one entry %s", k, page, want)
		return punctual.HistoryEntry{}
	}

	ok := settled("late-ok", punctual.OutcomeDelivered)
	if ok.Key != "late-ok" || ok.Version != versions["late-ok"] || ok.FiredAtUs < ok.FireAtUs || ok.LatenessUs != ok.FiredAtUs-ok.FireAtUs {
		t.Fatalf("delivered entry: %+v", ok)
	}
	if len(ok.Attempts) != 2 || ok.Attempts[0].Status == nil || *ok.Attempts[0].Status != 503 || ok.Attempts[0].Error != nil ||
		ok.Attempts[1].Status == nil || *ok.Attempts[1].Status != 204 || ok.Attempts[1].AtUs < ok.Attempts[0].AtUs {
		t.Fatalf("delivered entry's attempts: %+v", ok.Attempts)
	}

	dead := settled("refused", punctual.OutcomeDeadLettered)
	if dead.Version != versions["refused"] || len(dead.Attempts) != 1 || dead.Attempts[0].Status == nil || *dead.Attempts[0].Status != 400 {
		t.Fatalf("dead-lettered entry: %+v", dead)
	}

	// All the tenant's entries, one a page, newest first, through the cursor.
	first, err := c.History(ctx(t), "histt", punctual.HistoryOptions{Limit: 1})
	if err != nil || len(first.Entries) != 1 || first.Next == "" {
		t.Fatalf("first page: %+v %v", first, err)
	}
	second, err := c.History(ctx(t), "histt", punctual.HistoryOptions{Limit: 1, After: first.Next})
	if err != nil || len(second.Entries) != 1 {
		t.Fatalf("second page: %+v %v", second, err)
	}
	got := map[string]bool{first.Entries[0].Key: true, second.Entries[0].Key: true}
	if !got["refused"] || !got["late-ok"] {
		t.Fatalf("pages: %+v then %+v", first, second)
	}
	if second.Next != "" { // a full last page may still name a cursor: what follows is empty
		if rest, err := c.History(ctx(t), "histt", punctual.HistoryOptions{After: second.Next}); err != nil || len(rest.Entries) != 0 || rest.Next != "" {
			t.Fatalf("after the last entry: %+v %v", rest, err)
		}
	}
}
